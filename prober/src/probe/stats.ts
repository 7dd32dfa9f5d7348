/**
 * The timing test behind `prefix-timing-side-channel`: is the time to first token on a prefix another
 * tenant just sent shorter than on a fresh prefix of the same length?
 *
 * Design:
 * - Samples come in pairs taken back to back, in random order within the pair (the scenario does that),
 *   one on the other tenant's prefix ("cached") and one on a fresh prefix ("fresh"). Host load drifts
 *   over seconds on a shared machine; pairing cancels the drift, and random order within a pair makes the
 *   two members exchangeable when there is no effect.
 * - Test: one-sided paired sign-flip permutation test on d_i = ln(fresh_i) - ln(cached_i), statistic
 *   sum(d_i). Under H0 (no prefix effect) each d_i is symmetric about 0 given |d_i|, so all 2^n sign
 *   patterns are equally likely and P(sum >= observed) is the exact p-value: the false-alarm rate is at
 *   most alpha whatever the TTFT distribution, its outliers, or drift between pairs. Logs make the test
 *   about ratios (a 40 ms prefill saving on a 10 ms or a 400 ms baseline counts alike) and tame outliers.
 *   Exact enumeration up to EXACT_MAX_PAIRS pairs; beyond, Monte Carlo with p = (1 + hits) / (1 + draws),
 *   which is still a valid (slightly conservative) p-value.
 * - The test is discrete: the smallest attainable p is 2^-n, so at alpha = 0.001 it needs n >= 10 pairs
 *   (`minPairsFor`); with fewer it cannot decide, and says so rather than passing.
 * - Significance is not enough: a finding also needs a minimum effect (the cached side's median at least
 *   `minEffect` faster), so a tiny systematic difference on a quiet host does not fire.
 */

export interface PairedSample {
  /** Time (ms) on the prefix the other tenant sent. */
  cached: number;
  /** Time (ms) on a fresh prefix of the same length. */
  fresh: number;
}

export interface SignFlipResult {
  pairs: number;
  /** sum(ln fresh - ln cached). */
  statistic: number;
  /** One-sided: P(statistic >= observed | H0). */
  pValue: number;
  exact: boolean;
}

export interface TimingTestOptions {
  /** False-alarm rate. @default 0.001 */
  alpha?: number;
  /** Minimum effect: 1 - median(cached) / median(fresh). @default 0.2 */
  minEffect?: number;
  /** Random source for the Monte Carlo path (more than EXACT_MAX_PAIRS pairs). @default Math.random */
  random?: () => number;
}

export interface TimingDecision {
  test: 'paired sign-flip permutation, one-sided, on ln(TTFT)';
  pairs: number;
  pValue: number;
  alpha: number;
  /** 1 - median(cached) / median(fresh): 0.3 means the cached prefix was answered 30% sooner. */
  effect: number;
  minEffect: number;
  medianCachedMs: number;
  medianFreshMs: number;
  /** Enough pairs that p could reach alpha at all. */
  decidable: boolean;
  significant: boolean;
  /** Significant and at least minEffect. */
  detected: boolean;
}

export const EXACT_MAX_PAIRS = 20;
const MONTE_CARLO_DRAWS = 200_000;
/** Times at or below this (ms) are clamped before taking logs. */
const MIN_TIME_MS = 1e-3;

export class StatsError extends Error {
  readonly code = 'KVC_STATS_INVALID';
  constructor(message: string) {
    super(message);
    this.name = 'StatsError';
  }
}

/** Pairs needed before the smallest attainable p-value (2^-n) is at or below alpha. */
export function minPairsFor(alpha: number): number {
  checkAlpha(alpha);
  return Math.ceil(Math.log2(1 / alpha) - 1e-12);
}

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Exact (or Monte Carlo beyond EXACT_MAX_PAIRS) one-sided sign-flip test that `cached` is shorter than `fresh`. */
export function signFlipTest(samples: readonly PairedSample[], random: () => number = Math.random): SignFlipResult {
  const d = samples.map((s, i) => {
    for (const [k, v] of [['cached', s.cached], ['fresh', s.fresh]] as const) {
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new StatsError(`samples[${i}].${k}: expected a finite time >= 0 ms, got ${String(v)}`);
    }
    return Math.log(Math.max(s.fresh, MIN_TIME_MS)) - Math.log(Math.max(s.cached, MIN_TIME_MS));
  });
  const n = d.length;
  const observed = d.reduce((a, b) => a + b, 0);
  if (n === 0) return { pairs: 0, statistic: 0, pValue: 1, exact: true };
  // Float sums of the same terms in another order can differ in the last bits: count near-ties as ties.
  const tol = 1e-9 * (d.reduce((a, b) => a + Math.abs(b), 0) + 1);
  const abs = d.map(Math.abs);
  if (n <= EXACT_MAX_PAIRS) {
    // Gray code: consecutive patterns differ in one sign, so each sum is one addition away from the last.
    const total = 2 ** n;
    let sum = abs.reduce((a, b) => a + b, 0);
    const positive = new Array<boolean>(n).fill(true);
    let atLeast = sum >= observed - tol ? 1 : 0;
    for (let k = 1; k < total; k++) {
      const bit = 31 - Math.clz32(k & -k);
      positive[bit] = !positive[bit];
      sum += positive[bit] ? 2 * abs[bit]! : -2 * abs[bit]!;
      if (sum >= observed - tol) atLeast++;
    }
    return { pairs: n, statistic: observed, pValue: atLeast / total, exact: true };
  }
  let hits = 0;
  for (let draw = 0; draw < MONTE_CARLO_DRAWS; draw++) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += random() < 0.5 ? -abs[i]! : abs[i]!;
    if (sum >= observed - tol) hits++;
  }
  return { pairs: n, statistic: observed, pValue: (1 + hits) / (1 + MONTE_CARLO_DRAWS), exact: false };
}

/** The decision the scenario acts on: significant at alpha and at least minEffect faster in median. */
export function timingSideChannelTest(samples: readonly PairedSample[], opts: TimingTestOptions = {}): TimingDecision {
  const alpha = opts.alpha ?? 0.001;
  const minEffect = opts.minEffect ?? 0.2;
  checkAlpha(alpha);
  if (typeof minEffect !== 'number' || !Number.isFinite(minEffect) || minEffect < 0 || minEffect >= 1) {
    throw new StatsError(`Expected \`minEffect\` to be a number from 0 to below 1, got ${String(minEffect)}`);
  }
  const result = signFlipTest(samples, opts.random);
  const medianCachedMs = median(samples.map((s) => s.cached));
  const medianFreshMs = median(samples.map((s) => s.fresh));
  const effect = samples.length === 0 || !(medianFreshMs > 0) ? 0 : 1 - medianCachedMs / medianFreshMs;
  const decidable = samples.length >= minPairsFor(alpha);
  const significant = decidable && result.pValue <= alpha;
  return {
    test: 'paired sign-flip permutation, one-sided, on ln(TTFT)',
    pairs: samples.length,
    pValue: result.pValue,
    alpha,
    effect,
    minEffect,
    medianCachedMs,
    medianFreshMs,
    decidable,
    significant,
    detected: significant && effect >= minEffect,
  };
}

function checkAlpha(alpha: number): void {
  if (typeof alpha !== 'number' || !Number.isFinite(alpha) || alpha <= 0 || alpha >= 1) {
    throw new StatsError(`Expected \`alpha\` to be a number strictly between 0 and 1, got ${String(alpha)}`);
  }
}
