/**
 * prefix-churn against the bundled engine: a prefix-cache entry that outlives its pages
 * (`prompt-cache-restore-race`, llama.cpp #27148's class) is found as a cross-request leak; fenced
 * restores and the correct cache pass; caching off is never a pass. Ground truth: the
 * engine's own foreign-read counter and its count of stale restores refused.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import type { TargetConfig } from '../../prober/src/service/config.js';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe } from '../../prober/src/probe/probe.js';
import type { ScenarioResult } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';

let engine: RunningEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

/** One probe cycle of prefix-churn; scale 128: context 8,192 tokens, pool 8,320 (two planters per churn). */
async function probe(options: StartEngineOptions): Promise<{ result: ScenarioResult; foreignReads: number }> {
  engine = await startEngine({ scale: 128, log: () => {}, ...options });
  const registry = createMarkerRegistry();
  const target: TargetConfig = {
    name: 'engine', baseUrl: engine.url, headers: {}, tenants: [], scenarios: [],
    schedule: { intervalMs: 60_000, timeoutMs: 30_000, jitterMs: 0 }, budget: { tokensPerHour: 1e9 },
  };
  const before = engine.engine.stats().foreignPageReadsTotal;
  const run = await runProbe(
    { registry, scanner: createScanner(registry) },
    { target, scenarios: ['prefix-churn'], runId: 'churn', signal: new AbortController().signal, tokenBudget: 1e9 },
  );
  expect(run.scenarios).toHaveLength(1);
  return { result: run.scenarios[0]!, foreignReads: engine.engine.stats().foreignPageReadsTotal - before };
}

const notes = (r: ScenarioResult): string => r.notes.join('\n');

describe('prefix-churn against the bundled engine', () => {
  // Deterministic on this engine (both rounds leak in every cycle measured), so one cycle, no retries.
  it('prompt-cache-restore-race: the re-read is served the churn planter\'s pages and copies its marker', async () => {
    const { result, foreignReads } = await probe({ preset: 'single', faults: ['prompt-cache-restore-race'] });
    expect(result.outcome).toBe('fail');
    const leaks = result.findings.filter((f) => f.kind === 'cross-request-leak');
    expect(leaks.length).toBeGreaterThan(0);
    expect(result.findings.every((f) => f.kind === 'cross-request-leak' && f.scenario === 'prefix-churn')).toBe(true);
    // Planted by the other tenant's churn, read by the tenant re-sending its own cached prefix.
    for (const leak of leaks) {
      expect(leak.evidence.planted).toMatchObject({ tenant: 'tenant-b', role: 'churn-planter' });
      expect(leak.evidence.read).toMatchObject({ tenant: 'tenant-a', role: 'churn-reader', status: 200 });
    }
    // The stale entry was a hit: the re-read reported the control's cached tokens after full churn.
    expect(notes(result)).toMatch(/round 1: cached tokens warm 0, control (\d+), re-read \1; churn \d+\/\d+ tokens/);
    expect(foreignReads).toBeGreaterThan(0);
  }, 60_000);

  it('restore-fencing: stale entries are refused at restore, the churn evidently evicted P: pass', async () => {
    const { result, foreignReads } = await probe({ preset: 'single', faults: ['prompt-cache-restore-race'], defenses: ['restore-fencing'] });
    expect(result.findings).toEqual([]);
    expect(result.outcome, notes(result)).toBe('pass');
    expect(engine!.engine.stats().prefixCache?.staleRestoresRefused).toBeGreaterThan(0);
    expect(foreignReads).toBe(0);
  }, 60_000);

  it('the correct cache (plain single): pass, with the figures in the notes', async () => {
    const { result, foreignReads } = await probe({ preset: 'single' });
    expect(result.findings).toEqual([]);
    expect(result.outcome, notes(result)).toBe('pass');
    expect(notes(result)).toMatch(/KV pool 8320 tokens \(pages of 16\): churn of \d+ tokens per round/);
    expect(notes(result)).toMatch(/round 2: cached tokens warm 0, control [1-9]\d*, re-read 0; churn \d+\/\d+ tokens in \d+\/\d+ planter\(s\); re-read answered: P evicted by the churn/);
    // The churn really covered the pool, in every round.
    for (const m of notes(result).matchAll(/churn (\d+)\/\d+ tokens/g)) expect(Number(m[1])).toBeGreaterThanOrEqual(8320);
    expect(foreignReads).toBe(0);
  }, 60_000);

  // Counters never conclude "no cache": the cycle's powered timing test does. It decides absence
  // (not-applicable, with its figures) when it has the power, and says inconclusive (power) when this
  // machine's timing noise denies it that; which one depends on load, so both are allowed: never a pass.
  it('prefix cache off: not-applicable on a powered timing test, else inconclusive; never a pass', async () => {
    const { result } = await probe({ preset: 'single', prefixCache: false });
    expect(result.findings).toEqual([]);
    expect(['not-applicable', 'inconclusive'], notes(result)).toContain(result.outcome);
    if (result.outcome === 'not-applicable') {
      expect(notes(result)).toMatch(/prefix reuse: none: no prefix reuse detectable \(a saving >= \d+% would have shown with probability 0\.95/);
      expect(notes(result)).toMatch(/not applicable: .*judged again every run/);
    } else {
      expect(notes(result)).toMatch(/cached tokens are not reported/);
    }
  }, 60_000);
});
