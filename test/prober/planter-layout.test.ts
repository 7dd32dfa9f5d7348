/**
 * The repeated planter layout (ProbeTuning.planterLayout = 'repeated'): one marker, every copy led by the very
 * line readers end with, so any induction context up to that line's length finds one continuation.
 */
import { describe, expect, it } from 'vitest';
import { CUE_LINE, MARKER_CUE, overlimitPrompt, readerPrompt, repeatedPlanterPrompt, sourceText } from '../../prober/src/probe/prompts.js';

describe('repeated planters', () => {
  const marker = `${MARKER_CUE}abcdefghijklmnopqrstuvwxyz`;

  it('repeat one marker, each copy led by the cue line, and end with the cue line', () => {
    const p = repeatedPlanterPrompt(marker, 3);
    expect(p.split(`\n${marker.replace(MARKER_CUE, CUE_LINE)}`)).toHaveLength(4);
    expect(p.endsWith(`\n${CUE_LINE}`)).toBe(true);
    expect(repeatedPlanterPrompt(marker, 0).split(marker.slice(MARKER_CUE.length))).toHaveLength(2);
  });

  it('readers and over-limit prompts end with the same 35 characters that lead every planted copy', () => {
    const lead = `\n${CUE_LINE}`;
    expect(lead).toHaveLength(36);
    expect(readerPrompt().endsWith(lead)).toBe(true);
    expect(sourceText(overlimitPrompt(2)).endsWith(lead)).toBe(true);
  });
});
