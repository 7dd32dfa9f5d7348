/**
 * A default `kvcanary run` against endpoints without a prefix cache, or without cached_tokens: the prefix
 * scenarios are not-applicable only on evidence of no reuse (judged every run), and a cache that does not
 * report cached_tokens is still judged by timing. Errors are never read as "no reuse".
 */
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { startPrefixCacheServer, type PrefixCacheServer, type PrefixCacheServerOptions } from '../helpers/prefix-cache-server.js';

interface Doc {
  outcome: string;
  scenarios: Array<{ name: string; outcome: string; notes: string[] }>;
  findings: Array<{ kind: string; severity: string }>;
}

let server: PrefixCacheServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const PREFIX = ['prefix-isolation', 'prefix-collision', 'prefix-churn'];

async function run(opts: PrefixCacheServerOptions): Promise<{ code: number | null; doc: Doc; outcome: (name: string) => string | undefined; notes: (name: string) => string }> {
  server = await startPrefixCacheServer(opts);
  const r = await runCli(['run', '--target', server.url, '--json', '-q'], { timeoutMs: 180_000 });
  const doc = JSON.parse(r.stdout) as Doc;
  const find = (name: string) => doc.scenarios.find((s) => s.name === name);
  return { code: r.code, doc, outcome: (n) => find(n)?.outcome, notes: (n) => find(n)?.notes.join('\n') ?? '' };
}

describe('kvcanary run: prefix scenarios not applicable on evidence', () => {
  it('exits 0 against a clean endpoint with no prefix cache that advertises nothing but /v1/models', async () => {
    const r = await run({ noCache: true, reportCached: false });
    expect(r.doc.findings).toEqual([]);
    for (const name of PREFIX) expect(r.outcome(name), `${name}: ${r.notes(name)}`).toBe('not-applicable');
    // Absence shown, with its detection limit: the timing test was powered to see what a hit would save.
    expect(r.notes('prefix-isolation')).toMatch(/not applicable: no prefix reuse detectable \(a saving >= \d+% would have shown with probability 0\.95; a hit on this prefix would save about \d+%/);
    // prefix-churn and prefix-collision conclude on that same judgement, never on their own counters alone.
    expect(r.notes('prefix-churn')).toMatch(/not applicable: no prefix reuse detectable .*\(prefix-isolation\)/);
    expect(r.notes('prefix-collision')).toMatch(/not applicable: no prefix reuse detectable .*\(prefix-isolation\)/);
    expect(r.outcome('capacity-audit')).toBe('not-applicable');
    expect({ outcome: r.doc.outcome, code: r.code }).toEqual({ outcome: 'pass', code: 0 });
  }, 200_000);

  it('judges a cache that reports no cached_tokens by timing, as before', async () => {
    const r = await run({ reportCached: false });
    expect(r.outcome('prefix-isolation'), r.notes('prefix-isolation')).toBe('pass');
    expect(r.notes('prefix-isolation')).toMatch(/cached_tokens not reported in the first answered round: timing speaks, so 24 rounds/);
  }, 200_000);

  it('is inconclusive, not not-applicable, when prefix requests go unanswered', async () => {
    const r = await run({ noCache: true, failEvery: 1 });
    for (const name of PREFIX) expect(r.outcome(name), name).not.toBe('not-applicable');
    expect(r.code).toBe(2);
  }, 200_000);
});
