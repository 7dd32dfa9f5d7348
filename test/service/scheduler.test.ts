import { Writable } from 'node:stream';
import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { parseConfig, type ServiceConfig } from '../../prober/src/service/config.js';
import { makeFinding, type Finding } from '../../prober/src/probe/findings.js';
import { createLogger } from '../../prober/src/service/logger.js';
import { createMetrics, type Metrics } from '../../prober/src/service/metrics.js';
import type { ProbeFn, ProbeRequest } from '../../prober/src/probe/probe-fn.js';
import type { Outcome, ProbeRun, ScenarioResult } from '../../prober/src/probe/result.js';
import { createScheduler, type Scheduler } from '../../prober/src/service/scheduler.js';
import { openStore, type Store } from '../../prober/src/service/store.js';

const KNOWN = ['overlimit-handoff', 'abort-race', 'capacity-audit'];
const T0 = Date.parse('2026-03-01T00:00:00Z');
const S = 1000;
const M = 60 * S;

/** No default cost tiers: these tests drive the loop with every scenario every cycle (tiers: scenario-schedule.test.ts). */
function config(yaml: string): ServiceConfig {
  return parseConfig(yaml, { knownScenarios: KNOWN, env: {}, defaultScenarioIntervals: {} });
}

function result(name: string, outcome: Outcome, extra: Partial<ScenarioResult> = {}): ScenarioResult {
  return { name, outcome, findings: [], requests: [], notes: [], tokens: { sent: 0, billed: 0 }, durationMs: 1, ...extra };
}

const leak = (scenario = 'abort-race'): Finding =>
  makeFinding('cross-request-leak', scenario, { match: 'kvcanary-aaaa', excerpt: 'PRIVATE-EXCERPT-TEXT' }, 1e-20);

interface Call { req: ProbeRequest; at: number; done: boolean }

/** A fake probe: `behave` decides, per call, what the probe does (with fake timers, `after` is virtual time). */
function fakeProbe(behave: (req: ProbeRequest, call: Call) => Promise<ScenarioResult[]>): { probe: ProbeFn; calls: Call[]; maxInFlight: () => number; maxInFlightOf: (t: string) => number } {
  const calls: Call[] = [];
  let inFlight = 0;
  let max = 0;
  const perTarget = new Map<string, { now: number; max: number }>();
  const probe: ProbeFn = async (req) => {
    const call: Call = { req, at: Date.now() - T0, done: false };
    calls.push(call);
    inFlight++;
    max = Math.max(max, inFlight);
    const pt = perTarget.get(req.target.name) ?? { now: 0, max: 0 };
    pt.now++;
    pt.max = Math.max(pt.max, pt.now);
    perTarget.set(req.target.name, pt);
    try {
      const scenarios = await behave(req, call);
      return {
        runId: req.runId, target: req.target.name, baseUrl: req.target.baseUrl, model: 'fake-model',
        startedAt: new Date().toISOString(), finishedAt: new Date().toISOString(),
        outcome: scenarios.some((s) => s.outcome === 'fail') ? 'fail' : 'pass', scenarios,
        capacity: { contextTokens: 4096, poolTokens: 2048 }, up: true,
      };
    } finally {
      inFlight--;
      pt.now--;
      call.done = true;
    }
  };
  return { probe, calls, maxInFlight: () => max, maxInFlightOf: (t) => perTarget.get(t)?.max ?? 0 };
}

const after = <T>(ms: number, value: T): Promise<T> => new Promise((resolve) => setTimeout(() => resolve(value), ms));
const untilAborted = <T>(signal: AbortSignal, value: () => T): Promise<T> =>
  new Promise((resolve) => signal.addEventListener('abort', () => resolve(value()), { once: true }));

interface Harness {
  scheduler: Scheduler;
  store: Store;
  metrics: Metrics;
  registry: Registry;
  runs: ProbeRun[];
  logs: () => Record<string, unknown>[];
  sample: (name: string, labels: Record<string, string>) => Promise<number | undefined>;
}

let harnesses: Harness[] = [];

