/** The applicability verdict of the prefix scenarios: no reuse only on answered, reported re-sends. */
import { describe, expect, it } from 'vitest';
import { recordReuse, reuseByCachedTokens, type PrefixReuseMemo } from '../../prober/src/probe/scenarios/prefix-reuse.js';

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
