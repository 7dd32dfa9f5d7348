/**
 * overlimit-rejection (the cheap tier) against the bundled engine: the incident preset answers an
 * over-limit prompt and is caught as rejection-not-enforced; the remediated preset rejects it and passes.
 * Either way it plants nothing, and sends a small fraction of what overlimit-handoff sends.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';
import type { TargetConfig } from '../../prober/src/service/config.js';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe } from '../../prober/src/probe/probe.js';
import type { ProbeRun } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';

let engine: RunningEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function cycle(preset: 'incident' | 'remediated'): Promise<ProbeRun> {
  engine = await startEngine({ preset, scale: 64, log: () => {} });
  const registry = createMarkerRegistry();
  const target: TargetConfig = {
    name: 'engine', baseUrl: engine.url, headers: {}, tenants: [], scenarios: [],
    schedule: { intervalMs: 60_000, timeoutMs: 30_000, jitterMs: 0 }, budget: { tokensPerHour: 1e9 },
  };
  return runProbe({ registry, scanner: createScanner(registry) },
    { target, scenarios: ['overlimit-rejection', 'overlimit-handoff'], runId: preset, signal: new AbortController().signal, tokenBudget: 1e9 });
}

describe('overlimit-rejection against the bundled engine', () => {
  it('incident: the over-limit prompt is served, a rejection-not-enforced finding, with nothing planted', async () => {
    const run = await cycle('incident');
    const cheap = run.scenarios.find((s) => s.name === 'overlimit-rejection')!;
    const deep = run.scenarios.find((s) => s.name === 'overlimit-handoff')!;
    expect(cheap.outcome).toBe('fail');
    expect(cheap.findings.map((f) => f.kind)).toContain('rejection-not-enforced');
    expect(cheap.requests.some((r) => /plant/.test(r.role))).toBe(false);
    expect(cheap.tokens.sent).toBeLessThan(deep.tokens.sent);
  }, 60_000);

  it('remediated: every over-limit prompt is rejected: pass', async () => {
    const run = await cycle('remediated');
    const cheap = run.scenarios.find((s) => s.name === 'overlimit-rejection')!;
    expect(cheap.outcome).toBe('pass');
    expect(cheap.findings).toEqual([]);
  }, 60_000);
});
