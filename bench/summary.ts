/**
 * From cycle records to the figures the report shows. Pure arithmetic, so it is tested on synthetic
 * records (test/bench-report.test.ts).
 *
 * Per signal (the marker signal `cross-request-leak`, the rejection signal `rejection-not-enforced`, and
 * any other finding kind seen):
 * - per-cycle detection: cycles with at least one finding of the kind / cycles, with its 95% interval;
 * - first detection: the 1-based cycle of the series where the kind first appeared, and the tokens sent and
 *   billed up to and including that cycle (the series starts on a fresh engine);
 * - cycles per detection: cycles / detecting cycles, what repeated probing costs per catch in steady state;
 * - recall: of the responses that really read planted pages (engine ground truth), the fraction the
 *   prober flagged with this signal.
 */
import type { Outcome } from '../prober/src/probe/result.js';
import type { CycleRecord } from './cycle.js';
import { proportion, type Proportion } from './proportion.js';
import { MARKER_SIGNAL, REJECTION_SIGNAL } from './ground-truth.js';

export interface FirstDetection {
  cycle: number;
  tokensSent: number;
  tokensBilled: number;
}

export interface SignalSummary {
  kind: string;
  detected: Proportion;
  first: FirstDetection | null;
  cyclesPerDetection: number | null;
}

export interface SeriesSummary {
  cycles: number;
  outcomes: Record<Outcome, number>;
  marker: SignalSummary;
  rejection: SignalSummary;
  /** Other finding kinds seen in the series (pool-below-context, prefix-*, ...). */
  other: SignalSummary[];
  /** Findings over the series, by kind (a cycle can raise several). */
  findingsTotal: Record<string, number>;
  tokens: { sentPerCycle: number; billedPerCycle: number };
  msPerCycle: number;
  pairs: number;
  /** Present when the series had ground truth. */
  truth?: {
    exposedResponses: number;
    recallMarker: Proportion;
    recallRejection: Proportion;
    recallAny: Proportion;
    wholeMarkerCopies: number;
    unmatched: number;
    ambiguous: number;
    foreignPageReads: number;
    overflowPolls: number;
    /** Id-less requests without markers at the end of the series (0: every writer could be attributed). */
    uncertainWriters: number;
  };
  /** The most common reason for inconclusive cycles, if any. */
  inconclusiveNote?: string;
}

export function signalSummary(records: readonly CycleRecord[], kind: string): SignalSummary {
  let detected = 0;
  let first: FirstDetection | null = null;
  let sent = 0;
  let billed = 0;
  for (const r of records) {
    sent += r.tokensSent;
    billed += r.tokensBilled;
    if ((r.findings[kind] ?? 0) > 0) {
      detected++;
      first ??= { cycle: r.index, tokensSent: sent, tokensBilled: billed };
    }
  }
  return { kind, detected: proportion(detected, records.length), first, cyclesPerDetection: detected === 0 ? null : records.length / detected };
}

export function summarizeSeries(records: readonly CycleRecord[]): SeriesSummary {
  const n = records.length;
  const outcomes: Record<Outcome, number> = { pass: 0, fail: 0, inconclusive: 0, 'not-applicable': 0 };
  for (const r of records) outcomes[r.outcome]++;
  const kinds = new Set(records.flatMap((r) => Object.keys(r.findings)));
  kinds.delete(MARKER_SIGNAL);
  kinds.delete(REJECTION_SIGNAL);
  const sum = (f: (r: CycleRecord) => number): number => records.reduce((a, r) => a + f(r), 0);
  const findingsTotal: Record<string, number> = {};
  for (const r of records) for (const [k, v] of Object.entries(r.findings)) findingsTotal[k] = (findingsTotal[k] ?? 0) + v;
  const out: SeriesSummary = {
    cycles: n,
    outcomes,
    marker: signalSummary(records, MARKER_SIGNAL),
    rejection: signalSummary(records, REJECTION_SIGNAL),
    other: [...kinds].sort().map((k) => signalSummary(records, k)),
    findingsTotal,
    tokens: { sentPerCycle: n === 0 ? 0 : sum((r) => r.tokensSent) / n, billedPerCycle: n === 0 ? 0 : sum((r) => r.tokensBilled) / n },
    msPerCycle: n === 0 ? 0 : sum((r) => r.durationMs) / n,
    pairs: sum((r) => r.pairs),
  };
  const withTruth = records.filter((r) => r.truth !== undefined);
  if (withTruth.length > 0) {
    const t = (f: (x: NonNullable<CycleRecord['truth']>) => number): number => withTruth.reduce((a, r) => a + f(r.truth!), 0);
    const exposed = t((x) => x.exposedResponses);
    out.truth = {
      exposedResponses: exposed,
      recallMarker: proportion(t((x) => x.flagged.marker), exposed),
      recallRejection: proportion(t((x) => x.flagged.rejection), exposed),
      recallAny: proportion(t((x) => x.flagged.any), exposed),
      wholeMarkerCopies: t((x) => x.wholeMarkerCopies),
      unmatched: t((x) => x.unmatched),
      ambiguous: t((x) => x.ambiguous),
      foreignPageReads: t((x) => x.foreignPageReads),
      overflowPolls: t((x) => x.overflowPolls),
      uncertainWriters: Math.max(...withTruth.map((r) => r.truth!.uncertainWriters)),
    };
  }
  const notes = new Map<string, number>();
  for (const r of records) if (r.outcome === 'inconclusive' && r.note !== undefined) notes.set(r.note, (notes.get(r.note) ?? 0) + 1);
  const top = [...notes].sort((a, b) => b[1] - a[1])[0];
  if (top !== undefined) out.inconclusiveNote = `${top[1]}× ${top[0]}`;
  return out;
}
