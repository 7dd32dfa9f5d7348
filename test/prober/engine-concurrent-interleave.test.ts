/**
 * concurrent-interleave against the bundled engine, where the pool is exposed: the workload holds ballast
 * over it, so a prefix-cache entry restored into pages another request has since been given
 * (`prompt-cache-restore-race`, llama.cpp #27148's class) is found even with a FIFO free list on a pool the
 * waves alone do not cycle (1/32 scale: before ballast, 0 of 30 runs caught it at any rate). Fenced restores
 * and the correct cache pass, stating the measured power; ground truth is the engine's own counters.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import type { TargetConfig } from '../../prober/src/service/config.js';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { createProbe, runProbe } from '../../prober/src/probe/probe.js';
import type { ScenarioResult } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import type { ProbeTuning } from '../../prober/src/probe/scenarios/context.js';
import { interleaveSizes, type AdvertisedPools } from '../../prober/src/probe/scenarios/interleave-sizing.js';
import { createPoolHolds } from '../../prober/src/probe/scenarios/pool-hold.js';
import {
  CONCURRENT_INTERLEAVE_CONFIDENCE,
  CONCURRENT_INTERLEAVE_DETECTABLE_RATE,
  CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE,
  CONCURRENT_INTERLEAVE_WINDOWS,
} from '../../prober/src/probe/scenarios/race-power.js';

let engine: RunningEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

/** One cycle of concurrent-interleave; scale 32: context 32,768 tokens, pool 33,280, FIFO free list. */
async function probe(options: StartEngineOptions, tuning: ProbeTuning = {}): Promise<{ result: ScenarioResult; engine: RunningEngine }> {
  engine = await startEngine({ preset: 'single', scale: 32, freeList: 'fifo', log: () => {}, ...options });
  const registry = createMarkerRegistry();
  const target: TargetConfig = {
    name: 'engine', baseUrl: engine.url, headers: {}, tenants: [], scenarios: [],
    schedule: { intervalMs: 60_000, timeoutMs: 60_000, jitterMs: 0 }, budget: { tokensPerHour: 1e9 },
  };
  const run = await runProbe(
    { registry, scanner: createScanner(registry), tuning },
    { target, scenarios: ['concurrent-interleave'], runId: 'interleave', signal: new AbortController().signal, tokenBudget: 1e9 },
  );
  expect(run.scenarios).toHaveLength(1);
  return { result: run.scenarios[0]!, engine };
}

const notes = (r: ScenarioResult): string => r.notes.join('\n');

describe('concurrent-interleave against the bundled engine (FIFO free list, 1/32)', () => {
  it('holds ballast over the exposed pool and finds the restore race as a cross-request leak', async () => {
    const { result, engine } = await probe({ faults: ['prompt-cache-restore-race'] });
    expect(notes(result)).toMatch(/ballast ~\d+ tokens in 1 request\(s\) over the reservation pool of 33280, leaving ~\d+ free/);
    expect(result.outcome, notes(result)).toBe('fail');
    const leaks = result.findings.filter((f) => f.kind === 'cross-request-leak');
    expect(leaks.length).toBeGreaterThan(0);
    for (const leak of leaks) {
      expect(leak.evidence.planted?.role).toBe('planter');
      expect(leak.evidence.read?.role).toBe('reader');
    }
    expect(engine.engine.stats().foreignPageReadsTotal).toBeGreaterThan(0);
  }, 60_000);

  it('restore-fencing: the same race is exercised (stale restores refused) and the run passes', async () => {
    const { result, engine } = await probe({ faults: ['prompt-cache-restore-race'], defenses: ['restore-fencing'] });
    expect(result.findings).toEqual([]);
    expect(result.outcome, notes(result)).toBe('pass');
    // The ballast made the readers' pages go to other requests while their entries lived: the race happened.
    expect(engine.engine.stats().prefixCache?.staleRestoresRefused).toBeGreaterThan(0);
    expect(engine.engine.stats().foreignPageReadsTotal).toBe(0);
  }, 60_000);

  it('the correct cache passes with the measured power, and no request read another\'s pages', async () => {
    const { result, engine } = await probe({});
    expect(result.findings).toEqual([]);
    expect(result.outcome, notes(result)).toBe('pass');
    expect(result.power).toEqual({ trials: expect.any(Number), detectableRate: CONCURRENT_INTERLEAVE_DETECTABLE_RATE, confidence: CONCURRENT_INTERLEAVE_CONFIDENCE, basis: 'measured' });
    expect(result.power!.trials).toBeGreaterThanOrEqual(CONCURRENT_INTERLEAVE_WINDOWS);
    expect(notes(result)).toMatch(/power \(measured on the bundled engine.s prompt-cache-restore-race, bench\/race-calibration-interleave.json\)/);
    expect(engine.engine.stats().foreignPageReadsTotal).toBe(0);
  }, 60_000);

  it('interleave_ballast: false: no ballast, said so, and a pass states the power measured without it', async () => {
    const { result } = await probe({}, { interleaveBallast: false });
    expect(notes(result)).toMatch(/no ballast \(interleave_ballast: false\)/);
    expect(result.outcome, notes(result)).toBe('pass');
    expect(result.power).toMatchObject({ confidence: CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE, basis: 'measured' });
    expect(notes(result)).toMatch(/power: none stated without ballast/);
  }, 60_000);
});

