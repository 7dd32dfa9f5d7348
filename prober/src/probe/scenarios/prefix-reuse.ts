/**
 * Does the endpoint reuse a prompt prefix at all? The three prefix scenarios stress a prefix cache; an
 * endpoint without one demonstrably lacks the mechanism, and they are then `not-applicable` rather than
 * inconclusive for ever. "Demonstrably" is evidence of absence, never absence of evidence, and one
 * judgement (`judgeReuse`) decides it for all three, from an exact same-tenant re-send of a fresh prefix:
 *
 * - `shown`: the re-send was served from a cache: its cached tokens rose above the first send's, or its
 *   time to first token was significantly shorter than a fresh prefix's of the same length (one-sided
 *   paired test at the cycle's alpha). Reuse through any tier counts (a host tier or a prompt cache whose
 *   hits the counters do not include shows in the timing). Timing that shows reuse the counters deny means
 *   the counters are not trusted: `countersHideHits`, and the scenarios judge on timing.
 * - `none`: the counters (where reported) show none in at least MIN_CONCLUSIVE_RESENDS answered re-sends,
 *   AND the timing test was powered to see the saving a hit would give: measured on the endpoint itself as
 *   a fresh prefix + suffix against the suffix alone (what a full hit leaves to prefill), the test detects a
 *   saving of HIT_SHARE of that with probability >= STATED_POWER (timing-power.ts, from the pairs' own
 *   spread). The note says what was shown: "no prefix reuse detectable (a saving >= X% would have shown
 *   with probability P)".
 * - `unknown`, reason `power`: nothing seen, but the test could not have seen it (a slow or noisy front):
 *   inconclusive, never not-applicable. `unknown` without a reason: too few answered sends.
 *
 * prefix-isolation gathers this evidence in its own rounds; prefix-churn and prefix-collision, whose own
 * re-sends carry counters but no timing, never conclude `none` on less: they use the cycle's verdict when
 * one was reached, else measure it themselves (reuse-probe.ts). Judged afresh every cycle.
 */
import { minPairsFor, timingSideChannelTest, type PairedSample, type TimingDecision } from '../stats.js';
import { detectableSaving, hitSaving, STATED_POWER, type DetectableSaving } from '../timing-power.js';

export type PrefixReuse = 'shown' | 'none' | 'unknown';

export interface PrefixReuseVerdict {
  reuse: PrefixReuse;
  /** `power`: nothing seen, but a hit's saving would not have shown with probability STATED_POWER. */
  reason?: 'power';
  /** Timing showed reuse that the usage counters did not report. */
  countersHideHits?: boolean;
  /** The evidence, one line, for the scenario's notes. */
  evidence: string;
  /** The scenario whose sends were the evidence. */
  by: string;
  /** What the timing test could have seen (when it ran). */
  detectable?: DetectableSaving;
  /** The first-token saving a full hit on the prefix gives on this endpoint (measured). */
  hitSaving?: number;
}

/** One cycle's memo (ScenarioContext.prefixReuse): the verdict, or the measurement under way. */
export interface PrefixReuseMemo {
  verdict?: PrefixReuseVerdict;
  pending?: Promise<PrefixReuseVerdict>;
}

/** Answered exact re-sends reporting cached tokens needed before "never reused" is conclusive. */
export const MIN_CONCLUSIVE_RESENDS = 2;
/** The saving a hit must give to count: this share of a full hit's measured saving (a hit loaded from a slower tier saves less). */
export const HIT_SHARE = 0.5;
/** Pairs of (fresh prefix, suffix alone) needed to measure what a hit saves. */
const MIN_HIT_PAIRS = 3;

export interface ReuseEvidence {
  /** Cached tokens of (first send, exact re-send), undefined where not answered or not reported. */
  counters: ReadonlyArray<{ first?: number | undefined; resend?: number | undefined }>;
  /** The exact re-send (`cached`) vs a fresh prefix of the same length (`fresh`), in random order per pair. */
  control: readonly PairedSample[];
  /** A fresh prefix + suffix (`fresh`) vs the suffix alone (`cached`): what a full hit would save. */
  hit: readonly PairedSample[];
  alpha: number;
}

/** Verdict from cached-token counts of (first send, exact re-send) pairs; `undefined` entries are skipped. */
export function reuseByCachedTokens(pairs: ReadonlyArray<{ first?: number | undefined; resend?: number | undefined }>): { reuse: PrefixReuse; evidence: string; reported: boolean; known: number } {
  const known = pairs.filter((p): p is { first: number; resend: number } => p.first !== undefined && p.resend !== undefined);
  if (known.length === 0) return { reuse: 'unknown', evidence: 'no answered re-send reported cached tokens', reported: false, known: 0 };
  const hits = known.filter((p) => p.resend > p.first);
  const detail = `exact same-tenant re-sends: cached tokens above the first send's in ${hits.length}/${known.length} (re-sends ${known.map((p) => p.resend).join(', ')}; first sends ${known.map((p) => p.first).join(', ')})`;
  if (hits.length > 0) return { reuse: 'shown', evidence: detail, reported: true, known: known.length };
  if (known.length >= MIN_CONCLUSIVE_RESENDS) return { reuse: 'none', evidence: detail, reported: true, known: known.length };
  return { reuse: 'unknown', evidence: `${detail}: too few to conclude`, reported: true, known: known.length };
}

