/**
 * Race scenarios state their power, and the token budget never passes for the endpoint: abort-race passes only
 * after the workload whose recall bench:race-calibration measured (29 counted windows) and states that
 * measurement; concurrent-interleave likewise after the 29 windows its measurement (bench:race-calibration
 * --scenario concurrent-interleave, prompt-cache-restore-race) ran, stating that. Short of that they are inconclusive with the reason (power,
 * budget) and never claim something of the endpoint that the budget caused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe, starvedByBudget } from '../../prober/src/probe/probe.js';
import type { ScenarioResult } from '../../prober/src/probe/result.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import type { ProbeTuning } from '../../prober/src/probe/scenarios/context.js';
import type { TargetConfig } from '../../prober/src/service/config.js';
import {
  ABORT_RACE_CONFIDENCE,
  ABORT_RACE_DETECTABLE_RATE,
  ABORT_RACE_MEASURED_FAULTS,
  CONCURRENT_INTERLEAVE_CONFIDENCE,
  CONCURRENT_INTERLEAVE_DETECTABLE_RATE,
  CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE,
  CONCURRENT_INTERLEAVE_WINDOWS,
  abortRacePower,
  concurrentInterleavePower,
  independentWindows,
} from '../../prober/src/probe/scenarios/race-power.js';
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

describe('abort-race', () => {
  it('a pass states the measured power: the calibrated rate and confidence, its independent windows counted once each', async () => {
    const r = await probe('abort-race');
    expect(r.outcome, r.notes.join('\n')).toBe('pass');
    expect(r.power).toEqual({ trials: expect.any(Number), detectableRate: ABORT_RACE_DETECTABLE_RATE, confidence: ABORT_RACE_CONFIDENCE, basis: 'measured' });
    const notes = r.notes.join('\n');
    const m = /(\d+) race window\(s\) exercised.*?: (\d+) mid-transfer, (\d+) mid-stream, (\d+) re-send\(s\) in (\d+) group\(s\)/.exec(notes);
    expect(m, notes).not.toBeNull();
    const [counted, midTransfer, midStream, resends, resendGroups] = m!.slice(1).map(Number) as [number, number, number, number, number];
    expect(counted).toBeGreaterThanOrEqual(29);
    expect(midTransfer + midStream + resends).toBe(counted);
    // Re-sends of one prompt count once; mid-stream windows cannot show a transfer late write.
    expect(r.power!.trials).toBe(Math.min(midTransfer + resendGroups, midStream + resendGroups));
    expect(r.power!.trials).toBeLessThan(counted);
    expect(notes).toContain(`power (measured on the bundled engine's ${ABORT_RACE_MEASURED_FAULTS.join(' and ')}, bench/race-calibration.json)`);
  }, 120_000);

  it('short of the measured workload the confidence is scaled down by the share run, and says so', () => {
    const w = { midTransfer: 1, midStream: 1, resends: 2, resendGroups: 1 };
    expect(independentWindows(w)).toEqual({ transfer: 2, copy: 2, both: 2 });
    const short = abortRacePower(4, w);
    expect(short.basis).toBe('scaled');
    expect(short.confidence).toBeLessThan(ABORT_RACE_CONFIDENCE);
    expect(short.confidence).toBeCloseTo(1 - (1 - ABORT_RACE_CONFIDENCE) ** (4 / 29), 3);
    expect(abortRacePower(0, w).confidence).toBe(0);
    expect(abortRacePower(40, w)).toMatchObject({ basis: 'measured', confidence: ABORT_RACE_CONFIDENCE });
  });
});

describe('concurrent-interleave', () => {
  // With the pool exposed (the bundled engine) a pass states CONCURRENT_INTERLEAVE_CONFIDENCE:
  // test/prober/engine-concurrent-interleave.test.ts. This endpoint exposes none.
  it('no pool exposed: no ballast, said so, and a pass after the 29 windows states the power measured without ballast', async () => {
    const r = await probe('concurrent-interleave');
    expect(r.outcome, r.notes.join('\n')).toBe('pass');
    expect(r.power).toEqual({ trials: expect.any(Number), detectableRate: CONCURRENT_INTERLEAVE_DETECTABLE_RATE, confidence: CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE, basis: 'measured' });
    expect(r.power!.trials).toBeGreaterThanOrEqual(CONCURRENT_INTERLEAVE_WINDOWS);
    const notes = r.notes.join('\n');
    expect(notes).toMatch(/no ballast \(pool not exposed\)/);
    expect(notes).toMatch(/power: none stated without ballast \(measured on the bundled engine.s prompt-cache-restore-race/);
    expect(notes).not.toMatch(/caught with probability 0\.95/);
  });

  it('short of the measured workload the confidence is scaled down by the share run, and says so', () => {
    const short = concurrentInterleavePower(10);
    expect(short).toMatchObject({ trials: 10, detectableRate: CONCURRENT_INTERLEAVE_DETECTABLE_RATE, basis: 'scaled' });
    expect(short.confidence).toBeLessThanOrEqual(CONCURRENT_INTERLEAVE_CONFIDENCE);
    expect(short.confidence).toBeCloseTo(1 - (1 - CONCURRENT_INTERLEAVE_CONFIDENCE) ** (10 / CONCURRENT_INTERLEAVE_WINDOWS), 3);
    expect(concurrentInterleavePower(0).confidence).toBe(0);
    expect(concurrentInterleavePower(40)).toMatchObject({ basis: 'measured', confidence: CONCURRENT_INTERLEAVE_CONFIDENCE });
    expect(concurrentInterleavePower(40, false)).toMatchObject({ basis: 'measured', confidence: CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE });
  });
});

describe.each(['abort-race', 'concurrent-interleave'])('%s', (scenario) => {

  it('cut by the token budget: inconclusive, reason budget, with what it reached and no claim about the endpoint', async () => {
    const r = await probe(scenario, { tokenBudget: 3_000 });
    expect(r.outcome).toBe('inconclusive');
    expect(r.reason).toBe('budget');
    expect(r.findings).toEqual([]);
    expect(r.power?.basis).not.toBe('measured');
    // Never more than the measured statement (for concurrent-interleave that is 0: race-power.ts says why).
    if (scenario === 'abort-race') expect(r.power?.confidence ?? 0).toBeLessThan(ABORT_RACE_CONFIDENCE);
    else expect(r.power?.confidence ?? 0).toBeLessThanOrEqual(CONCURRENT_INTERLEAVE_CONFIDENCE);
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
    expect(r.power!.basis).toBe('scaled');
    expect(r.power!.confidence).toBeLessThan(ABORT_RACE_CONFIDENCE);
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
