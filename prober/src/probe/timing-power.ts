/**
 * What a timing test that found nothing could have found: the smallest first-token saving it would have
 * detected with a given probability (power), estimated from the endpoint's own spread.
 *
 * Design:
 * - The test is stats.ts's one-sided paired sign-flip test on d_i = ln(fresh_i) - ln(cached_i) at `alpha`.
 *   A cache hit that saves a fraction s of the first token's time shifts every d_i by ln(1 / (1 - s)).
 * - The spread is the endpoint's, measured: the residuals r_i = d_i - median(d) of the pairs just taken
 *   (centring removes whatever effect there was, so a partial hit does not pass for noise). A simulated
 *   run draws n residuals with replacement, adds the shift, and applies the test in its large-sample form
 *   (reject when sum(d) / sqrt(sum(d^2)) >= z_{1-alpha}, the sign-flip statistic's normal limit, and never
 *   with fewer pairs than the exact test needs to reach alpha at all). Power at s is the share of simulated
 *   runs that reject; the detectable saving is the smallest s on a 1% grid whose power reaches the target.
 * - Draws come from a generator seeded by the data, so the same pairs always give the same statement.
 * - Whether the estimate holds on real fronts is a measurement, not an assumption: bench/timing-power.ts
 *   (`npm run bench:timing`) runs the judgement against endpoints whose hits save a known fraction, fast and
 *   behind a slow noisy front, and counts how often a saving at or above the stated one was detected.
 */
import { median, minPairsFor, type PairedSample } from './stats.js';
import { mulberry32 } from './seeded-random.js';

/** The power a "no reuse detectable" statement is made at. */
export const STATED_POWER = 0.95;
const DRAWS = 2000;
const GRID_STEP = 0.01;
const MAX_SAVING = 0.9;

export interface DetectableSaving {
  pairs: number;
  alpha: number;
  power: number;
  /** Smallest saving (0.12 = 12% of the first token's time) detected with probability >= power; undefined: none up to 90%. */
  saving: number | undefined;
}

/** Power of the test at `saving`, by simulation from the pairs' own residuals. */
export function powerAt(samples: readonly PairedSample[], saving: number, alpha: number): number {
  const sim = simulator(samples, alpha);
  return sim === undefined ? 0 : sim(saving);
}

/** The smallest saving the test detects with probability >= `power` on an endpoint with this spread. */
export function detectableSaving(samples: readonly PairedSample[], alpha: number, power = STATED_POWER): DetectableSaving {
  const sim = simulator(samples, alpha);
  const base = { pairs: samples.length, alpha, power };
  if (sim === undefined) return { ...base, saving: undefined };
  for (let s = GRID_STEP; s <= MAX_SAVING + 1e-9; s += GRID_STEP) {
    if (sim(s) >= power) return { ...base, saving: Math.round(s * 100) / 100 };
  }
  return { ...base, saving: undefined };
}

/**
 * The saving a full hit on the prefix would give, from pairs of (a fresh prefix + suffix: `fresh`, the same
 * suffix alone: `cached`): 1 - exp(-median(ln fresh - ln cached)). A hit leaves the suffix to prefill, so a
 * suffix-only prompt is what a hit costs, whatever the front adds to both.
 */
export function hitSaving(samples: readonly PairedSample[]): number | undefined {
  if (samples.length === 0) return undefined;
  const d = samples.map((s) => Math.log(Math.max(s.fresh, 1e-3)) - Math.log(Math.max(s.cached, 1e-3)));
  return Math.max(0, 1 - Math.exp(-median(d)));
}

/** Returns saving -> simulated power, with residuals and draws fixed (common random numbers across savings). */
function simulator(samples: readonly PairedSample[], alpha: number): ((saving: number) => number) | undefined {
  const n = samples.length;
  if (n < minPairsFor(alpha)) return undefined;
  const d = samples.map((s) => Math.log(Math.max(s.fresh, 1e-3)) - Math.log(Math.max(s.cached, 1e-3)));
  const m = median(d);
  const residuals = d.map((x) => x - m);
  const random = mulberry32(seedOf(d));
  const picks = new Int32Array(DRAWS * n);
  for (let i = 0; i < picks.length; i++) picks[i] = Math.floor(random() * n);
  const z = normalQuantile(1 - alpha);
  return (saving: number): number => {
    const shift = -Math.log(1 - saving);
    let rejected = 0;
    for (let draw = 0; draw < DRAWS; draw++) {
      let sum = 0;
      let sq = 0;
      for (let i = 0; i < n; i++) {
        const x = residuals[picks[draw * n + i]!]! + shift;
        sum += x;
        sq += x * x;
      }
      if (sq > 0 && sum / Math.sqrt(sq) >= z) rejected++;
    }
    return rejected / DRAWS;
  };
}

function seedOf(xs: readonly number[]): number {
  let h = 0x811c9dc5;
  for (const x of xs) h = Math.imul(h ^ Math.round(x * 1e6), 0x01000193) >>> 0;
  return h;
}


/** Inverse standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9). */
export function normalQuantile(p: number): number {
  const a = [-3.969683028665376e1, 2.209460984245205e2, -2.759285104469687e2, 1.38357751867269e2, -3.066479806614716e1, 2.506628277459239];
  const b = [-5.447609879822406e1, 1.615858368580409e2, -1.556989798598866e2, 6.680131188771972e1, -1.328068155288572e1];
  const c = [-7.784894002430293e-3, -3.223964580411365e-1, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [7.784695709041462e-3, 3.224671290700398e-1, 2.445134137142996, 3.754408661907416];
  const lo = 0.02425;
  if (p < lo) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) / ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  }
  if (p > 1 - lo) return -normalQuantile(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) / (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1);
}