function harness(cfg: ServiceConfig, probe: ProbeFn, extra: { abortGraceMs?: number; random?: () => number } = {}): Harness {
  const registry = new Registry();
  const metrics = createMetrics(registry);
  const store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
  const chunks: string[] = [];
  const logger = createLogger({ level: 'debug', destination: new Writable({ write(c: Buffer, _e, cb) { chunks.push(c.toString()); cb(); } }) });
  const runs: ProbeRun[] = [];
  const scheduler = createScheduler({
    config: cfg, probe, store, metrics, logger, random: extra.random ?? (() => 0.5), abortGraceMs: extra.abortGraceMs ?? 5 * S,
    onRun: (run) => { runs.push(run); },
  });
  const h: Harness = {
    scheduler, store, metrics, registry, runs,
    logs: () => chunks.join('').trim().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, unknown>),
    sample: async (name, labels) => {
      for (const m of await registry.getMetricsAsJSON()) {
        if (m.name !== name) continue;
        const v = (m as unknown as { values: { labels: Record<string, string>; value: number }[] }).values
          .find((x) => Object.keys(labels).every((k) => x.labels[k] === labels[k]) && Object.keys(x.labels).length === Object.keys(labels).length);
        return v?.value;
      }
      return undefined;
    },
  };
  harnesses.push(h);
  return h;
}

beforeEach(() => {
  vi.useFakeTimers({ now: T0 });
});

afterEach(async () => {
  for (const h of harnesses) {
    const stopping = h.scheduler.stop();
    await vi.runAllTimersAsync();
    await stopping;
    h.store.close();
  }
  harnesses = [];
  vi.useRealTimers();
});

