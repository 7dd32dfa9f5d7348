/**
 * Section 6, copy fidelity: how the incident cell's detection holds up when the engine copies less
 * faithfully than its default exact 8-token copy head.
 *
 * The bundled model continues text by attending to the positions that followed the same n-gram earlier
 * (model.ts). Three dials make it a weaker copier: a shorter n-gram (`--model-ngram`: the copy head keys on
 * less context, so more positions match the query and the continuation blurs between them), a flatter
 * attention (`--model-beta`: an exact match holds less of the softmax mass against the rest of the pool),
 * and sampling at temperature > 0 (each request's `temperature`; the prober always asks for 0, so this
 * section sets it on every request the engine admits, see engine-cell.ts). Each row is one series of the
 * incident × overlimit-handoff on a fresh engine.
 *
 * Per row: the per-cycle detection of the marker signal and of the rejection signal (the figures the
 * matrix calls "per-cycle detection", named recall here as the issue asks: of cycles that really leaked,
 * every cycle of this cell, the fraction caught), and what the scanner's fragment matching adds over
 * whole markers: the cycles in which at least one response carried a whole planted marker body (the
 * tap's own check) against the cycles the marker signal fired, and the same per response.
 */
import { ALL_CELLS, type EngineCell } from './cells.js';
import type { CycleRecord } from './cycle.js';
import { mapPool } from './pool.js';
import { proportion, type Proportion } from './proportion.js';
import { runSeries } from './series.js';

export interface FidelityPoint {
  ngram: number;
  beta: number;
  temperature: number;
}

/** The prober's planter layout (ProbeTuning.planterLayout): the default, and the one made for weak copiers. */
export type PlanterLayout = 'dense' | 'repeated';
export const PLANTER_LAYOUTS: readonly PlanterLayout[] = ['dense', 'repeated'];

export interface FidelityRow extends FidelityPoint {
  layout: PlanterLayout;
  cycles: number;
  /** Per-cycle detection by the marker signal (`cross-request-leak`). */
  markerRecall: number;
  /** Per-cycle detection by the rejection signal (`rejection-not-enforced`). */
  rejectionRecall: number;
  /** Cycles in which some exposed response carried a whole planted marker body (no fragment matching needed). */
  wholeMarkerCycles: number;
  markerCycles: number;
  rejectionCycles: number;
  /** Responses that read planted pages (engine ground truth), those the marker signal flagged, those with a whole marker. */
  exposedResponses: number;
  flaggedResponses: number;
  wholeMarkerResponses: number;
  marker: Proportion;
  rejection: Proportion;
  /** Why the row has no figures, when it has none. */
  unavailable?: string;
}

export interface CopyFidelityResult {
  cell: string;
  scenario: string;
  scale: number;
  cyclesPerRow: number;
  defaults: FidelityPoint;
  rows: FidelityRow[];
}

export const FIDELITY_DEFAULT: FidelityPoint = { ngram: 8, beta: 20, temperature: 0 };

/**
 * The rows: each dial swept alone from the default (ngram 2-16, beta 5-20, temperature 0-1), then the
 * weak corners together. 12 rows; at ~0.4 s a cycle (scale 128) 30 cycles a row is a few minutes.
 */
export const FIDELITY_POINTS: readonly FidelityPoint[] = [
  { ngram: 8, beta: 20, temperature: 0 },
  { ngram: 16, beta: 20, temperature: 0 },
  { ngram: 4, beta: 20, temperature: 0 },
  { ngram: 2, beta: 20, temperature: 0 },
  { ngram: 8, beta: 10, temperature: 0 },
  { ngram: 8, beta: 5, temperature: 0 },
  { ngram: 8, beta: 20, temperature: 0.7 },
  { ngram: 8, beta: 20, temperature: 1 },
  { ngram: 4, beta: 10, temperature: 0.7 },
  { ngram: 4, beta: 5, temperature: 1 },
  { ngram: 2, beta: 10, temperature: 0.7 },
  { ngram: 2, beta: 5, temperature: 1 },
];

export interface CopyFidelityOptions {
  cycles: number;
  scale: number;
  jobs: number;
  points?: readonly FidelityPoint[];
  /** @default both: the default dense planters (the curve before) and repeated ones (after) */
  layouts?: readonly PlanterLayout[];
  progress?: (line: string) => void;
}

const INCIDENT = 'incident';
const SCENARIO = 'overlimit-handoff';

export async function runCopyFidelity(opts: CopyFidelityOptions): Promise<CopyFidelityResult> {
  const cell = ALL_CELLS.find((c) => c.id === INCIDENT) as EngineCell;
  const points = opts.points ?? FIDELITY_POINTS;
  const layouts = opts.layouts ?? PLANTER_LAYOUTS;
  const runs = layouts.flatMap((layout) => points.map((p) => ({ ...p, layout })));
  const rows = await mapPool(runs, opts.jobs, async (p, i) => {
    const records: CycleRecord[] = [];
    const label = `${p.layout} planters, ngram ${p.ngram}, beta ${p.beta}, temperature ${p.temperature}`;
    opts.progress?.(`[copy-fidelity ${i + 1}/${runs.length}] ${label}`);
    const r = await runSeries(
      {
        cell,
        scenario: SCENARIO,
        cycles: opts.cycles,
        scale: opts.scale,
        model: { ngram: p.ngram, beta: p.beta },
        temperature: p.temperature,
        tuning: { planterLayout: p.layout },
      },
      (rec) => records.push(rec),
    );
    const row = fidelityRow(p, p.layout, records);
    if (!r.available) row.unavailable = r.reason ?? 'unavailable';
    opts.progress?.(`[copy-fidelity ${i + 1}/${runs.length}] ${label}: marker ${row.markerCycles}/${row.cycles}, rejection ${row.rejectionCycles}/${row.cycles}, whole marker ${row.wholeMarkerCycles}/${row.cycles}`);
    return row;
  });
  return { cell: INCIDENT, scenario: SCENARIO, scale: opts.scale, cyclesPerRow: opts.cycles, defaults: FIDELITY_DEFAULT, rows };
}

/** One row's figures from its cycle records (pure: tested on synthetic records). */
export function fidelityRow(p: FidelityPoint, layout: PlanterLayout, records: readonly CycleRecord[]): FidelityRow {
  const n = records.length;
  const fired = (r: CycleRecord, kind: string): boolean => (r.findings[kind] ?? 0) > 0;
  const markerCycles = records.filter((r) => fired(r, 'cross-request-leak')).length;
  const rejectionCycles = records.filter((r) => fired(r, 'rejection-not-enforced')).length;
  const sum = (f: (r: CycleRecord) => number): number => records.reduce((a, r) => a + f(r), 0);
  const marker = proportion(markerCycles, n);
  const rejection = proportion(rejectionCycles, n);
  return {
    ngram: p.ngram,
    beta: p.beta,
    temperature: p.temperature,
    layout,
    cycles: n,
    markerRecall: marker.p ?? 0,
    rejectionRecall: rejection.p ?? 0,
    wholeMarkerCycles: records.filter((r) => (r.truth?.wholeMarkerCopies ?? 0) > 0).length,
    markerCycles,
    rejectionCycles,
    exposedResponses: sum((r) => r.truth?.exposedResponses ?? 0),
    flaggedResponses: sum((r) => r.truth?.flagged.marker ?? 0),
    wholeMarkerResponses: sum((r) => r.truth?.wholeMarkerCopies ?? 0),
    marker,
    rejection,
  };
}