describe('one ballast an endpoint at a time', () => {
  it('beside abort-race in one prober (serve runs a cycle\'s scenarios two at a time): one holds the pool, the other runs in its sliver and says whose ballast it was; both pass', async () => {
    engine = await startEngine({ preset: 'single', scale: 64, freeList: 'fifo', log: () => {} });
    const registry = createMarkerRegistry();
    const probe = createProbe({ registry, scanner: createScanner(registry) });
    const target: TargetConfig = {
      name: 'engine', baseUrl: engine.url, headers: {}, tenants: [], scenarios: [],
      schedule: { intervalMs: 300_000, timeoutMs: 120_000, jitterMs: 0 }, budget: { tokensPerHour: 1e9 },
    };
    const runs = await Promise.all(['abort-race', 'concurrent-interleave'].map((s) =>
      probe({ target, scenarios: [s], runId: `beside-${s}`, signal: new AbortController().signal, tokenBudget: 1e9 })));
    const [abort, interleave] = runs.map((r) => r.scenarios[0]!);
    expect(abort!.outcome, notes(abort!)).toBe('pass');
    expect(interleave!.outcome, notes(interleave!)).toBe('pass');
    const borrowed = [...abort!.notes, ...interleave!.notes].filter((n) => /'s ballast held the pool at \d+ (window|wave)\(s\): this scenario's was not started beside it/.test(n));
    expect(borrowed.length, [notes(abort!), notes(interleave!)].join('\n---\n')).toBeGreaterThan(0);
    // Under another's ballast the waves still ran with the pool held: the measured statement stands.
    expect(interleave!.power).toMatchObject({ confidence: CONCURRENT_INTERLEAVE_CONFIDENCE, basis: 'measured' });
  }, 120_000);

  it('holds are per endpoint (base URL, with or without /v1) and only the holder gives one back', () => {
    const holds = createPoolHolds();
    const a = {};
    const b = {};
    expect(holds('http://h:1/v1').take(a, 'abort-race')).toBe(true);
    expect(holds('http://h:1/').take(b, 'concurrent-interleave')).toBe(false);
    expect(holds('http://h:1').holder()).toBe('abort-race');
    expect(holds('http://h:2').take(b, 'concurrent-interleave')).toBe(true);
    holds('http://h:1').give(b);
    expect(holds('http://h:1').holder()).toBe('abort-race');
    holds('http://h:1').give(a);
    expect(holds('http://h:1').take(b, 'concurrent-interleave')).toBe(true);
  });
});

describe('interleave sizing', () => {
  const pools: Record<string, AdvertisedPools & { poolTokens: number }> = {
    '1/64': { contextTokens: 16_384, poolTokens: 16_640, pageSize: 16 },
    '1/32': { contextTokens: 32_768, poolTokens: 33_280, pageSize: 16 },
    'full scale, decode pool': { contextTokens: 1_048_576, poolTokens: 1_064_960, reservationPoolTokens: 1_064_960, pageSize: 16 },
    'pool 4x the context': { contextTokens: 131_072, poolTokens: 524_288, pageSize: 16 },
  };
  it.each(Object.entries(pools))('%s: ballast and the free room fill the pool; the room holds a planter beside a reader; two restores of one opening are a sliver of planters apart', (_, s) => {
    const z = interleaveSizes(s, {});
    const pool = s.reservationPoolTokens ?? s.poolTokens;
    expect(z.ballastTokens + z.freeTokens!).toBe(pool);
    expect(z.freeTokens!).toBeGreaterThanOrEqual(z.planterTokens + z.readerTokens + 2 * 48);
    expect(z.readerTokens).toBeLessThanOrEqual(z.planterTokens / 4);
    // Between two long readers of one tenant with the same opening: 2 x variants of that tenant's readers, so
    // 2 x variants planters of both tenants.
    expect(2 * z.readerVariants * z.planterTokens).toBeGreaterThanOrEqual(z.freeTokens!);
  });

  it('no pool exposed, or ballast off: the sizes measured before ballast, one reader opening', () => {
    for (const z of [interleaveSizes({ contextTokens: 32_768 }, {}), interleaveSizes(pools['1/32']!, { interleaveBallast: false })]) {
      expect(z.ballastTokens).toBe(0);
      expect(z.readerVariants).toBe(1);
      expect(z.planterTokens).toBe(4096);
      expect(z.readerTokens).toBe(3984);
    }
  });
});
