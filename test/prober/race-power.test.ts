/**
 * Race scenarios state their power, and the token budget never passes for the endpoint: abort-race and
 * concurrent-interleave pass only with 29 independent windows exercised (a fault showing in 10% of windows
 * caught with probability >= 0.95); short of that they are inconclusive with the reason (power, budget) and
 * never claim something of the endpoint that the budget caused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe, starvedByBudget } from '../../prober/src/probe/probe.js';
import type { ScenarioResult } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import type { ProbeTuning } from '../../prober/src/probe/scenarios/context.js';
import type { TargetConfig } from '../../prober/src/service/config.js';
import { echoNoiseServer, type FakeServer } from '../helpers/fake-endpoints.js';

let server: FakeServer;
beforeAll(async () => {
  server = await echoNoiseServer({ context: 4096, seed: 11 });
});
afterAll(() => server.close());

async function probe(scenario: string, opts: { tokenBudget?: number; tuning?: ProbeTuning } = {}): Promise<ScenarioResult> {
  const registry = createMarkerRegistry();
  const target: TargetConfig = {
    name: 'echo', baseUrl: server.url, headers: {}, tenants: [], scenarios: [],
    schedule: { intervalMs: 60_000, timeoutMs: 30_000, jitterMs: 0 }, budget: { tokensPerHour: 1e12 },
  };
  const run = await runProbe(
    { registry, scanner: createScanner(registry), tuning: { planterTokens: 256, ...opts.tuning } },
    { target, scenarios: [scenario], runId: `power-${scenario}`, signal: new AbortController().signal, tokenBudget: opts.tokenBudget ?? 1e12 },
  );
  return run.scenarios[0]!;
}

describe.each(['abort-race', 'concurrent-interleave'])('%s', (scenario) => {
  it('a pass states its power: at least 29 windows, confidence >= 0.95 at a 10% detectable rate', async () => {
    const r = await probe(scenario);
    expect(r.outcome, r.notes.join('\n')).toBe('pass');
    expect(r.power).toBeDefined();
    expect(r.power!.trials).toBeGreaterThanOrEqual(29);
    expect(r.power!.detectableRate).toBe(0.1);
    expect(r.power!.confidence).toBeGreaterThanOrEqual(0.95);
    expect(r.power!.confidence).toBeCloseTo(1 - 0.9 ** r.power!.trials, 3);
  });

  it('cut by the token budget: inconclusive, reason budget, with what it reached and no claim about the endpoint', async () => {
    const r = await probe(scenario, { tokenBudget: 3_000 });
    expect(r.outcome).toBe('inconclusive');
    expect(r.reason).toBe('budget');
    expect(r.findings).toEqual([]);
    expect(r.power?.confidence ?? 0).toBeLessThan(0.95);
    const notes = r.notes.join('\n');
    expect(notes).toMatch(/token budget/);
    expect(notes).not.toMatch(/not reported|no planter was accepted|not exercised/);
  });
});

describe('abort-race power', () => {
  it('fewer windows than the stated power needs (abortRounds 4): inconclusive, reason power, never a pass', async () => {
    const r = await probe('abort-race', { tuning: { abortRounds: 4 } });
    expect(r.outcome).toBe('inconclusive');
    expect(r.reason).toBe('power');
    expect(r.power!.trials).toBe(4);
    expect(r.notes.join('\n')).toMatch(/4 race window\(s\) exercised/);
  });
});

describe('starvedByBudget', () => {
  const base: ScenarioResult = {
    name: 'prefix-isolation', outcome: 'pass', findings: [], requests: [], tokens: { sent: 0, billed: 0 }, durationMs: 1,
    notes: ['cached tokens are not reported: timing only', 'tenant-a control showed reuse'],
  };
  it('a scenario with a refused request is never a pass or not-applicable: inconclusive, reason budget', () => {
    for (const outcome of ['pass', 'not-applicable', 'inconclusive'] as const) {
      const r = starvedByBudget({ ...base, outcome }, 2);
      expect(r.outcome).toBe('inconclusive');
      expect(r.reason).toBe('budget');
      expect(r.notes.join('\n')).not.toMatch(/not reported/);
      expect(r.notes.at(-1)).toMatch(/token budget: 2 request\(s\) not sent/);
    }
  });
  it('a finding stands; nothing refused changes nothing', () => {
    const fail = { ...base, outcome: 'fail' as const };
    expect(starvedByBudget(fail, 3)).toBe(fail);
    expect(starvedByBudget(base, 0)).toBe(base);
  });
});
