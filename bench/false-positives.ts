/**
 * Section 3, false positives: probe pairs against endpoints that keep requests apart — the remediated and
 * hardened engines, and a server that echoes each request's own markers and pads with marker-shaped noise
 * (random hex, base32, words, the `kvcanary-` prefix) — at least `pairs` pairs per target.
 *
 * A pair is one planted request and one later response of the same cycle scanned for its markers (every
 * non-planter, non-calibration response of a cycle that planted). Findings a target really deserves are
 * expected and not counted: hardened keeps the incident's capacities, so `pool-below-context` is a true
 * finding there.
 *
 * Every cycle the detection matrix ran on a negative engine in the same invocation already is such a probe,
 * so those cycles are counted first (all scenarios, a fresh marker registry per scenario series); the
 * target is then topped up, scenarios round-robin with one registry (as `serve` keeps one, so every earlier
 * marker stays live: more live markers, more chances of a chance match), until it has `pairs` pairs.
 */
import { echoNoiseServer } from '../test/helpers/fake-endpoints.js';
import type { EngineCell } from './cells.js';
import { createProbeSeries, type FindingSample } from './cycle.js';
import type { MatrixResult } from './detection.js';
import { startCellEngine } from './engine-cell.js';
import { mapPool } from './pool.js';
import { zeroEventUpperBound } from './proportion.js';

export interface FalsePositiveOptions {
  cells: readonly EngineCell[];
  /** Used when none of `cells` is available in this engine build. */
  fallback?: EngineCell;
  scenarios: readonly string[];
  pairs: number;
  scale: number;
  jobs: number;
  /** The matrix of this invocation, if it ran: its cycles on these cells count. */
  prior?: MatrixResult;
  /**
   * Engine targets only: at least this many cycles of a scenario, pairs or not. prefix-isolation's timing
   * test has a stated false-alarm rate (alpha 0.001 a cycle): its claim needs runs, not pairs.
   */
  minCycles?: Readonly<Record<string, number>>;
  progress: (line: string) => void;
}

export interface ScenarioTally {
  cycles: number;
  pairs: number;
  inconclusive: number;
}

export interface FalsePositiveTarget {
  target: string;
  available: boolean;
  reason?: string;
  /** Finding kinds that are true for this target (not counted). */
  expected: string[];
  pairs: number;
  cycles: number;
  /** Of which counted from the detection matrix's series. */
  fromMatrix: { cycles: number; pairs: number };
  perScenario: Record<string, ScenarioTally>;
  /** Unexpected findings by kind (the false positives). */
  falsePositives: Record<string, number>;
  expectedFindings: Record<string, number>;
  /** Evidence of the first false positives (at most 3): kind, scenario, match line, facts. */
  samples: FindingSample[];
  /** Exact one-sided 95% upper bound on false positives per pair, when there were none. */
  upperBoundPerPair: number | null;
  /** Engines only: the engine's foreign page reads over the counted cycles (ground truth that isolation held). */
  foreignPageReads?: number;
  seconds: number;
}

export interface FalsePositiveResult {
  pairsTarget: number;
  scale: number;
  targets: FalsePositiveTarget[];
}

const EXPECTED: Record<string, string[]> = { hardened: ['pool-below-context'] };

function emptyTarget(target: string, expected: string[]): FalsePositiveTarget {
  return { target, available: true, expected, pairs: 0, cycles: 0, fromMatrix: { cycles: 0, pairs: 0 }, perScenario: {}, falsePositives: {}, expectedFindings: {}, samples: [], upperBoundPerPair: null, seconds: 0 };
}

function addSamples(t: FalsePositiveTarget, samples: readonly FindingSample[] | undefined): void {
  for (const x of samples ?? []) if (!t.expected.includes(x.kind) && t.samples.length < 3) t.samples.push(x);
}

function addFindings(t: FalsePositiveTarget, findings: Record<string, number>): void {
  for (const [kind, n] of Object.entries(findings)) {
    if (n === 0) continue;
    const bucket = t.expected.includes(kind) ? t.expectedFindings : t.falsePositives;
    bucket[kind] = (bucket[kind] ?? 0) + n;
  }
}

/** Counts the matrix's series on `cellId` into a fresh target tally. */
export function fromMatrix(prior: MatrixResult | undefined, cellId: string, target: FalsePositiveTarget): void {
  const cell = prior?.cells.find((c) => c.cell.id === cellId && c.available);
  if (cell === undefined) return;
  let reads = 0;
  for (const s of cell.series) {
    const x = s.summary;
    if (x === undefined) continue;
    const tally = (target.perScenario[s.scenario] ??= { cycles: 0, pairs: 0, inconclusive: 0 });
    tally.cycles += x.cycles;
    tally.pairs += x.pairs;
    tally.inconclusive += x.outcomes.inconclusive;
    target.cycles += x.cycles;
    target.pairs += x.pairs;
    target.fromMatrix.cycles += x.cycles;
    target.fromMatrix.pairs += x.pairs;
    addFindings(target, x.findingsTotal);
    addSamples(target, s.samples);
    reads += x.truth?.foreignPageReads ?? 0;
  }
  target.foreignPageReads = reads;
}

