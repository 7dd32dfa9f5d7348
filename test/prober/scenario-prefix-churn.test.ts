/**
 * prefix-churn on endpoints that expose less than the bundled engine: no KV pool (only a context limit),
 * no cached tokens, caching off, a tiny token budget. Each degrades to inconclusive with a note saying why;
 * a pass without pool introspection needs the endpoint's own cached tokens to show the churn evicted P.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { TargetConfig } from '../../prober/src/service/config.js';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe } from '../../prober/src/probe/probe.js';
import type { ScenarioResult } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';
import { PREFIX_CHURN } from '../../prober/src/probe/scenarios/prefix-churn.js';
import { echoNoiseServer } from '../helpers/fake-endpoints.js';
import { startPrefixCacheServer, type PrefixCacheServerOptions } from '../helpers/prefix-cache-server.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

async function probe(url: string, tokenBudget = 1e9): Promise<ScenarioResult> {
  const registry = createMarkerRegistry();
  const target: TargetConfig = {
    name: 'toy', baseUrl: url, headers: {}, tenants: [], scenarios: [],
    schedule: { intervalMs: 60_000, timeoutMs: 10_000, jitterMs: 0 }, budget: { tokensPerHour: 1e9 },
  };
  const run = await runProbe({ registry, scanner: createScanner(registry) }, { target, scenarios: [PREFIX_CHURN], runId: 'churn', signal: new AbortController().signal, tokenBudget });
  expect(run.scenarios).toHaveLength(1);
  return run.scenarios[0]!;
}

async function toyCache(opts: PrefixCacheServerOptions): Promise<string> {
  const server = await startPrefixCacheServer(opts);
  closers.push(() => server.close());
  return server.url;
}

const notes = (r: ScenarioResult): string => r.notes.join('\n');

describe('prefix-churn without pool introspection', { timeout: 120_000 }, () => {
  it('is registered under its name', () => {
    expect(SCENARIO_NAMES).toContain('prefix-churn');
  });

  it('no pool and no cached tokens (a vLLM-like echo endpoint): inconclusive, saying the churn may not have reached P', async () => {
    const server = await echoNoiseServer();
    closers.push(() => server.close());
    const result = await probe(server.url);
    expect(result.findings).toEqual([]);
    expect(result.outcome).toBe('inconclusive');
    expect(notes(result)).toMatch(/KV pool not exposed: churn of 8192 tokens per round \(the context limit\), which may not reach P's pages/);
    expect(notes(result)).toMatch(/cached tokens are not reported/);
    // It still ran every round: readers answered, P's own marker echoed back counts as self-echo, not a leak.
    expect(result.requests.filter((r) => r.role === 'churn-reader' && r.transport === 'ok')).toHaveLength(2);
  });

  it('a cache larger than the churn (LRU beyond the context limit): P stays cached, inconclusive', async () => {
    const result = await probe(await toyCache({}));
    expect(result.findings).toEqual([]);
    expect(result.outcome).toBe('inconclusive');
    expect(notes(result)).toMatch(/P still cached after the churn/);
    expect(notes(result)).toMatch(/the pool is not exposed and P stayed cached/);
  });

  it('a cache the churn overruns: the re-read\'s cached tokens show P evicted, so it passes without introspection', async () => {
    const result = await probe(await toyCache({ capacityBlocks: 512 }));
    expect(result.findings).toEqual([]);
    expect(result.outcome, notes(result)).toBe('pass');
    expect(notes(result)).toMatch(/round 1: cached tokens warm 0, control [1-9]\d*, re-read 0;.*P evicted by the churn/);
  });

  it('rounds whose churn failed (transient 5xx) are not the last: more rounds are played until one is exercised', async () => {
    // Tenant A's salt is the first seen (calibration sends none); tenant B's first 16 requests (every planter of the first two rounds'
    // four waves) are answered 503, as llama.cpp answers a request whose output its parser rejects.
    let a: string | undefined;
    let failed = 0;
    const url = await toyCache({ capacityBlocks: 512, failWhen: ({ salt }) => salt !== '' && (a ??= salt) !== salt && failed++ < 16 });
    const result = await probe(url);
    expect(result.findings).toEqual([]);
    expect(result.outcome, notes(result)).toBe('pass');
    expect(notes(result)).toMatch(/round 1: .*churn 0\/\d+ tokens in 0\/8 planter\(s\)/);
    expect(notes(result)).toMatch(/round 3: .*P evicted by the churn/);
  });

  it('caching off: exact re-sends reported 0 cached tokens, so not-applicable with the evidence', async () => {
    const result = await probe(await toyCache({ noCache: true }));
    expect(result.outcome).toBe('not-applicable');
    // Its own re-sends' counters are not enough: it measured reuse with the shared, powered judgement.
    expect(notes(result)).toMatch(/round 1: cached tokens warm 0, control 0/);
    expect(notes(result)).toMatch(/not applicable: no prefix reuse detectable \(a saving >= \d+% would have shown with probability 0\.95.*\(prefix-churn's reuse measurement\)/);
  });

  it('a token budget too small for the churn: inconclusive, nothing thrown', async () => {
    const result = await probe(await toyCache({ capacityBlocks: 512 }), 4_000);
    expect(result.findings).toEqual([]);
    expect(result.outcome).toBe('inconclusive');
  });
});