/** The one absence-of-reuse judgement (see the module note). */
export function judgeReuse(e: ReuseEvidence, by: string): PrefixReuseVerdict {
  const counters = reuseByCachedTokens(e.counters);
  const timing = timingSideChannelTest(e.control, { alpha: e.alpha, minEffect: 0 });
  const timingLine = `same-tenant timing, exact re-send vs a fresh prefix: ${describeTiming(timing)}`;
  if (counters.reuse === 'shown') return { reuse: 'shown', evidence: counters.evidence, by };
  if (timing.significant && timing.effect > 0) {
    const hide = counters.reported;
    return {
      reuse: 'shown',
      ...(hide ? { countersHideHits: true } : {}),
      evidence: hide ? `${timingLine}, while ${counters.evidence}: usage counters hide cache hits` : `${timingLine} (cached tokens not reported)`,
      by,
    };
  }
  const saving = e.hit.length >= MIN_HIT_PAIRS ? hitSaving(e.hit) : undefined;
  const detectable = detectableSaving(e.control, e.alpha);
  const facts = { detectable, ...(saving !== undefined ? { hitSaving: saving } : {}) };
  if (e.control.length < minPairsFor(e.alpha) || saving === undefined) {
    return { reuse: 'unknown', evidence: `${timingLine}; too few answered pairs to judge whether a hit would have shown (${e.control.length} re-send pairs, ${e.hit.length} hit-size pairs)`, by, ...facts };
  }
  const needed = HIT_SHARE * saving;
  const what = `a hit on this prefix would save about ${pct(saving)} of the first token's time (fresh prefix vs the suffix alone, ${e.hit.length} pairs), so a saving of ${pct(needed)} or more counts`;
  if (detectable.saving === undefined || detectable.saving > needed) {
    return {
      reuse: 'unknown',
      reason: 'power',
      evidence: `no reuse seen, but the timing test was underpowered: ${what}, and only a saving >= ${detectable.saving === undefined ? '90%' : pct(detectable.saving)} would have shown with probability ${STATED_POWER} (${timingLine})`,
      by,
      ...facts,
    };
  }
  if (counters.reported && counters.reuse !== 'none') return { reuse: 'unknown', evidence: `${counters.evidence}; ${timingLine}`, by, ...facts };
  return {
    reuse: 'none',
    evidence: `no prefix reuse detectable (a saving >= ${pct(detectable.saving)} would have shown with probability ${STATED_POWER}; ${what}; ${counters.reported ? `cached tokens never above the first send's in ${counters.known} answered re-sends` : 'cached tokens not reported'}; ${timingLine})`,
    by,
    ...facts,
  };
}

/** Records a verdict for the cycle (the first conclusive one stands). */
export function recordReuse(memo: PrefixReuseMemo | undefined, verdict: PrefixReuseVerdict): void {
  if (memo === undefined || verdict.reuse === 'unknown') return;
  if (memo.verdict === undefined || memo.verdict.reuse === 'unknown') memo.verdict = verdict;
}

/**
 * The cycle's verdict: the one recorded, else `measure()`'s (run once per cycle: a second scenario asking
 * while it runs waits for the same measurement).
 */
export async function cycleReuse(memo: PrefixReuseMemo | undefined, measure: () => Promise<PrefixReuseVerdict>): Promise<PrefixReuseVerdict> {
  if (memo?.verdict !== undefined && memo.verdict.reuse !== 'unknown') return memo.verdict;
  if (memo === undefined) return measure();
  memo.pending ??= measure().then((v) => {
    recordReuse(memo, v);
    return v;
  }).finally(() => {
    memo.pending = undefined;
  });
  return memo.pending;
}

/** The note a not-applicable prefix scenario carries. */
export function notApplicableNote(v: PrefixReuseVerdict): string {
  return `not applicable: ${v.evidence} (${v.by}); judged again every run`;
}

export function describeTiming(d: TimingDecision): string {
  if (d.pairs === 0) return 'no usable pairs';
  return (
    `${d.pairs} pairs, median ${d.medianCachedMs.toFixed(1)} vs ${d.medianFreshMs.toFixed(1)} ms (effect ${Math.round(d.effect * 100)}%${d.minEffect > 0 ? `, floor ${Math.round(d.minEffect * 100)}%` : ''}), ` +
    `p = ${d.pValue.toPrecision(2)} at alpha ${d.alpha}${d.decidable ? '' : ' (too few pairs to decide)'}: ${d.minEffect > 0 ? (d.detected ? 'effect' : 'no effect') : d.significant ? 'significant' : 'not significant'}`
  );
}

function pct(x: number): string {
  return `${Math.round(x * 100)}%`;
}

