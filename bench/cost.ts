/**
 * Section 4, cost. Two measurements (tokens per cycle and scenario for every cell come from the matrix):
 *
 * - Planter-size search, on incident with overlimit-handoff: the tokens planted per cycle
 *   (ProbeTuning.plantTokens; the default is the whole advertised pool) swept over fractions of the pool,
 *   `cycles` cycles from a fresh engine at each size. The answer is the smallest size whose per-cycle
 *   marker detection is >= 0.99 and stays so at every larger size measured (the raw curve is reported too),
 *   and the same for detection by either signal (marker or rejection).
 *   Every size runs all its cycles from a fresh engine (no early stop: the first cycles on a fresh engine
 *   can miss where later ones do not, and the figure is the whole series'). The rejection signal does not
 *   depend on planting, so the search is about the marker signal.
 * - Scale projection: tokens per cycle of every scenario measured at two scales (s and 2s). The prober
 *   sizes its prompts from what the endpoint advertises, so cost is a + b/scale; two points fix a and b,
 *   and scale 1 (a 1,048,576-token context) is the projection an operator budgets with. The fit is checked,
 *   not assumed: the report shows both measured points.
 */
import { ALL_CELLS, SINGLE_CELL, type EngineCell } from './cells.js';
import { mapPool } from './pool.js';
import { runSeries } from './series.js';
import { proportion, type Proportion } from './proportion.js';

export interface CostOptions {
  /** The cell to search and project on (incident; a stand-in when this engine build has none). */
  cell: EngineCell;
  fallback?: EngineCell;
  scenarios: readonly string[];
  /** Cycles per planter size. */
  searchCycles: number;
  /** Cycles per scenario and scale for the projection. */
  projectionCycles: number;
  scale: number;
  /** Fractions of the advertised pool. */
  fractions?: readonly number[];
  jobs: number;
  progress: (line: string) => void;
}

export interface PlanterPoint {
  fraction: number;
  plantTokens: number;
  marker: Proportion;
  /** Cycle of the series (fresh engine) where the marker signal first fired; null if never. */
  markerFirst: number | null;
  rejection: Proportion;
  /** Cycles where either signal fired: what detects the fault, since both are critical. */
  either: Proportion;
  sentPerCycle: number;
  billedPerCycle: number;
}

export interface ProjectionRow {
  scenario: string;
  /** Measured at scale s and 2s. */
  at: Array<{ scale: number; sentPerCycle: number; billedPerCycle: number; cycles: number }>;
  /** a + b/scale at scale 1. */
  projectedSent: number;
  projectedBilled: number;
}

export interface CostResult {
  cell: string;
  available: boolean;
  reason?: string;
  scale: number;
  poolTokens?: number;
  contextTokens?: number;
  search: PlanterPoint[];
  /** Smallest planted tokens per cycle keeping marker detection >= 0.99 at this and every larger size. */
  smallest: PlanterPoint | null;
  /** The same for detection by either signal (marker or rejection). */
  smallestEither: PlanterPoint | null;
  /** That size projected to full scale (same fraction of the full-scale pool). */
  smallestFullScaleTokens: number | null;
  projection: ProjectionRow[];
}

export const PLANTER_FRACTIONS: readonly number[] = [1 / 256, 1 / 128, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2];
/** The default run's sizes, a factor of 4 apart (--full measures the whole curve). */
export const PLANTER_FRACTIONS_QUICK: readonly number[] = [1 / 64, 1 / 16, 1 / 4, 1];
export const DETECTION_GOAL = 0.99;

/** Smallest point meeting the goal with every larger point meeting it too (points sorted by size). */
export function smallestSufficient(
  points: readonly PlanterPoint[],
  goal = DETECTION_GOAL,
  signal: (p: PlanterPoint) => Proportion = (p) => p.marker,
): PlanterPoint | null {
  let best: PlanterPoint | null = null;
  for (let i = points.length - 1; i >= 0; i--) {
    const p = signal(points[i]!).p;
    if (p === null || p < goal) break;
    best = points[i]!;
  }
  return best;
}

/** a + b/scale through two measured points, evaluated at scale 1. */
export function projectToScaleOne(s1: number, v1: number, s2: number, v2: number): number {
  if (s1 === s2) return v1 * s1;
  const b = (v1 - v2) / (1 / s1 - 1 / s2);
  const a = v1 - b / s1;
  return a + b;
}

