/**
 * Section 1, the detection matrix: engine cells (preset × faults × defenses, cells.ts) against the
 * prober's scenarios, `cycles` cycles per (cell, scenario) series, each series on a fresh engine.
 *
 * Each cell is first started once to learn whether this engine build can provide it. Then every series
 * of every available cell runs: those of timing-sensitive scenarios (EXCLUSIVE_SCENARIOS) on cells that can
 * detect something one at a time with nothing else in flight, the others `jobs` at a time (pool.ts); results are put back in cell order.
 */
import { EXCLUSIVE_SCENARIOS, type EngineCell } from './cells.js';
import { startCellEngine } from './engine-cell.js';
import { mapPool } from './pool.js';
import { runSeries, type SeriesResult } from './series.js';

export interface MatrixOptions {
  cells: readonly EngineCell[];
  scenarios: readonly string[];
  /** Run every scenario on every cell (not only those aimed at a cell's fault). */
  allScenarios: boolean;
  /** Stop a series after this many cycles if all were inconclusive (undefined: run every cycle). */
  stopIfAllInconclusive?: number;
  cycles: number;
  scale: number;
  jobs: number;
  progress: (line: string) => void;
}

export interface MatrixCell {
  cell: EngineCell;
  available: boolean;
  reason?: string;
  series: Array<{ scenario: string } & SeriesResult>;
}

export interface MatrixResult {
  cycles: number;
  scale: number;
  scenarios: string[];
  cells: MatrixCell[];
}

export function scenariosFor(cell: EngineCell, scenarios: readonly string[], all: boolean): string[] {
  if (all || cell.aimed === undefined) return [...scenarios];
  return scenarios.filter((s) => cell.aimed!.includes(s));
}

export async function runMatrix(opts: MatrixOptions): Promise<MatrixResult> {
  const cells: MatrixCell[] = [];
  for (const cell of opts.cells) {
    const started = await startCellEngine(cell, { scale: opts.scale });
    if (started.ok) {
      await started.engine.close();
      cells.push({ cell, available: true, series: [] });
    } else {
      cells.push({ cell, available: false, reason: started.reason, series: [] });
      opts.progress(`[matrix] ${cell.id}: unavailable (${started.reason})`);
    }
  }
  const work = cells.flatMap((c, ci) => (c.available ? scenariosFor(c.cell, opts.scenarios, opts.allScenarios).map((scenario) => ({ ci, scenario })) : []));
  let done = 0;
  // A negative cell has no detection to lose to a shared CPU: its timing-sensitive series share the pool too.
  const exclusive = (w: { ci: number; scenario: string }): boolean => EXCLUSIVE_SCENARIOS.includes(w.scenario) && cells[w.ci]!.cell.role !== 'negative';
  const shared = work.filter((w) => !exclusive(w));
  const alone = work.filter(exclusive);
  const one = async ({ ci, scenario }: { ci: number; scenario: string }) => {
    const cell = cells[ci]!.cell;
    const t0 = performance.now();
    const result = await runSeries({
      cell,
      scenario,
      cycles: opts.cycles,
      scale: opts.scale,
      ...(opts.stopIfAllInconclusive !== undefined ? { stopIfAllInconclusive: opts.stopIfAllInconclusive } : {}),
    });
    done++;
    const s = result.summary;
    opts.progress(
      s === undefined
        ? `[matrix ${done}/${work.length}] ${cell.id} × ${scenario}: unavailable (${result.reason})`
        : `[matrix ${done}/${work.length}] ${cell.id} × ${scenario}: ${s.cycles} cycles, marker ${s.marker.detected.successes}, ` +
            `rejection ${s.rejection.detected.successes}${s.other.map((o) => `, ${o.kind} ${o.detected.successes}`).join('')}; ` +
            `${s.outcomes.inconclusive} inconclusive${s.truth !== undefined ? `; exposed responses ${s.truth.exposedResponses}` : ''}` +
            `${result.stoppedEarly !== undefined ? ` (stopped: ${result.stoppedEarly})` : ''} (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
    );
    return { ci, scenario, result };
  };
  const results = [...(await mapPool(shared, opts.jobs, one)), ...(await mapPool(alone, 1, one))];
  const order = (x: { ci: number; scenario: string }): number => x.ci * 1000 + opts.scenarios.indexOf(x.scenario);
  results.sort((a, b) => order(a) - order(b));
  for (const { ci, scenario, result } of results) cells[ci]!.series.push({ scenario, ...result });
  return { cycles: opts.cycles, scale: opts.scale, scenarios: [...opts.scenarios], cells };
}
