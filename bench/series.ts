/**
 * A measured series: a fresh engine for one cell, the tap in front of it, and `cycles` probe cycles of one
 * scenario, each followed by a drain. Shared by the detection matrix, the load sweep and the planter-size
 * search, which differ only in what they vary around it.
 */
import type { ProbeTuning } from '../prober/src/probe/scenarios/context.js';
import type { EngineCell, FreeListPolicy } from './cells.js';
import { createProbeSeries, type CycleRecord, type FindingSample } from './cycle.js';
import { startCellEngine, type CellEngine, type CellStartOptions } from './engine-cell.js';
import { summarizeSeries, type SeriesSummary } from './summary.js';
import { startTap } from './tap.js';

export interface SeriesSpec {
  cell: EngineCell;
  scenario: string;
  cycles: number;
  scale: number;
  freeList?: FreeListPolicy;
  /** Model copy fidelity and request temperature (engine-cell.ts); the engine's defaults otherwise. */
  model?: CellStartOptions['model'];
  temperature?: number;
  tuning?: ProbeTuning;
  /** Stops the series early once this says the answer is known (e.g. a size that already missed twice). */
  stopWhen?: (records: readonly CycleRecord[]) => boolean;
  /**
   * Stop after this many cycles if every one of them was inconclusive: an inconclusive cycle raised nothing
   * and established nothing, so further cycles of a scenario that cannot conclude against this engine
   * (no cached-token reporting, a defense that fails requests closed) measure no detection at all.
   * The report says the series stopped and why. Undefined: never stop early.
   */
  stopIfAllInconclusive?: number;
  /** Stop after the cycle that ends past this many milliseconds (a saturated engine makes cycles slow). */
  maxMs?: number;
  /** Runs beside the cycles (background load); started before the first cycle, stopped after the last. */
  around?: (engine: CellEngine) => Promise<Around>;
}

export interface Around {
  stop(): Promise<unknown>;
  /** Engine ids of its requests, for the ground truth (they are not the prober's). */
  engineIds?(): Iterable<number>;
}

export interface SeriesResult {
  available: boolean;
  reason?: string;
  engine?: { poolTokens: number; contextTokens: number };
  summary?: SeriesSummary;
  /** Per cycle: outcome letter (P pass, F fail, I inconclusive). */
  outcomes?: string;
  /** Per cycle: 1 where the marker / rejection signal fired. */
  markerTrace?: string;
  rejectionTrace?: string;
  /** What `around` returned when it stopped (e.g. load achieved). */
  aroundResult?: unknown;
  engineLog?: string[];
  /** Drains that timed out (an engine that kept requests in flight after a cycle). */
  undrained?: number;
  /** Why the series ran fewer cycles than asked, if it did. */
  stoppedEarly?: string;
  /** The first findings of the series other than `pool-below-context` (at most 3), with their evidence facts. */
  samples?: FindingSample[];
}

export async function runSeries(spec: SeriesSpec, onCycle?: (r: CycleRecord) => void): Promise<SeriesResult> {
  const started = await startCellEngine(spec.cell, {
    scale: spec.scale,
    ...(spec.freeList !== undefined ? { freeList: spec.freeList } : {}),
    ...(spec.model !== undefined ? { model: spec.model } : {}),
    ...(spec.temperature !== undefined ? { temperature: spec.temperature } : {}),
  });
  if (!started.ok) return { available: false, reason: started.reason };
  const engine = started.engine;
  const tap = await startTap(engine.url);
  let undrained = 0;
  const records: CycleRecord[] = [];
  let aroundResult: unknown;
  let stoppedEarly: string | undefined;
  let around: Around | undefined;
  try {
    const series = createProbeSeries({
      url: tap.url,
      name: spec.cell.id,
      ...(spec.tuning !== undefined ? { tuning: spec.tuning } : {}),
      truth: {
        tap,
        engine: engine.running.engine,
        drain: async () => {
          if (!(await engine.drain())) undrained++;
        },
        otherEngineIds: () => around?.engineIds?.() ?? [],
        submissions: engine.submissions,
      },
    });
    around = spec.around === undefined ? undefined : await spec.around(engine);
    const seriesStart = performance.now();
    try {
      for (let i = 0; i < spec.cycles; i++) {
        const r = await series.run(spec.scenario);
        records.push(r);
        onCycle?.(r);
        if (spec.stopWhen?.(records) === true) break;
        if (spec.maxMs !== undefined && performance.now() - seriesStart > spec.maxMs && i + 1 < spec.cycles) {
          stoppedEarly = `time cap of ${Math.round(spec.maxMs / 1000)} s reached after ${records.length} cycles`;
          break;
        }
        const k = spec.stopIfAllInconclusive;
        if (k !== undefined && records.length === k && records.every((x) => x.outcome === 'inconclusive')) {
          stoppedEarly = `all ${k} cycles inconclusive: the scenario cannot conclude against this engine`;
          break;
        }
      }
    } finally {
      if (around !== undefined) aroundResult = await around.stop();
    }
  } finally {
    await tap.close();
    await engine.close();
  }
  return {
    available: true,
    engine: { poolTokens: engine.poolTokens, contextTokens: engine.contextTokens },
    summary: summarizeSeries(records),
    outcomes: records.map((r) => (r.outcome === 'pass' ? 'P' : r.outcome === 'fail' ? 'F' : 'I')).join(''),
    markerTrace: records.map((r) => ((r.findings['cross-request-leak'] ?? 0) > 0 ? '1' : '0')).join(''),
    rejectionTrace: records.map((r) => ((r.findings['rejection-not-enforced'] ?? 0) > 0 ? '1' : '0')).join(''),
    ...(aroundResult !== undefined ? { aroundResult } : {}),
    ...(engine.logLines().length > 0 ? { engineLog: engine.logLines() } : {}),
    ...(undrained > 0 ? { undrained } : {}),
    ...(stoppedEarly !== undefined ? { stoppedEarly } : {}),
    ...(samplesOf(records).length > 0 ? { samples: samplesOf(records) } : {}),
  };
}

function samplesOf(records: readonly CycleRecord[]): FindingSample[] {
  return records.flatMap((r) => r.samples ?? []).filter((x) => x.kind !== 'pool-below-context').slice(0, 3);
}
