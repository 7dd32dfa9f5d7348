/**
 * concurrent-interleave against the toy prefix-cache server: planters, readers and over-limit prompts of
 * two tenants in flight together pass on a well-behaved server; a cache that hands one tenant's entry to
 * another's concurrent reader is a cross-request leak naming both; an over-limit prompt answered under
 * concurrency is rejection-not-enforced.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { TargetConfig } from '../../prober/src/service/config.js';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe } from '../../prober/src/probe/probe.js';
import type { ScenarioResult } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import { slotOrder } from '../../prober/src/probe/scenarios/concurrent-interleave.js';
import type { Tenant } from '../../prober/src/probe/scenarios/context.js';
import { startPrefixCacheServer, type PrefixCacheServer, type PrefixCacheServerOptions } from '../helpers/prefix-cache-server.js';

let server: PrefixCacheServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function probe(opts: PrefixCacheServerOptions): Promise<ScenarioResult> {
  server = await startPrefixCacheServer({ prefillMsPerToken: 0.01, ...opts });
  const registry = createMarkerRegistry();
  const target: TargetConfig = {
    name: 'toy', baseUrl: server.url, headers: {}, tenants: [], scenarios: [],
    schedule: { intervalMs: 60_000, timeoutMs: 10_000, jitterMs: 0 }, budget: { tokensPerHour: 1e9 },
  };
  const run = await runProbe(
    { registry, scanner: createScanner(registry) },
    { target, scenarios: ['concurrent-interleave'], runId: 'interleave', signal: new AbortController().signal, tokenBudget: 1e9 },
  );
  return run.scenarios[0]!;
}

describe('concurrent-interleave', () => {
  it('passes on a well-behaved server, with both tenants and every role in flight together', async () => {
    const result = await probe({});
    expect(result.findings).toEqual([]);
    expect(result.outcome, result.notes.join('\n')).toBe('pass');
    const waves = result.notes.filter((n) => n.startsWith('wave of'));
    expect(waves.map((w) => /^wave of (\d+)/.exec(w)?.[1])).toEqual(['2', '4', '8']);
    // Even the narrowest wave mixes tenants, and the widest carries planters, readers and an over-limit prompt of both.
    expect(waves[0]).toMatch(/tenant-a:planter, tenant-b:reader/);
    for (const role of ['planter', 'reader']) {
      for (const tenant of ['tenant-a', 'tenant-b']) expect(result.requests.some((r) => r.role === role && r.tenant === tenant), `${tenant} ${role}`).toBe(true);
    }
    const over = result.requests.filter((r) => r.role === 'overlimit');
    expect(over.length).toBeGreaterThanOrEqual(2);
    expect(over.every((r) => r.status === 400)).toBe(true);
    // Readers that open like a planter did share cache blocks with same-tenant planters: the path was exercised.
    expect(server!.stats().hits).toBeGreaterThan(0);
  });

  it('finds a reader served another tenant\'s cached entry, and names both tenants', async () => {
    const result = await probe({ ignoreSalt: true, leaky: true });
    expect(result.outcome).toBe('fail');
    const leaks = result.findings.filter((f) => f.kind === 'cross-request-leak');
    const crossTenant = leaks.filter((f) => f.evidence.planted?.tenant !== f.evidence.read?.tenant);
    expect(crossTenant.length, JSON.stringify(leaks.slice(0, 2))).toBeGreaterThan(0);
    for (const f of crossTenant) {
      expect(['tenant-a', 'tenant-b']).toContain(f.evidence.planted?.tenant);
      expect(['tenant-a', 'tenant-b']).toContain(f.evidence.read?.tenant);
      expect(f.evidence.planted?.role).toBe('planter');
    }
    expect(server!.stats().crossSaltHits).toBeGreaterThan(0);
  });

  it('flags an over-limit prompt answered with text under concurrency', async () => {
    const result = await probe({ enforceContext: false });
    const served = result.findings.filter((f) => f.kind === 'rejection-not-enforced');
    expect(served.length).toBeGreaterThanOrEqual(2);
    expect(served[0]!.evidence.read?.status).toBe(200);
    expect(served[0]!.evidence.facts).toMatchObject({ contextTokens: 8192 });
    expect(result.outcome).toBe('fail');
  });

  it('orders slots so that neighbours are of different tenants and every combination comes round', () => {
    const t = (name: string) => ({ name }) as Tenant;
    const three = slotOrder([t('A'), t('B')], ['planter', 'reader', 'overlimit']).map((s) => `${s.tenant.name}:${s.role}`);
    expect(three).toEqual(['A:planter', 'B:reader', 'A:overlimit', 'B:planter', 'A:reader', 'B:overlimit']);
    const two = slotOrder([t('A'), t('B')], ['planter', 'reader']).map((s) => `${s.tenant.name}:${s.role}`);
    expect(new Set(two).size).toBe(4);
    expect(two.slice(0, 2)).toEqual(['A:planter', 'B:reader']);
    expect(two.slice(2, 4)).toEqual(['B:planter', 'A:reader']);
  });
});
