/**
 * Prompts of a run are its own (promptRef): a prefix cache that still holds last run's prompts must not serve
 * this run's readers whole, or a bug at the boundary of reuse never reaches them (measured on a real llama.cpp
 * with slot-reuse-overlong-prefix: fixed readers were served from the host prompt cache and warm servers passed).
 */
import { describe, expect, it } from 'vitest';
import { openerPrompt, overlimitPrompt, planterPrompt, promptRef, sourceText } from '../../prober/src/probe/prompts.js';

describe('promptRef', () => {
  it('differs from run to run, keeps the width calibration measured, and never looks like a marker', () => {
    const refs = Array.from({ length: 200 }, (_, i) => promptRef(`run-${i}`));
    expect(new Set(refs).size).toBeGreaterThan(195);
    for (const r of refs) expect(r).toMatch(/^\d{6}$/);
    expect(promptRef('run-1')).toBe(promptRef('run-1'));
    expect(promptRef('run-1', 7)).toBe(`${promptRef('run-1')}-7`);
    expect(sourceText(overlimitPrompt(3, promptRef('run-1'))).length).toBe(sourceText(overlimitPrompt(3)).length);
  });

  it('an opener shares a planter\'s opening exactly up to where the planter\'s markers begin', () => {
    const planter = planterPrompt(['kvcanary-abcdefghijklmnopqrstuvwxyz']);
    const opener = openerPrompt(promptRef('run-1', 3));
    let common = 0;
    while (planter[common] === opener[common]) common++;
    expect(planter.slice(common)).toMatch(/^kvcanary-abcdefghijklmnopqrstuvwxyz/);
    expect(opener.endsWith('kvcanary-')).toBe(true);
  });
});
