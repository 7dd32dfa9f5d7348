/**
 * The bundled engine's host-offload tier as a prefix-reuse path, probed from outside. Reuse through any tier
 * counts: `--preset remediated --host-offload` (prefix cache off, the tier the only reuse path) makes the
 * three prefix scenarios applicable, and they pass. `host-tier-ignores-salt` (the device cache honours the
 * salt, the host tier does not: SGLang HiCache's class) is found by two tenants the operator declared apart
 * by cache_salt, and `salted-host-tier` stops it. Ground truth: the engine's pages loaded from host memory and
 * its foreign-read counter.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import type { TargetConfig, TenantConfig } from '../../prober/src/service/config.js';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe } from '../../prober/src/probe/probe.js';
import type { ProbeRun } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';

let engine: RunningEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

const PREFIX = ['prefix-isolation', 'prefix-churn', 'prefix-collision'];
const SALTED: TenantConfig[] = [{ name: 'alice', cacheSalt: 'alice-salt' }, { name: 'bob', cacheSalt: 'bob-salt' }];

async function probe(options: StartEngineOptions, scenarios: string[], tenants: TenantConfig[] = []): Promise<{ run: ProbeRun; pagesLoaded: number; foreignReads: number }> {
  engine = await startEngine({ scale: 64, log: () => {}, ...options });
  const registry = createMarkerRegistry();
  const target: TargetConfig = {
    name: 'engine', baseUrl: engine.url, headers: {}, tenants, scenarios: [],
    schedule: { intervalMs: 600_000, timeoutMs: 300_000, jitterMs: 0 }, budget: { tokensPerHour: 1e12 },
  };
  const run = await runProbe({ registry, scanner: createScanner(registry) }, { target, scenarios, runId: 'host-tier', signal: new AbortController().signal, tokenBudget: 1e12 });
  const s = engine.engine.stats();
  return { run, pagesLoaded: s.hostOffload?.pagesLoaded ?? 0, foreignReads: s.foreignPageReadsTotal };
}

const notesOf = (run: ProbeRun, name: string): string => run.scenarios.find((s) => s.name === name)?.notes.join('\n') ?? '';

describe('the bundled engine\'s host tier, from outside', () => {
  it('remediated --host-offload: the prefix scenarios are applicable (cached tokens count host-tier loads) and pass', async () => {
    const { run, pagesLoaded, foreignReads } = await probe({ preset: 'remediated', hostOffload: true }, PREFIX);
    for (const name of PREFIX) expect(run.scenarios.find((s) => s.name === name)?.outcome, `${name}:\n${notesOf(run, name)}`).toBe('pass');
    expect(notesOf(run, 'prefix-isolation')).toMatch(/prefix reuse: shown: exact same-tenant re-sends: cached tokens above the first send's/);
    expect(pagesLoaded).toBeGreaterThan(0);
    expect(foreignReads).toBe(0);
  }, 300_000);

  it('host-tier-ignores-salt: the other tenant loads the first one\'s pages from host memory: prefix-cache-shared-across-tenants, a fail (exit 1)', async () => {
    const { run, foreignReads } = await probe({ preset: 'remediated', faults: ['host-tier-ignores-salt'] }, ['prefix-isolation'], SALTED);
    expect(run.outcome, notesOf(run, 'prefix-isolation')).toBe('fail');
    const shared = run.scenarios[0]!.findings.find((f) => f.kind === 'prefix-cache-shared-across-tenants');
    expect(shared?.severity).toBe('critical');
    expect(shared?.evidence.facts).toMatchObject({ saltsDiffer: true, syntheticTenants: false });
    expect(foreignReads).toBeGreaterThan(0);
  }, 300_000);

  it('salted-host-tier stops it: prefix-isolation passes and the refusals are counted', async () => {
    const { run, foreignReads } = await probe({ preset: 'remediated', faults: ['host-tier-ignores-salt'], defenses: ['salted-host-tier'] }, ['prefix-isolation'], SALTED);
    expect(run.scenarios[0]!.findings).toEqual([]);
    expect(run.scenarios[0]!.outcome, notesOf(run, 'prefix-isolation')).toBe('pass');
    expect(foreignReads).toBe(0);
    expect(engine!.engine.stats().defenseBlocks['salted-host-tier']).toBeGreaterThan(0);
  }, 300_000);
});
