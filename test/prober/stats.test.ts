/**
 * The timing test's promises: under no effect it rejects at most at its stated rate (checked over many
 * simulated runs, with drift between pairs and heavy-tailed noise, as on a loaded host); under a real
 * prefix effect it detects; a significant but tiny effect is not a finding.
 */
import { describe, expect, it } from 'vitest';
import { median, minPairsFor, signFlipTest, StatsError, timingSideChannelTest, type PairedSample } from '../../prober/src/probe/stats.js';
import { mulberry32 as rng } from '../../prober/src/probe/seeded-random.js';


function normal(r: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
}

/**
 * TTFTs of a noisy host: each pair shares a drift factor (load changes between pairs), each request gets
 * lognormal jitter and now and then a stall (GC, a neighbour's burst). `speedup` scales the cached side.
 */
function simulate(r: () => number, pairs: number, speedup: number, baseMs = 40): PairedSample[] {
  const out: PairedSample[] = [];
  for (let i = 0; i < pairs; i++) {
    const drift = Math.exp(0.5 * normal(r));
    const one = (): number => baseMs * drift * Math.exp(0.25 * normal(r)) + (r() < 0.05 ? 50 * r() : 0);
    out.push({ cached: one() * (1 - speedup), fresh: one() });
  }
  return out;
}

describe('signFlipTest', () => {
  it('gives the exact p-value of a hand-checkable case', () => {
    // All three pairs favour cached: only the all-positive pattern reaches the observed sum, p = 1/8.
    const r = signFlipTest([{ cached: 1, fresh: 2 }, { cached: 1, fresh: 3 }, { cached: 1, fresh: 4 }]);
    expect(r.exact).toBe(true);
    expect(r.pValue).toBeCloseTo(1 / 8, 12);
    // Pair magnitudes ln2, ln3 and -ln4: patterns with sum >= ln2 + ln3 - ln4 = ln1.5 are 4 of 8.
    expect(signFlipTest([{ cached: 1, fresh: 2 }, { cached: 1, fresh: 3 }, { cached: 4, fresh: 1 }]).pValue).toBeCloseTo(4 / 8, 12);
  });

  it('counts every tie (identical pairs give p = 1, not a rejection)', () => {
    expect(signFlipTest(Array.from({ length: 12 }, () => ({ cached: 30, fresh: 30 }))).pValue).toBe(1);
  });

  it('beyond 20 pairs, estimates p by Monte Carlo close to the exact value', () => {
    // 24 pairs of +-ln2 alternating: sum 0; exact P(sum >= 0) = (1 + C(24,12) / 2^24) / 2 = 0.58059.
    const balanced = Array.from({ length: 24 }, (_, i) => (i % 2 === 0 ? { cached: 1, fresh: 2 } : { cached: 2, fresh: 1 }));
    const mc = signFlipTest(balanced, rng(4));
    expect(mc.exact).toBe(false);
    expect(mc.pValue).toBeCloseTo(0.58059, 2);
    // All 24 favour cached: the exact p is 2^-24, the estimate its floor 1 / (1 + draws).
    const allFaster = signFlipTest(Array.from({ length: 24 }, () => ({ cached: 1, fresh: 2 })), rng(5));
    expect(allFaster.pValue).toBeLessThan(1e-5);
    expect(allFaster.pValue).toBeGreaterThan(0);
  });

  it('rejects bad input by name', () => {
    expect(() => signFlipTest([{ cached: 1, fresh: Number.NaN }])).toThrow(/samples\[0\]\.fresh/);
    expect(() => signFlipTest([{ cached: -1, fresh: 2 }])).toThrow(StatsError);
    expect(() => timingSideChannelTest([], { alpha: 0 })).toThrow(/alpha/);
    expect(() => timingSideChannelTest([], { minEffect: 1 })).toThrow(/minEffect/);
  });
});

describe('timingSideChannelTest', () => {
  it('states how many pairs alpha needs, and cannot decide with fewer', () => {
    expect(minPairsFor(0.001)).toBe(10);
    expect(minPairsFor(0.05)).toBe(5);
    const nine = timingSideChannelTest(Array.from({ length: 9 }, () => ({ cached: 1, fresh: 100 })), { alpha: 0.001 });
    expect(nine.decidable).toBe(false);
    expect(nine.detected).toBe(false);
    const ten = timingSideChannelTest(Array.from({ length: 10 }, () => ({ cached: 1, fresh: 100 })), { alpha: 0.001 });
    expect(ten.detected).toBe(true);
    expect(ten.pValue).toBeCloseTo(2 ** -10, 12);
  });

  it('under no effect, false-alarms at about alpha or less over many simulated runs', () => {
    const r = rng(42);
    const runs = 4000;
    let at05 = 0;
    let at001 = 0;
    for (let k = 0; k < runs; k++) {
      const samples = simulate(r, 12, 0);
      const p = signFlipTest(samples).pValue;
      if (p <= 0.05) at05++;
      if (timingSideChannelTest(samples, { alpha: 0.001, minEffect: 0 }).significant) at001++;
    }
    // Exact level: the rejection rate is at most alpha (binomial sd at 0.05 over 4000 runs is 0.0034),
    // and near it rather than far below, so the test is not simply blind.
    expect(at05 / runs).toBeLessThanOrEqual(0.05 + 3 * 0.0035);
    expect(at05 / runs).toBeGreaterThan(0.03);
    expect(at001).toBeLessThanOrEqual(4 * 0.001 * runs); // expected ~4 of 4000; at most 16
  });

  it('detects a large prefix effect nearly every run', () => {
    const r = rng(7);
    let detected = 0;
    for (let k = 0; k < 500; k++) if (timingSideChannelTest(simulate(r, 12, 0.6)).detected) detected++;
    expect(detected).toBeGreaterThanOrEqual(475);
  });

  it('gains power with more pairs on a moderate (40%) effect, and reports its size', () => {
    const power = (pairs: number): { rate: number; effect: number } => {
      const r = rng(11);
      let detected = 0;
      const effects: number[] = [];
      for (let k = 0; k < 300; k++) {
        const d = timingSideChannelTest(simulate(r, pairs, 0.4));
        if (d.detected) detected++;
        effects.push(d.effect);
      }
      return { rate: detected / 300, effect: median(effects) };
    };
    const twelve = power(12);
    const sixteen = power(16);
    // On this deliberately noisy host model: about 0.58 at 12 pairs and 0.87 at 16.
    expect(twelve.rate).toBeGreaterThan(0.4);
    expect(sixteen.rate).toBeGreaterThan(twelve.rate);
    expect(sixteen.rate).toBeGreaterThan(0.75);
    expect(sixteen.effect).toBeGreaterThan(0.3);
    expect(sixteen.effect).toBeLessThan(0.5);
  });

  it('does not call a significant but tiny effect a side channel', () => {
    // 3% faster with almost no noise: the test is sure, the effect is below the 20% floor.
    const samples = Array.from({ length: 12 }, (_, i) => ({ cached: 97 + (i % 3) * 0.01, fresh: 100 + (i % 2) * 0.01 }));
    const d = timingSideChannelTest(samples, { alpha: 0.001, minEffect: 0.2 });
    expect(d.significant).toBe(true);
    expect(d.effect).toBeCloseTo(0.03, 2);
    expect(d.detected).toBe(false);
  });
});