export async function runFalsePositives(opts: FalsePositiveOptions): Promise<FalsePositiveResult> {
  type Job = { kind: 'engine'; cell: EngineCell; label: string } | { kind: 'noise' };
  const jobs: Job[] = opts.cells.map((cell) => ({ kind: 'engine' as const, cell, label: cell.id }));
  const available = await Promise.all(opts.cells.map(async (cell) => {
    const s = await startCellEngine(cell, { scale: opts.scale });
    if (s.ok) await s.engine.close();
    return s.ok ? undefined : s.reason;
  }));
  if (available.every((r) => r !== undefined) && opts.fallback !== undefined) {
    jobs.push({ kind: 'engine', cell: opts.fallback, label: `${opts.fallback.id} (stand-in: no remediated/hardened preset in this engine build)` });
  }
  jobs.push({ kind: 'noise' });
  const targets = await mapPool(jobs, opts.jobs, async (job, i): Promise<FalsePositiveTarget> => {
    if (job.kind === 'noise') {
      const noise = await echoNoiseServer({ context: Math.floor(1_048_576 / opts.scale), seed: 7 });
      try {
        return await topUp(emptyTarget('self-echo/noise server', []), noise.url, opts);
      } finally {
        await noise.close();
      }
    }
    const reason = available[i];
    if (reason !== undefined) {
      opts.progress(`[false positives] ${job.label}: unavailable (${reason})`);
      return { ...emptyTarget(job.label, []), available: false, reason };
    }
    const t = emptyTarget(job.label, EXPECTED[job.cell.preset] ?? []);
    fromMatrix(opts.prior, job.cell.id, t);
    if (t.pairs >= opts.pairs && cyclesShort(t, opts.minCycles).length === 0) return finish(t, 0);
    const started = await startCellEngine(job.cell, { scale: opts.scale });
    if (!started.ok) return { ...t, available: false, reason: started.reason };
    try {
      const before = started.engine.running.engine.stats().foreignPageReadsTotal;
      await topUp(t, started.engine.url, opts, opts.minCycles);
      t.foreignPageReads = (t.foreignPageReads ?? 0) + started.engine.running.engine.stats().foreignPageReadsTotal - before;
      return t;
    } finally {
      await started.engine.close();
    }
  });
  return { pairsTarget: opts.pairs, scale: opts.scale, targets };
}

function finish(t: FalsePositiveTarget, seconds: number): FalsePositiveTarget {
  const fp = Object.values(t.falsePositives).reduce((a, b) => a + b, 0);
  t.upperBoundPerPair = fp === 0 ? zeroEventUpperBound(t.pairs) : null;
  t.seconds = seconds;
  return t;
}

/** Scenarios of `minCycles` (among those run) the target has not yet run often enough. */
function cyclesShort(t: FalsePositiveTarget, minCycles: Readonly<Record<string, number>> | undefined): string[] {
  return Object.entries(minCycles ?? {})
    .filter(([scenario, n]) => (t.perScenario[scenario]?.cycles ?? 0) < n)
    .map(([scenario]) => scenario);
}

/**
 * Round-robin over the scenarios with one registry until the target has `opts.pairs` pairs, then the
 * scenarios still short of `minCycles` until they have them.
 */
async function topUp(t: FalsePositiveTarget, url: string, opts: FalsePositiveOptions, minCycles?: Readonly<Record<string, number>>): Promise<FalsePositiveTarget> {
  const t0 = performance.now();
  const series = createProbeSeries({ url, name: 'fp' });
  const runOne = async (scenario: string): Promise<number> => {
    const r = await series.run(scenario);
    t.cycles++;
    t.pairs += r.pairs;
    const s = (t.perScenario[scenario] ??= { cycles: 0, pairs: 0, inconclusive: 0 });
    s.cycles++;
    s.pairs += r.pairs;
    if (r.outcome === 'inconclusive') s.inconclusive++;
    addFindings(t, r.findings);
    addSamples(t, r.samples);
    return r.pairs;
  };
  let reported = t.pairs;
  for (let round = 0; t.pairs < opts.pairs; round++) {
    let pairsThisRound = 0;
    for (const scenario of opts.scenarios) {
      pairsThisRound += await runOne(scenario);
      if (t.pairs >= opts.pairs) break;
    }
    // A target that yields no pairs at all would loop forever: stop after a few rounds and say so.
    if (pairsThisRound === 0 && round >= 2) {
      opts.progress(`[false positives] ${t.target}: no pairs in 3 rounds; stopping at ${t.pairs}`);
      break;
    }
    if (t.pairs - reported >= opts.pairs / 4 || t.pairs >= opts.pairs) {
      reported = t.pairs;
      opts.progress(`[false positives] ${t.target}: ${t.pairs}/${opts.pairs} pairs, ${Object.values(t.falsePositives).reduce((a, b) => a + b, 0)} false positive(s)`);
    }
  }
  const short = cyclesShort(t, minCycles).filter((s) => opts.scenarios.includes(s));
  for (const scenario of short) {
    while ((t.perScenario[scenario]?.cycles ?? 0) < minCycles![scenario]!) await runOne(scenario);
    opts.progress(`[false positives] ${t.target}: ${scenario} at ${t.perScenario[scenario]!.cycles} cycles`);
  }
  return finish(t, (performance.now() - t0) / 1000);
}
