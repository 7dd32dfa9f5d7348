/** The applicability verdict of the prefix scenarios: no reuse only on answered, reported re-sends. */
import { describe, expect, it } from 'vitest';
import { judgeReuse, recordReuse, reuseByCachedTokens, type PrefixReuseMemo } from '../../prober/src/probe/scenarios/prefix-reuse.js';
import type { PairedSample } from '../../prober/src/probe/stats.js';
import { detectableSaving } from '../../prober/src/probe/timing-power.js';

describe('reuseByCachedTokens', () => {
  it('says none only after enough answered re-sends reported no more cached tokens than the first send', () => {
    expect(reuseByCachedTokens([{ first: 0, resend: 0 }, { first: 16, resend: 16 }]).reuse).toBe('none');
    expect(reuseByCachedTokens([{ first: 0, resend: 0 }]).reuse).toBe('unknown');
  });

  it('says shown when any re-send was served more than its first send', () => {
    expect(reuseByCachedTokens([{ first: 0, resend: 0 }, { first: 0, resend: 512 }]).reuse).toBe('shown');
  });

  it('never reads an unanswered or unreported send as no reuse', () => {
    expect(reuseByCachedTokens([{ first: 0 }, { resend: 0 }, {}]).reuse).toBe('unknown');
  });
});

describe('recordReuse', () => {
  it('keeps the first conclusive verdict of a cycle and ignores unknown ones', () => {
    const memo: PrefixReuseMemo = {};
    recordReuse(memo, { reuse: 'unknown', evidence: 'x', by: 'a' });
    expect(memo.verdict).toBeUndefined();
    recordReuse(memo, { reuse: 'none', evidence: 'y', by: 'b' });
    recordReuse(memo, { reuse: 'shown', evidence: 'z', by: 'c' });
    expect(memo.verdict).toMatchObject({ reuse: 'none', by: 'b' });
  });
});

/** Deterministic pairs: fresh around `ms` with uniform jitter of ±`jitter` ms; cached = fresh × (1 - saving) with its own jitter. */
function pairs(n: number, ms: number, jitter: number, saving = 0, seed = 7): PairedSample[] {
  let s = seed;
  const u = (): number => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  return Array.from({ length: n }, () => ({ fresh: ms + jitter * u(), cached: (ms + jitter * u()) * (1 - saving) }));
}

describe('detectableSaving', () => {
  it('is small on a quiet endpoint, large behind a noisy front, and undefined with too few pairs to reach alpha', () => {
    const quiet = detectableSaving(pairs(24, 100, 2), 0.001);
    const noisy = detectableSaving(pairs(24, 300, 50), 0.001);
    expect(quiet.saving).toBeLessThanOrEqual(0.03);
    expect(noisy.saving).toBeGreaterThan(0.1);
    expect(detectableSaving(pairs(9, 100, 2), 0.001).saving).toBeUndefined();
    expect(quiet.power).toBe(0.95);
  });
});

describe('judgeReuse: not-applicable only on positive evidence of absence', () => {
  const alpha = 0.001;
  const zero = Array.from({ length: 24 }, () => ({ first: 0, resend: 0 }));

  it('says none when counters show none and the timing test was powered to see half of what a hit saves, and says what it could have seen', () => {
    const v = judgeReuse({ counters: zero, control: pairs(24, 100, 2), hit: pairs(24, 100, 2, 0.6, 9), alpha }, 'test');
    expect(v.reuse).toBe('none');
    expect(v.evidence).toMatch(/^no prefix reuse detectable \(a saving >= \d+% would have shown with probability 0\.95; a hit on this prefix would save about 60%/);
  });

  it('is inconclusive for power, never none, when the front is too slow and noisy to see the saving', () => {
    // A 300 ms front with ±50 ms jitter; a hit would save 12%, so 6% had to be visible.
    const v = judgeReuse({ counters: zero, control: pairs(24, 300, 50), hit: pairs(24, 300, 50, 0.12, 9), alpha }, 'test');
    expect(v).toMatchObject({ reuse: 'unknown', reason: 'power' });
    expect(v.evidence).toMatch(/underpowered/);
  });

  it('trusts timing over counters that deny a hit: shown, and says the counters hide cache hits', () => {
    const v = judgeReuse({ counters: zero, control: pairs(24, 100, 2, 0.4), hit: pairs(24, 100, 2, 0.6, 9), alpha }, 'test');
    expect(v).toMatchObject({ reuse: 'shown', countersHideHits: true });
    expect(v.evidence).toMatch(/usage counters hide cache hits/);
  });

  it('never says none on counters alone, or on too few answered pairs', () => {
    expect(judgeReuse({ counters: zero, control: [], hit: [], alpha }, 'test').reuse).toBe('unknown');
    expect(judgeReuse({ counters: zero, control: pairs(6, 100, 2), hit: pairs(6, 100, 2, 0.6), alpha }, 'test').reuse).toBe('unknown');
  });
});
