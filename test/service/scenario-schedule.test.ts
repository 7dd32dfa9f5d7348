/** Cost tiers: `schedule.scenarios` intervals, and which scenarios each cycle runs. */
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../prober/src/service/config.js';
import { AFFORDABLE_SCENARIO_INTERVALS, dueScenarios } from '../../prober/src/service/scenario-schedule.js';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';

describe('schedule.scenarios', () => {
  it('parses per-scenario intervals, merged key by key from the top level into each target', () => {
    const c = parseConfig(`
schedule: { interval: 5m, scenarios: { overlimit-handoff: 1h, prefix-churn: 6h } }
targets:
  - name: a
    base_url: http://127.0.0.1:1
  - name: b
    base_url: http://127.0.0.1:2
    schedule: { scenarios: { overlimit-handoff: 30m } }
`, { knownScenarios: SCENARIO_NAMES });
    expect(c.targets[0]!.schedule.scenarioIntervalsMs).toEqual({ 'overlimit-handoff': 3_600_000, 'prefix-churn': 21_600_000 });
    expect(c.targets[1]!.schedule.scenarioIntervalsMs).toEqual({ 'overlimit-handoff': 1_800_000, 'prefix-churn': 21_600_000 });
  });

  it('rejects unknown scenarios and intervals shorter than the cycle, naming the field', () => {
    let err: ConfigError | undefined;
    try {
      parseConfig('schedule: { interval: 5m, scenarios: { overlimit-handof: 1h, abort-race: 1m } }\ntargets: [{ name: a, base_url: "http://x:1" }]\n', { knownScenarios: SCENARIO_NAMES });
    } catch (e) { err = e as ConfigError; }
    expect(err?.issues.map((i) => i.path).sort()).toEqual(['schedule.scenarios.abort-race', 'schedule.scenarios.overlimit-handof']);
    expect(err?.message).toMatch(/did you mean `overlimit-handoff`/);
    expect(err?.message).toMatch(/at least 5m/);
  });

  it('runs the audit every cycle, the rejection check every third and each deep scenario once per its interval (a day on a 5m grid)', () => {
    const c = parseConfig(`
schedule: { interval: 5m, jitter: 30s, scenarios: ${JSON.stringify(AFFORDABLE_SCENARIO_INTERVALS)} }
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
    for (const s of ['overlimit-handoff', 'abort-race', 'concurrent-interleave', 'prefix-isolation']) expect(runs.get(s)).toBeGreaterThanOrEqual(23);
    for (const s of ['overlimit-handoff', 'abort-race', 'concurrent-interleave', 'prefix-isolation']) expect(runs.get(s)).toBeLessThanOrEqual(25);
    for (const s of ['prefix-collision', 'prefix-churn']) expect([4, 5]).toContain(runs.get(s));
  });
});