export async function runCost(opts: CostOptions): Promise<CostResult> {
  let cell = opts.cell;
  let probe = await runSeries({ cell, scenario: 'capacity-audit', cycles: 1, scale: opts.scale });
  if (!probe.available && opts.fallback !== undefined) {
    opts.progress(`[cost] ${cell.id} unavailable (${probe.reason}); using ${opts.fallback.id} as a stand-in`);
    cell = opts.fallback;
    probe = await runSeries({ cell, scenario: 'capacity-audit', cycles: 1, scale: opts.scale });
  }
  const out: CostResult = { cell: cell.id, available: probe.available, scale: opts.scale, search: [], smallest: null, smallestEither: null, smallestFullScaleTokens: null, projection: [] };
  if (!probe.available) {
    out.reason = probe.reason ?? 'unavailable';
    return out;
  }
  out.poolTokens = probe.engine!.poolTokens;
  out.contextTokens = probe.engine!.contextTokens;

  const pool = out.poolTokens;
  out.search = await mapPool(opts.fractions ?? PLANTER_FRACTIONS, opts.jobs, async (fraction): Promise<PlanterPoint> => {
    const plantTokens = Math.max(64, Math.round(fraction * pool));
    const r = await runSeries({
      cell,
      scenario: 'overlimit-handoff',
      cycles: opts.searchCycles,
      scale: opts.scale,
      tuning: { plantTokens },
    });
    const s = r.summary!;
    opts.progress(`[cost] plant ${plantTokens} tokens (${fraction} pool): marker ${s.marker.detected.successes}/${s.cycles}, rejection ${s.rejection.detected.successes}/${s.cycles}`);
    const m = r.markerTrace ?? '';
    const rej = r.rejectionTrace ?? '';
    const either = [...m].filter((c, i) => c === '1' || rej[i] === '1').length;
    return {
      fraction,
      plantTokens,
      marker: s.marker.detected,
      markerFirst: s.marker.first?.cycle ?? null,
      rejection: s.rejection.detected,
      either: proportion(either, s.cycles),
      sentPerCycle: s.tokens.sentPerCycle,
      billedPerCycle: s.tokens.billedPerCycle,
    };
  });
  out.smallest = smallestSufficient(out.search);
  out.smallestEither = smallestSufficient(out.search, DETECTION_GOAL, (p) => p.either);
  if (out.smallest !== null) out.smallestFullScaleTokens = Math.round(out.smallest.plantTokens * opts.scale);

  const points = opts.scenarios.flatMap((scenario) => [opts.scale, opts.scale * 2].map((scale) => ({ scenario, scale })));
  const measured = await mapPool(points, opts.jobs, async ({ scenario, scale }) => {
    const r = await runSeries({ cell, scenario, cycles: opts.projectionCycles, scale });
    return { scenario, scale, r };
  });
  for (const scenario of opts.scenarios) {
    const at: ProjectionRow['at'] = measured
      .filter((m) => m.scenario === scenario && m.r.available)
      .map((m) => ({ scale: m.scale, sentPerCycle: m.r.summary!.tokens.sentPerCycle, billedPerCycle: m.r.summary!.tokens.billedPerCycle, cycles: m.r.summary!.cycles }));
    if (at.length < 2) continue;
    const [x, y] = at as [ProjectionRow['at'][number], ProjectionRow['at'][number]];
    const row: ProjectionRow = {
      scenario,
      at,
      projectedSent: Math.round(projectToScaleOne(x.scale, x.sentPerCycle, y.scale, y.sentPerCycle)),
      projectedBilled: Math.round(projectToScaleOne(x.scale, x.billedPerCycle, y.scale, y.billedPerCycle)),
    };
    out.projection.push(row);
    opts.progress(`[cost] ${scenario}: ${Math.round(x.sentPerCycle)} tokens/cycle at 1/${x.scale}, ${Math.round(y.sentPerCycle)} at 1/${y.scale} → ~${row.projectedSent} at full scale`);
  }
  return out;
}

/** The default search cell: incident, with the single-node preset standing in while incident is missing. */
export const COST_CELL: EngineCell = ALL_CELLS.find((c) => c.id === 'incident')!;
export const COST_FALLBACK: EngineCell = SINGLE_CELL;