describe('scheduler: timing', () => {
  it('starts after a jittered delay, then every interval plus jitter, one call per scenario under one run id', async () => {
    const fake = fakeProbe(async (req) => after(2 * S, [result(req.scenarios[0]!, 'pass', { tokens: { sent: 10, billed: 5 } })]));
    const cfg = config(`
schedule: { interval: 5m, timeout: 2m, jitter: 30s }
scenarios: [overlimit-handoff, capacity-audit]
targets: [{ name: prod, base_url: "http://h" }]`);
    const h = harness(cfg, fake.probe, { random: () => 0.5 });
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(15 * S - 1);
    expect(fake.calls).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(fake.calls.map((c) => [c.at, c.req.scenarios])).toEqual([[15 * S, ['overlimit-handoff']], [15 * S, ['capacity-audit']]]);
    expect(new Set(fake.calls.map((c) => c.req.runId)).size).toBe(1);

    // Due 5m + 15s after the previous one was due, whatever the run took.
    await vi.advanceTimersByTimeAsync(5 * M + 15 * S);
    await vi.advanceTimersByTimeAsync(5 * M + 15 * S);
    await vi.advanceTimersByTimeAsync(2 * S);
    expect(fake.calls.filter((c) => c.req.scenarios[0] === 'capacity-audit').map((c) => c.at)).toEqual([15 * S, 5 * M + 30 * S, 10 * M + 45 * S]);

    expect(h.runs).toHaveLength(3);
    const first = h.runs[0]!;
    expect(first).toMatchObject({
      target: 'prod', baseUrl: 'http://h', model: 'fake-model', outcome: 'pass', up: true,
      startedAt: new Date(T0 + 15 * S).toISOString(), finishedAt: new Date(T0 + 17 * S).toISOString(),
      capacity: { contextTokens: 4096, poolTokens: 2048 },
    });
    expect(first.scenarios.map((s) => s.name)).toEqual(['overlimit-handoff', 'capacity-audit']);
    expect(h.store.recentRuns().map((r) => r.runId)).toEqual(h.runs.map((r) => r.runId).reverse());
    expect(await h.sample('kvcanary_probe_cycles_total', { target: 'prod', outcome: 'pass' })).toBe(3);
    expect(await h.sample('kvcanary_probe_runs_total', { target: 'prod', scenario: 'capacity-audit', outcome: 'pass' })).toBe(3);
    expect(h.scheduler.states()).toEqual([expect.objectContaining({ target: 'prod', state: 'idle', lastOutcome: 'pass', nextRunAt: new Date(T0 + 16 * M).toISOString() })]);
  });

  it('records, counts and logs findings (kind, target, severity; never the excerpt) and never retries', async () => {
    const fake = fakeProbe(async (req) => {
      if (req.scenarios[0] === 'abort-race') return after(S, [result('abort-race', 'fail', { findings: [leak()] })]);
      throw new Error('probe bug');
    });
    const h = harness(config(`
schedule: { interval: 1m, timeout: 30s, jitter: 0s }
scenarios: [abort-race, capacity-audit]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(2 * S);
    expect(fake.calls).toHaveLength(2);
    const run = h.runs[0]!;
    expect(run.outcome).toBe('fail');
    expect(run.scenarios[1]).toMatchObject({ name: 'capacity-audit', outcome: 'inconclusive', notes: ['probe error: probe bug'] });
    expect(h.store.findings()).toEqual([expect.objectContaining({ kind: 'cross-request-leak', target: 'prod', runId: run.runId })]);
    expect(await h.sample('kvcanary_findings_total', { target: 'prod', scenario: 'abort-race', kind: 'cross-request-leak', severity: 'critical' })).toBe(1);
    const lines = h.logs();
    expect(lines.find((l) => l.kind === 'cross-request-leak')).toMatchObject({ level: 50, target: 'prod', severity: 'critical' });  // critical → error
    expect(JSON.stringify(lines)).not.toContain('PRIVATE-EXCERPT-TEXT');
    // Nothing more until the next interval: a failure is an outcome, not a reason to try again.
    await vi.advanceTimersByTimeAsync(55 * S);
    expect(fake.calls).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(5 * S);
    expect(fake.calls).toHaveLength(4);
  });
});

describe('scheduler: timeouts', () => {
  const cfg = (): ServiceConfig => config(`
schedule: { interval: 5m, timeout: 1m, jitter: 0s }
scenarios: [overlimit-handoff, abort-race]
targets: [{ name: prod, base_url: "http://h" }]`);

  it('aborts a run at its timeout: a finding made before it stands, anything short of one is inconclusive', async () => {
    const fake = fakeProbe(async (req) => {
      const name = req.scenarios[0]!;
      // Both honour the abort and hand back what they had: one had a finding, one looked clean so far.
      return untilAborted(req.signal, () => [result(name, name === 'abort-race' ? 'fail' : 'pass', { findings: name === 'abort-race' ? [leak()] : [] })]);
    });
    const h = harness(cfg(), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(M - 1);
    expect(h.runs).toHaveLength(0);
    expect(fake.calls.every((c) => !c.req.signal.aborted)).toBe(true);
    await vi.advanceTimersByTimeAsync(1);
    expect(fake.calls.every((c) => c.req.signal.aborted)).toBe(true);
    expect(h.runs).toHaveLength(1);
    const [overlimit, abortRace] = h.runs[0]!.scenarios;
    expect(overlimit).toMatchObject({ name: 'overlimit-handoff', outcome: 'inconclusive' });
    expect(overlimit!.notes.at(-1)).toMatch(/timed out after 1m: isolation not established/);
    expect(abortRace).toMatchObject({ name: 'abort-race', outcome: 'fail' });
    expect(h.runs[0]!.outcome).toBe('fail');
    expect(h.store.findings()).toHaveLength(1);
  });

  it('abandons a probe that ignores its abort, skips overlapping cycles until it ends, and still records its late findings', async () => {
    let release: (() => void) | undefined;
    const fake = fakeProbe(async (req, call) => {
      if (req.scenarios[0] === 'abort-race' && fake.calls.indexOf(call) === 1) {
        // Ignores the abort; ends (with a leak) only when the test releases it.
        await new Promise<void>((resolve) => { release = resolve; });
        return [result('abort-race', 'fail', { findings: [leak()] })];
      }
      return after(S, [result(req.scenarios[0]!, 'pass')]);
    });
    const h = harness(cfg(), fake.probe, { abortGraceMs: 5 * S });
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(M + 5 * S - 1);
    expect(h.runs).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(h.runs).toHaveLength(1);
    expect(h.runs[0]!.scenarios.find((s) => s.name === 'abort-race')).toMatchObject({ outcome: 'inconclusive' });
    expect(h.runs[0]!.scenarios.find((s) => s.name === 'abort-race')!.notes[0]).toMatch(/did not stop within 5s/);
    expect(h.scheduler.states()[0]).toMatchObject({ abandoned: 1 });

    await vi.advanceTimersByTimeAsync(10 * M);
    expect(fake.calls).toHaveLength(2);
    expect(await h.sample('kvcanary_runs_skipped_total', { target: 'prod', reason: 'overlap' })).toBe(2);
    expect(h.logs().filter((l) => l.reason === 'overlap')).toHaveLength(2);

    release!();
    await vi.advanceTimersByTimeAsync(0);
    const runId = h.runs[0]!.runId;
    expect(h.store.findings()).toEqual([expect.objectContaining({ runId, kind: 'cross-request-leak' })]);
    expect(await h.sample('kvcanary_findings_total', { target: 'prod', scenario: 'abort-race', kind: 'cross-request-leak', severity: 'critical' })).toBe(1);
    expect(h.scheduler.states()[0]).toMatchObject({ abandoned: 0 });
    await vi.advanceTimersByTimeAsync(5 * M);
    expect(fake.calls).toHaveLength(4);
  });

  it('counts time waiting for a slot against the timeout', async () => {
    const fake = fakeProbe(async (req) => untilAborted(req.signal, () => [result(req.scenarios[0]!, 'pass')]));
    const h = harness(config(`
schedule: { interval: 5m, timeout: 1m, jitter: 0s }
concurrency: { global: 1, per_target: 1 }
scenarios: [overlimit-handoff, abort-race]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(M);
    expect(fake.calls).toHaveLength(1);
    const run = h.runs[0]!;
    expect(run.outcome).toBe('inconclusive');
    expect(run.scenarios.find((s) => s.name === 'abort-race')!.notes[0]).toMatch(/before a probe slot was free/);
  });
});

describe('scheduler: concurrency and budget', () => {
  it('holds global and per-target limits', async () => {
    const fake = fakeProbe(async (req) => after(10 * S, [result(req.scenarios[0]!, 'pass')]));
    const h = harness(config(`
schedule: { interval: 5m, timeout: 2m, jitter: 0s }
concurrency: { global: 3, per_target: 2 }
scenarios: [overlimit-handoff, abort-race, capacity-audit]
targets: [{ name: a, base_url: "http://a" }, { name: b, base_url: "http://b" }, { name: c, base_url: "http://c" }]`), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(S);
    expect(fake.calls).toHaveLength(3);
    await vi.advanceTimersByTimeAsync(2 * M);
    expect(fake.calls).toHaveLength(9);
    expect(h.runs).toHaveLength(3);
    expect(fake.maxInFlight()).toBe(3);
    for (const t of ['a', 'b', 'c']) expect(fake.maxInFlightOf(t)).toBeLessThanOrEqual(2);
    expect(Math.max(...['a', 'b', 'c'].map((t) => fake.maxInFlightOf(t)))).toBe(2);
  });

  it('skips a cycle that cannot fit the hourly budget, counts and logs it, and runs again once spend ages out', async () => {
    const fake = fakeProbe(async (req) => after(S, [result(req.scenarios[0]!, 'pass', { tokens: { sent: 600, billed: 650 } })]));
    const h = harness(config(`
schedule: { interval: 10m, timeout: 1m, jitter: 0s }
budget: { tokens_per_hour: 1000 }
scenarios: [overlimit-handoff]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    h.scheduler.start();
    expect(await h.sample('kvcanary_budget_tokens_remaining', { target: 'prod' })).toBe(1000);
    await vi.advanceTimersByTimeAsync(S);
    expect(fake.calls.map((c) => c.req.tokenBudget)).toEqual([1000]);
    expect(await h.sample('kvcanary_budget_tokens_remaining', { target: 'prod' })).toBe(350);
    // Last cycle cost 650 (billed > sent); 350 left: every cycle due while that spend is in the hour is skipped.
    await vi.advanceTimersByTimeAsync(60 * M);
    expect(fake.calls).toHaveLength(1);
    expect(await h.sample('kvcanary_runs_skipped_total', { target: 'prod', reason: 'budget' })).toBe(6);
    expect(h.logs().find((l) => l.reason === 'budget')).toMatchObject({ target: 'prod', neededTokens: 650, availableTokens: 350 });
    await vi.advanceTimersByTimeAsync(10 * M);
    expect(fake.calls).toHaveLength(2);
    expect(fake.calls[1]!.req.tokenBudget).toBe(1000);
  });

  it('logs neededTokens uncapped, shows skips in the loop state, and warns when one cycle cannot fit at the advertised size', async () => {
    // A cycle cost 5000 against a 1000-token hour: admission caps its ask at the limit, the log does not.
    const fake = fakeProbe(async (req) => after(S, [result(req.scenarios[0]!, 'pass', { tokens: { sent: 5000, billed: 5000 } })]));
    const h = harness(config(`
schedule: { interval: 10m, timeout: 1m, jitter: 0s }
budget: { tokens_per_hour: 1000 }
scenarios: [overlimit-handoff]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(11 * M);
    expect(fake.calls).toHaveLength(1);
    const skipLog = h.logs().find((l) => l.reason === 'budget');
    expect(skipLog).toMatchObject({ target: 'prod', neededTokens: 5000 });
    const state = h.scheduler.health().loops.find((l) => l.target === 'prod')!;
    expect(state.skipped).toEqual({ budget: 1 });
    expect(state.lastSkip).toMatchObject({ reason: 'budget', neededTokens: 5000 });
    // The fake endpoint advertises a 4096-token context: one overlimit-handoff cycle needs more than 1000 tokens.
    expect(h.logs().some((l) => typeof l.msg === 'string' && /cannot fit one cycle/.test(l.msg))).toBe(true);
  });

  it('a scenario left without budget in a running cycle is recorded inconclusive (reason budget), so the cycle cannot pass', async () => {
    // overlimit-handoff spends the whole hour; abort-race, queued behind it (per_target 1), finds nothing left.
    const fake = fakeProbe(async (req) => after(S, [result(req.scenarios[0]!, 'pass', { tokens: { sent: 1000, billed: 1000 } })]));
    const h = harness(config(`
schedule: { interval: 10m, timeout: 1m, jitter: 0s }
concurrency: { global: 1, per_target: 1 }
budget: { tokens_per_hour: 1000 }
scenarios: [overlimit-handoff, abort-race]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(5 * S);
    expect(h.runs).toHaveLength(1);
    const starved = h.runs[0]!.scenarios.find((s) => s.name === 'abort-race');
    expect(starved).toMatchObject({ outcome: 'inconclusive', reason: 'budget' });
    expect(h.runs[0]!.outcome).toBe('inconclusive');
    expect(await h.sample('kvcanary_runs_skipped_total', { target: 'prod', reason: 'budget' })).toBe(1);
  });

  it('remembers spend across a restart: the store seeds the hourly budget and the cost estimates', async () => {
    const fake = fakeProbe(async (req) => after(S, [result(req.scenarios[0]!, 'pass')]));
    const h = harness(config(`
schedule: { interval: 10m, timeout: 1m, jitter: 0s }
budget: { tokens_per_hour: 1000 }
scenarios: [overlimit-handoff]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    // What the previous process spent 30 minutes ago.
    h.store.recordRun({
      runId: 'before-restart', target: 'prod', baseUrl: 'http://h', model: 'm', outcome: 'pass', up: true, capacity: {},
      startedAt: new Date(T0 - 30 * M).toISOString(), finishedAt: new Date(T0 - 30 * M).toISOString(),
      scenarios: [result('overlimit-handoff', 'pass', { tokens: { sent: 800, billed: 0 } })],
    });
    h.scheduler.start();
    expect(await h.sample('kvcanary_budget_tokens_remaining', { target: 'prod' })).toBe(200);
    await vi.advanceTimersByTimeAsync(20 * M);
    expect(fake.calls).toHaveLength(0);
    expect(await h.sample('kvcanary_runs_skipped_total', { target: 'prod', reason: 'budget' })).toBe(3);
    await vi.advanceTimersByTimeAsync(10 * M + S);
    expect(fake.calls).toHaveLength(1);
  });

  it('splits a cycle\'s budget between its scenarios by what each cost last time', async () => {
    const cost: Record<string, number> = { 'overlimit-handoff': 9000, 'capacity-audit': 10 };
    const fake = fakeProbe(async (req) => after(S, [result(req.scenarios[0]!, 'pass', { tokens: { sent: cost[req.scenarios[0]!]!, billed: 0 } })]));
    const h = harness(config(`
schedule: { interval: 1h, timeout: 1m, jitter: 0s }
concurrency: { global: 1, per_target: 1 }
budget: { tokens_per_hour: 100000 }
scenarios: [capacity-audit, overlimit-handoff]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(3 * S);
    // Nothing known yet: equal shares of what is available when each starts.
    expect(fake.calls.map((c) => [c.req.scenarios[0], c.req.tokenBudget])).toEqual([['capacity-audit', 50_000], ['overlimit-handoff', 99_990]]);
    await vi.advanceTimersByTimeAsync(60 * M);
    // The first cycle's 9010 tokens are still within the hour: 90990 available, shared 10 : 9000.
    expect(fake.calls.slice(2).map((c) => [c.req.scenarios[0], c.req.tokenBudget])).toEqual([
      ['capacity-audit', Math.floor(90_990 * 10 / 9010)],
      // By then capacity-audit's first 10 tokens have aged out and its new 10 are spent.
      ['overlimit-handoff', 90_990],
    ]);
  });
});

describe('scheduler: a scenario costing more than its share', () => {
  it('draws what the cycle\'s unstarted scenarios are not expected to need, instead of ending inconclusive (budget) with the budget unspent', async () => {
    // First cycle, nothing known: equal grants. Each scenario wants more than its grant and asks for the rest.
    const wants: Record<string, number> = { 'capacity-audit': 10, 'overlimit-handoff': 60_000, 'abort-race': 39_000 };
    const took: Record<string, boolean> = {};
    const fake = fakeProbe(async (req) => {
      const name = req.scenarios[0]!;
      const want = wants[name]!;
      const grant = req.tokenBudget as number; // the scheduler grants a number; 'auto' is kvcanary run's
      const ok = want <= grant || req.moreBudget?.take(want - grant) === true;
      took[name] = ok;
      return after(S, [result(name, ok ? 'pass' : 'inconclusive', { tokens: { sent: ok ? want : grant, billed: 0 }, ...(ok ? {} : { reason: 'budget' as const }) })]);
    });
    const h = harness(config(`
schedule: { interval: 1h, timeout: 1m, jitter: 0s }
concurrency: { global: 1, per_target: 1 }
budget: { tokens_per_hour: 100000 }
scenarios: [capacity-audit, overlimit-handoff, abort-race]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(5 * S);
    expect(fake.calls.map((c) => c.req.scenarios[0])).toEqual(['capacity-audit', 'overlimit-handoff', 'abort-race']);
    // overlimit-handoff's grant was half of what was left (49,995); it drew 10,005 more, leaving abort-race its
    // at least its share of the hour (a third) when it started.
    expect(fake.calls[1]!.req.tokenBudget).toBe(49_995);
    expect(took).toEqual({ 'capacity-audit': true, 'overlimit-handoff': true, 'abort-race': true });
    // Past what the unstarted scenarios need, a draw is refused: the budget still bounds the cycle.
    const h2 = harness(config(`
schedule: { interval: 1h, timeout: 1m, jitter: 0s }
concurrency: { global: 1, per_target: 1 }
budget: { tokens_per_hour: 100000 }
scenarios: [overlimit-handoff, abort-race]
targets: [{ name: prod2, base_url: "http://h" }]`), fake.probe);
    wants['overlimit-handoff'] = 70_000;
    h2.scheduler.start();
    await vi.advanceTimersByTimeAsync(5 * S);
    expect(took['overlimit-handoff']).toBe(false);
    await h.scheduler.stop();
    await h2.scheduler.stop();
  });
});

describe('scheduler: stop and reload', () => {
  it('stop() drains in-flight probes, cancels queued ones (skipped: shutdown) and schedules nothing more', async () => {
    let finish: (() => void) | undefined;
    const fake = fakeProbe(async (req) => {
      await new Promise<void>((resolve) => { finish = resolve; });
      return [result(req.scenarios[0]!, 'pass')];
    });
    const h = harness(config(`
schedule: { interval: 5m, timeout: 2m, jitter: 0s }
concurrency: { global: 4, per_target: 1 }
scenarios: [overlimit-handoff, abort-race, capacity-audit]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe);
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(S);
    expect(fake.calls).toHaveLength(1);
    let stopped = false;
    const stopping = h.scheduler.stop().then(() => { stopped = true; });
    await vi.advanceTimersByTimeAsync(10 * S);
    expect(stopped).toBe(false);
    expect(h.scheduler.health().status).toBe('stopping');
    finish!();
    await stopping;
    expect(h.runs).toHaveLength(1);
    expect(h.runs[0]!.scenarios.map((s) => s.name)).toEqual(['overlimit-handoff']);
    expect(await h.sample('kvcanary_runs_skipped_total', { target: 'prod', reason: 'shutdown' })).toBe(2);
    await vi.advanceTimersByTimeAsync(30 * M);
    expect(fake.calls).toHaveLength(1);
  });

  it('stop() resolves at the timeout (plus grace) when a probe hangs', async () => {
    const fake = fakeProbe(async () => new Promise<ScenarioResult[]>(() => undefined));
    const h = harness(config(`
schedule: { interval: 5m, timeout: 1m, jitter: 0s }
scenarios: [abort-race]
targets: [{ name: prod, base_url: "http://h" }]`), fake.probe, { abortGraceMs: 2 * S });
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(S);
    let stopped = false;
    const stopping = h.scheduler.stop().then(() => { stopped = true; });
    await vi.advanceTimersByTimeAsync(M + S - 1);
    expect(stopped).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await stopping;
    expect(h.runs[0]!.outcome).toBe('inconclusive');
  });

  it('reload() keeps unchanged targets\' timers and budgets, reschedules changed ones, adds and removes targets', async () => {
    const fake = fakeProbe(async (req) => after(S, [result(req.scenarios[0]!, 'pass', { tokens: { sent: 100, billed: 0 } })]));
    const v1 = config(`
schedule: { interval: 5m, timeout: 1m, jitter: 30s }
scenarios: [capacity-audit]
budget: { tokens_per_hour: 1000 }
targets: [{ name: keep, base_url: "http://k" }, { name: change, base_url: "http://c" }, { name: drop, base_url: "http://d" }]`);
    // A different jitter on every draw: a target that was rescheduled would show a different next run.
    let draw = 0;
    const h = harness(v1, fake.probe, { random: () => ((draw++ * 0.37) % 1) });
    h.scheduler.start();
    await vi.advanceTimersByTimeAsync(2 * M);
    expect(fake.calls.map((c) => c.req.target.name).sort()).toEqual(['change', 'drop', 'keep']);
    const keepBefore = h.scheduler.states().find((s) => s.target === 'keep')!;
    expect(await h.sample('kvcanary_budget_tokens_remaining', { target: 'keep' })).toBe(900);

    h.scheduler.reload(config(`
schedule: { interval: 5m, timeout: 1m, jitter: 30s }
scenarios: [capacity-audit]
budget: { tokens_per_hour: 1000 }
targets:
  - { name: keep, base_url: "http://k" }
  - { name: change, base_url: "http://c", schedule: { interval: 20m } }
  - { name: new, base_url: "http://n" }`));
    const states = new Map(h.scheduler.states().map((s) => [s.target, s]));
    expect([...states.keys()].sort()).toEqual(['change', 'keep', 'new']);
    expect(states.get('keep')!.nextRunAt).toBe(keepBefore.nextRunAt);
    const changeNext = Date.parse(states.get('change')!.nextRunAt!);
    expect(changeNext).toBeGreaterThanOrEqual(T0 + 20 * M);
    expect(changeNext).toBeLessThan(T0 + 21 * M);
    expect(await h.sample('kvcanary_budget_tokens_remaining', { target: 'keep' })).toBe(900);
    // A changed target keeps what it spent this hour too.
    expect(await h.sample('kvcanary_budget_tokens_remaining', { target: 'change' })).toBe(900);
    await vi.advanceTimersByTimeAsync(0);
    expect((await h.registry.metrics()).includes('target="drop"')).toBe(false);

    await vi.advanceTimersByTimeAsync(4 * M + S);
    const names = fake.calls.slice(3).map((c) => c.req.target.name).sort();
    expect(names).toEqual(['keep', 'new']);
  });
});
