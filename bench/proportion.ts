/**
 * Proportions measured from a finite number of cycles, with their uncertainty. A detection probability
 * of 50/50 is not "1": it is "at least 0.93 with 95% confidence" (Wilson score interval, which behaves at
 * 0 and n, unlike the normal approximation). Zero false positives in n pairs bounds the rate by the exact
 * one-sided 95% bound 1 - 0.05^(1/n) (about 3/n, the "rule of three").
 */

export interface Proportion {
  successes: number;
  trials: number;
  /** successes / trials; null when there were no trials. */
  p: number | null;
  /** Wilson score 95% interval (two-sided); null when there were no trials. */
  low: number | null;
  high: number | null;
}

const Z95 = 1.959963984540054;

export function proportion(successes: number, trials: number): Proportion {
  if (!Number.isInteger(successes) || !Number.isInteger(trials) || successes < 0 || trials < 0 || successes > trials) {
    throw new RangeError(`proportion: expected integers 0 <= successes <= trials, got ${successes}/${trials}`);
  }
  if (trials === 0) return { successes, trials, p: null, low: null, high: null };
  const p = successes / trials;
  const z2 = Z95 * Z95;
  const denom = 1 + z2 / trials;
  const centre = (p + z2 / (2 * trials)) / denom;
  const half = (Z95 * Math.sqrt((p * (1 - p)) / trials + z2 / (4 * trials * trials))) / denom;
  // Clamp the float noise at the ends: 0/n has low exactly 0 and n/n has high exactly 1.
  return { successes, trials, p, low: successes === 0 ? 0 : Math.max(0, centre - half), high: successes === trials ? 1 : Math.min(1, centre + half) };
}

/** Exact one-sided 95% upper bound on a rate after 0 events in n trials (Clopper-Pearson). */
export function zeroEventUpperBound(trials: number): number | null {
  if (!Number.isInteger(trials) || trials < 0) throw new RangeError(`zeroEventUpperBound: expected an integer >= 0, got ${trials}`);
  return trials === 0 ? null : 1 - Math.pow(0.05, 1 / trials);
}

/** "0.98 [0.93, 1.00]", or "n/a" without trials. */
export function formatProportion(x: Proportion, digits = 2): string {
  if (x.p === null || x.low === null || x.high === null) return 'n/a';
  return `${x.p.toFixed(digits)} [${x.low.toFixed(digits)}, ${x.high.toFixed(digits)}]`;
}
