/** Cost tiers: `schedule.scenarios` intervals, and which scenarios each cycle runs. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ConfigError, parseConfig, parseDuration } from '../../prober/src/service/config.js';
import { DEFAULT_SCENARIO_INTERVALS, dueScenarios, runsOver, tiersOf } from '../../prober/src/service/scenario-schedule.js';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';
import type { ProbeFn } from '../../prober/src/probe/probe-fn.js';
import { createLogger } from '../../prober/src/service/logger.js';
import { createMetrics } from '../../prober/src/service/metrics.js';
import { createScheduler } from '../../prober/src/service/scheduler.js';
import { openStore } from '../../prober/src/service/store.js';
import { exampleConfig } from '../../prober/src/commands/init.js';
import { runCli } from '../helpers/cli.js';

describe('schedule.scenarios', () => {
  it('defaults to the affordable tiers, which a config overrides key by key, from the top level into each target', () => {
    const c = parseConfig(`
schedule: { interval: 5m, scenarios: { overlimit-handoff: 2h, prefix-churn: 12h } }
targets:
  - name: a
    base_url: http://127.0.0.1:1
  - name: b
    base_url: http://127.0.0.1:2
    schedule: { scenarios: { overlimit-handoff: 30m } }
  - name: c
    base_url: http://127.0.0.1:3
    schedule: { interval: 10m }
`, { knownScenarios: SCENARIO_NAMES });
    const defaults = Object.fromEntries(Object.entries(DEFAULT_SCENARIO_INTERVALS).map(([s, d]) => [s, parseDuration(d)!]));
    expect(parseConfig('targets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES }).targets[0]!.schedule.scenarioIntervalsMs).toEqual(defaults);
    expect(c.targets[0]!.schedule.scenarioIntervalsMs).toEqual({ ...defaults, 'overlimit-handoff': 7_200_000, 'prefix-churn': 43_200_000 });
    expect(c.targets[1]!.schedule.scenarioIntervalsMs).toEqual({ ...defaults, 'overlimit-handoff': 1_800_000, 'prefix-churn': 43_200_000 });
    expect(c.targets[2]!.schedule.scenarioIntervalsMs).toEqual(c.targets[0]!.schedule.scenarioIntervalsMs);
    // The cheap tier every serve target gets by default is in the default scenario set.
    expect(c.targets[0]!.scenarios).toContain('overlimit-rejection');
  });

  it('opts out with every_cycle: one scenario, or all of them (at the top level or for one target)', () => {
    const c = parseConfig(`
schedule: { scenarios: { overlimit-handoff: every_cycle } }
targets:
  - { name: a, base_url: "http://x:1" }
  - { name: b, base_url: "http://x:2", schedule: { scenarios: every_cycle } }
  - { name: c, base_url: "http://x:3", schedule: { scenarios: { overlimit-rejection: 30m } } }
`, { knownScenarios: SCENARIO_NAMES });
    const [a, b, cc] = c.targets.map((t) => t.schedule.scenarioIntervalsMs);
    expect(a).not.toHaveProperty('overlimit-handoff');
    expect(a).toHaveProperty('overlimit-rejection', 900_000);
    expect(b).toBeUndefined();
    expect(cc).not.toHaveProperty('overlimit-handoff');
    expect(cc).toHaveProperty('overlimit-rejection', 1_800_000);
    const off = parseConfig('schedule: { scenarios: every_cycle }\ntargets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES }).targets[0]!;
    expect(off.schedule.scenarioIntervalsMs).toBeUndefined();
    expect(dueScenarios(off, new Map(off.scenarios.map((s) => [s, 0])), 300_000)).toEqual(off.scenarios);
    // An empty mapping overrides nothing: the defaults stay.
    expect(parseConfig('schedule: { scenarios: {} }\ntargets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES }).targets[0]!.schedule.scenarioIntervalsMs)
      .toHaveProperty('overlimit-handoff', 21_600_000);
  });

  it('keeps a default tier shorter than a longer cycle harmless: the scenario runs every cycle', () => {
    const t = parseConfig('schedule: { interval: 30m, timeout: 2m }\ntargets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES }).targets[0]!;
    expect(tiersOf(t).map(([s]) => s)).not.toContain('overlimit-rejection');
    const runs = runsOver(t, 86_400_000);
    expect(runs.get('overlimit-rejection')).toBe(48);
    expect(runs.get('abort-race')).toBe(24);
  });

  it('rejects unknown scenarios and intervals shorter than the cycle, naming the field', () => {
    let err: ConfigError | undefined;
    try {
      parseConfig('schedule: { interval: 5m, scenarios: { overlimit-handof: 1h, abort-race: 1m } }\ntargets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES });
    } catch (e) { err = e as ConfigError; }
    expect(err?.issues.map((i) => i.path).sort()).toEqual(['schedule.scenarios.abort-race', 'schedule.scenarios.overlimit-handof']);
    expect(err?.message).toMatch(/did you mean `overlimit-handoff`/);
    expect(err?.message).toMatch(/at least 5m/);
    expect(() => parseConfig('schedule: { scenarios: { abort-race: never } }\ntargets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES }))
      .toThrow(/schedule\.scenarios\.abort-race: expected a duration like 15m, 1h or 6h, or every_cycle, got "never"/);
    expect(() => parseConfig('schedule: { scenarios: [abort-race] }\ntargets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES }))
      .toThrow(/or every_cycle for every scenario every cycle/);
  });

  it('by default runs the audit every cycle, the rejection check every third and each deep scenario once per its interval (a day on a jittered 5m grid)', () => {
    const c = parseConfig(`
schedule: { interval: 5m, jitter: 30s }
targets: [{ name: a, base_url: "http://x:1" }]
`, { knownScenarios: SCENARIO_NAMES });
    const target = c.targets[0]!;
    const last = new Map<string, number>();
    const runs = new Map<string, number>();
    let t = 0;
    while (t < 86_400_000) {
      for (const s of dueScenarios(target, last, t)) { last.set(s, t); runs.set(s, (runs.get(s) ?? 0) + 1); }
      t += 300_000 + Math.floor(Math.random() * 30_000);
    }
    const cycles = runs.get('capacity-audit')!;
    expect(cycles).toBeGreaterThan(270);
    // 15m on a 5m grid: every third cycle.
    expect(Math.abs(runs.get('overlimit-rejection')! - cycles / 3)).toBeLessThanOrEqual(2);
    for (const s of ['abort-race', 'prefix-isolation']) expect(runs.get(s)).toBeGreaterThanOrEqual(23);
    for (const s of ['abort-race', 'prefix-isolation']) expect(runs.get(s)).toBeLessThanOrEqual(25);
    expect([11, 12, 13]).toContain(runs.get('concurrent-interleave'));
    expect([4, 5]).toContain(runs.get('overlimit-handoff'));
    for (const s of ['prefix-collision', 'prefix-churn']) expect([1, 2]).toContain(runs.get(s));
  });
});

describe('runsOver', () => {
  it('counts a day of the default schedule on the nominal 5m grid: 288 cycles, 96 rejection checks, 24 hourly, 12 two-hourly, 4 six-hourly and 1 daily run', () => {
    const t = parseConfig('targets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES }).targets[0]!;
    expect(Object.fromEntries(runsOver(t, 86_400_000))).toEqual({
      'capacity-audit': 288, 'overlimit-rejection': 96, 'overlimit-handoff': 4, 'abort-race': 24,
      'concurrent-interleave': 12, 'prefix-isolation': 24, 'prefix-collision': 1, 'prefix-churn': 1,
    });
    // The first hour is the busiest: every tier is due in the first cycle.
    expect(Object.fromEntries(runsOver(t, 3_600_000))).toMatchObject({ 'capacity-audit': 12, 'overlimit-rejection': 4, 'prefix-churn': 1 });
  });
});

describe('serve with the default tiers', () => {
  afterEach(() => { vi.useRealTimers(); });

  it('runs every scenario in the first cycle, then each per its tier; after a restart the store says what already ran', async () => {
    const T0 = Date.parse('2026-03-01T00:00:00Z');
    vi.useFakeTimers({ now: T0 });
    const calls: { at: number; scenario: string }[] = [];
    const probe: ProbeFn = async (req) => {
      calls.push({ at: Date.now() - T0, scenario: req.scenarios[0]! });
      const at = new Date().toISOString();
      return {
        runId: req.runId, target: req.target.name, baseUrl: req.target.baseUrl, model: 'm', startedAt: at, finishedAt: at, outcome: 'pass', up: true, capacity: {},
        scenarios: req.scenarios.map((name) => ({ name, outcome: 'pass' as const, findings: [], requests: [], notes: [], tokens: { sent: 0, billed: 0 }, durationMs: 1 })),
      };
    };
    const config = parseConfig(`
schedule: { interval: 5m, timeout: 1m, jitter: 0s }
scenarios: [capacity-audit, overlimit-rejection, abort-race]
targets: [{ name: prod, base_url: "http://h" }]
`, { knownScenarios: SCENARIO_NAMES, env: {} });
    const store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
    const scheduler = (): ReturnType<typeof createScheduler> => createScheduler({
      config, probe, store, metrics: createMetrics(new Registry()), random: () => 0,
      logger: createLogger({ level: 'silent', destination: new Writable({ write(_c, _e, cb) { cb(); } }) }),
    });
    const first = scheduler();
    first.start();
    await vi.advanceTimersByTimeAsync(60 * 60_000 + 1000);
    const stopping = first.stop();
    await vi.runAllTimersAsync();
    await stopping;
    const at = (s: string): number[] => calls.filter((c) => c.scenario === s).map((c) => c.at / 60_000);
    expect(at('capacity-audit')).toEqual([0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60]);
    expect(at('overlimit-rejection')).toEqual([0, 15, 30, 45, 60]);
    expect(at('abort-race')).toEqual([0, 60]);

    // Restarted two minutes later: its first cycle runs only what is due by the stored history.
    calls.length = 0;
    await vi.advanceTimersByTimeAsync(2 * 60_000);
    const second = scheduler();
    second.start();
    await vi.advanceTimersByTimeAsync(1000);
    expect(calls.map((c) => c.scenario)).toEqual(['capacity-audit']);
    const stopped = second.stop();
    await vi.runAllTimersAsync();
    await stopped;
    store.close();
  });
});

describe('what an operator sees of the tiers', () => {
  it('kvcanary init writes the default tiers, so its example and a config without schedule.scenarios schedule alike', () => {
    const opts = { knownScenarios: SCENARIO_NAMES, requireSecrets: false };
    const example = parseConfig(exampleConfig(), opts).targets[0]!.schedule;
    const bare = parseConfig('targets: [{ name: a, base_url: "http://x:1" }]\n', opts).targets[0]!.schedule;
    expect(example).toEqual(bare);
  });

  it('check-config prints the effective tiers: the defaults with the config\'s overrides, or none when opted out', async () => {
    const d = mkdtempSync(join(tmpdir(), 'kvcanary-tiers-'));
    try {
      const file = join(d, 'k.yaml');
      writeFileSync(file, 'targets:\n  - { name: a, base_url: "http://127.0.0.1:1", schedule: { scenarios: { abort-race: 2h, prefix-churn: every_cycle } } }\n  - { name: b, base_url: "http://127.0.0.1:2", schedule: { scenarios: every_cycle } }\n');
      const r = await runCli(['check-config', file]);
      expect(r.code, r.stderr).toBe(0);
      const [a, b] = r.stdout.split('\n').slice(1);
      expect(a).toMatch(/less often: overlimit-handoff every 6h, overlimit-rejection every 15m, abort-race every 2h, concurrent-interleave every 2h, prefix-isolation every 1h, prefix-collision every 1d$/);
      expect(b).toMatch(/; every scenario every cycle \(no cost tiers\)$/);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
