import { Registry, register as globalRegistry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { makeFinding } from '../../prober/src/probe/findings.js';
import { createMetrics, forgetTarget, initTargetMetrics, observeRun, observeSchedules, roleLabel, seedScenarioState } from '../../prober/src/service/metrics.js';
import type { ProbeRun, ScenarioResult } from '../../prober/src/probe/result.js';

/** The agreed list (dashboards and alert rules are written against exactly these). */
const AGREED = {
  kvcanary_probe_runs_total: 'counter',
  kvcanary_probe_cycles_total: 'counter',
  kvcanary_target_verdict: 'gauge',
  kvcanary_findings_total: 'counter',
  kvcanary_findings_acknowledged_total: 'counter',
  kvcanary_probe_duration_seconds: 'histogram',
  kvcanary_request_duration_seconds: 'histogram',
  kvcanary_time_to_first_token_seconds: 'histogram',
  kvcanary_requests_total: 'counter',
  kvcanary_tokens_sent_total: 'counter',
  kvcanary_tokens_billed_total: 'counter',
  kvcanary_last_run_timestamp_seconds: 'gauge',
  kvcanary_last_run_outcome: 'gauge',
  kvcanary_inconclusive_streak: 'gauge',
  kvcanary_last_run_findings: 'gauge',
  kvcanary_target_context_limit_tokens: 'gauge',
  kvcanary_target_pool_capacity_tokens: 'gauge',
  kvcanary_target_up: 'gauge',
  kvcanary_runs_skipped_total: 'counter',
  kvcanary_budget_tokens_remaining: 'gauge',
  kvcanary_scenario_interval_seconds: 'gauge',
  kvcanary_open_findings: 'gauge',
} as const;

const MARKER = 'kvcanary-q3x8abcdefghijklmnopqrstuv';
const REQUEST_ID = 'req-7f3a9c1e55d0';

function scen(name: string, outcome: ScenarioResult['outcome'], extra: Partial<ScenarioResult> = {}): ScenarioResult {
  return { name, outcome, findings: [], requests: [], notes: [], tokens: { sent: 0, billed: 0 }, durationMs: 2500, ...extra };
}

function probeRun(scenarios: ScenarioResult[], extra: Partial<ProbeRun> = {}): ProbeRun {
  return {
    runId: 'run-1', target: 'prod', baseUrl: 'http://h', model: 'm', startedAt: '2026-01-01T00:00:00Z', finishedAt: '2026-01-01T00:00:10Z',
    outcome: 'fail', scenarios, capacity: { contextTokens: 1_048_576, poolTokens: 681_280 }, up: true, ...extra,
  };
}

/** value of one sample, by exact label set (undefined when absent). */
async function sample(reg: Registry, name: string, labels: Record<string, string>): Promise<number | undefined> {
  const all = await reg.getMetricsAsJSON();
  for (const m of all) {
    for (const v of (m as unknown as { values: { metricName?: string; labels: Record<string, string | number>; value: number }[] }).values) {
      const metricName = v.metricName ?? m.name;
      if (metricName !== name) continue;
      const keys = Object.keys(v.labels);
      if (keys.length === Object.keys(labels).length && keys.every((k) => String(v.labels[k]) === labels[k])) return v.value;
    }
  }
  return undefined;
}

describe('metrics', () => {
  it('registers exactly the agreed names and types on the given registry, not the global one', async () => {
    const before = (await globalRegistry.getMetricsAsJSON()).length;
    const reg = new Registry();
    createMetrics(reg);
    const got = Object.fromEntries((await reg.getMetricsAsJSON()).map((m) => [m.name, m.type]));
    expect(got).toEqual(AGREED);
    expect((await globalRegistry.getMetricsAsJSON()).length).toBe(before);
  });

  it('exports how often each scenario is due (its cost tier, else the interval), for exactly the targets probed now', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    const schedule = { intervalMs: 300_000, scenarioIntervalsMs: { 'abort-race': 3_600_000, 'overlimit-rejection': 60_000 } };
    observeSchedules(m, [{ name: 'a', scenarios: ['capacity-audit', 'abort-race', 'overlimit-rejection'], schedule }, { name: 'b', scenarios: ['abort-race'], schedule }]);
    expect(await sample(reg, 'kvcanary_scenario_interval_seconds', { target: 'a', scenario: 'capacity-audit' })).toBe(300);
    expect(await sample(reg, 'kvcanary_scenario_interval_seconds', { target: 'a', scenario: 'abort-race' })).toBe(3600);
    // A tier shorter than the cycle runs every cycle.
    expect(await sample(reg, 'kvcanary_scenario_interval_seconds', { target: 'a', scenario: 'overlimit-rejection' })).toBe(300);
    observeSchedules(m, [{ name: 'a', scenarios: ['abort-race'], schedule: { intervalMs: 600_000 } }]);
    expect(await sample(reg, 'kvcanary_scenario_interval_seconds', { target: 'a', scenario: 'abort-race' })).toBe(600);
    expect(await sample(reg, 'kvcanary_scenario_interval_seconds', { target: 'b', scenario: 'abort-race' })).toBeUndefined();
    expect(await sample(reg, 'kvcanary_scenario_interval_seconds', { target: 'a', scenario: 'capacity-audit' })).toBeUndefined();
  });

  it('starts the counters and state sets consumers read before a first run at 0, and leaves facts absent until known', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    initTargetMetrics(m, 'prod', ['overlimit-handoff', 'abort-race']);
    expect(await sample(reg, 'kvcanary_probe_runs_total', { target: 'prod', scenario: 'abort-race', outcome: 'inconclusive' })).toBe(0);
    expect(await sample(reg, 'kvcanary_runs_skipped_total', { target: 'prod', reason: 'budget' })).toBe(0);
    expect(await sample(reg, 'kvcanary_probe_cycles_total', { target: 'prod', outcome: 'pass' })).toBe(0);
    expect(await sample(reg, 'kvcanary_tokens_sent_total', { target: 'prod', scenario: 'abort-race' })).toBe(0);
    expect(await sample(reg, 'kvcanary_last_run_outcome', { target: 'prod', scenario: 'abort-race', outcome: 'pass' })).toBe(0);
    expect(await sample(reg, 'kvcanary_inconclusive_streak', { target: 'prod', scenario: 'abort-race' })).toBe(0);
    const text = await reg.metrics();
    expect(text).not.toMatch(/^kvcanary_last_run_timestamp_seconds\{/m);
    expect(text).not.toMatch(/^kvcanary_target_up\{/m);
    expect(text).not.toMatch(/^kvcanary_target_context_limit_tokens\{/m);
  });

  it('creates finding and histogram series by their first observation (every finding consumer counts a series born at 1)', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    initTargetMetrics(m, 'prod', ['overlimit-handoff', 'abort-race']);
    const before = await reg.metrics();
    expect(before).not.toMatch(/^kvcanary_findings_total\{/m);
    expect(before).not.toMatch(/^kvcanary_probe_duration_seconds_(bucket|sum|count)\{/m);
    observeRun(m, probeRun([scen('abort-race', 'fail', { findings: [makeFinding('cross-request-leak', 'abort-race', { excerpt: 'x' })] })]));
    expect(await sample(reg, 'kvcanary_findings_total', { target: 'prod', scenario: 'abort-race', kind: 'cross-request-leak', severity: 'critical' })).toBe(1);
    expect(await sample(reg, 'kvcanary_findings_total', { target: 'prod', scenario: 'abort-race', kind: 'rejection-not-enforced', severity: 'high' })).toBeUndefined();
    expect(await sample(reg, 'kvcanary_probe_duration_seconds_count', { target: 'prod', scenario: 'abort-race' })).toBe(1);
    expect(await sample(reg, 'kvcanary_probe_duration_seconds_count', { target: 'prod', scenario: 'overlimit-handoff' })).toBeUndefined();
  });

  it('observeRun updates every metric from one ProbeRun', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    initTargetMetrics(m, 'prod', ['overlimit-handoff', 'abort-race']);
    const run = probeRun([
      scen('overlimit-handoff', 'fail', {
        findings: [makeFinding('rejection-not-enforced', 'overlimit-handoff', { excerpt: 'secret text' })],
        tokens: { sent: 900_000, billed: 120 }, durationMs: 12_000,
        requests: [
          { requestId: REQUEST_ID, role: 'planter', tenant: 'default', transport: 'ok', latencyMs: 200, ttftMs: 40 },
          { requestId: 'q2', role: 'overlimit', tenant: 'default', transport: 'http-4xx', status: 400, latencyMs: 3000 },
          { requestId: 'q3', role: MARKER, tenant: 'default', transport: 'reset' },
        ],
      }),
      scen('abort-race', 'inconclusive'),
    ]);
    observeRun(m, run);
    const t = { target: 'prod' };
    expect(await sample(reg, 'kvcanary_probe_runs_total', { ...t, scenario: 'overlimit-handoff', outcome: 'fail' })).toBe(1);
    expect(await sample(reg, 'kvcanary_probe_runs_total', { ...t, scenario: 'abort-race', outcome: 'inconclusive' })).toBe(1);
    expect(await sample(reg, 'kvcanary_probe_runs_total', { ...t, scenario: 'abort-race', outcome: 'pass' })).toBe(0);
    expect(await sample(reg, 'kvcanary_probe_cycles_total', { ...t, outcome: 'fail' })).toBe(1);
    expect(await sample(reg, 'kvcanary_findings_total', { ...t, scenario: 'overlimit-handoff', kind: 'rejection-not-enforced', severity: 'high' })).toBe(1);
    expect(await sample(reg, 'kvcanary_probe_duration_seconds_sum', { ...t, scenario: 'overlimit-handoff' })).toBe(12);
    expect(await sample(reg, 'kvcanary_request_duration_seconds_count', { ...t, role: 'planter' })).toBe(1);
    expect(await sample(reg, 'kvcanary_request_duration_seconds_sum', { ...t, role: 'overlimit' })).toBe(3);
    expect(await sample(reg, 'kvcanary_time_to_first_token_seconds_sum', { ...t, role: 'planter' })).toBe(0.04);
    expect(await sample(reg, 'kvcanary_requests_total', { ...t, role: 'overlimit', transport: 'http-4xx' })).toBe(1);
    expect(await sample(reg, 'kvcanary_requests_total', { ...t, role: 'other', transport: 'reset' })).toBe(1);
    expect(await sample(reg, 'kvcanary_tokens_sent_total', { ...t, scenario: 'overlimit-handoff' })).toBe(900_000);
    expect(await sample(reg, 'kvcanary_tokens_billed_total', { ...t, scenario: 'overlimit-handoff' })).toBe(120);
    expect(await sample(reg, 'kvcanary_last_run_timestamp_seconds', { ...t, scenario: 'abort-race' })).toBe(Date.parse('2026-01-01T00:00:10Z') / 1000);
    expect(await sample(reg, 'kvcanary_last_run_outcome', { ...t, scenario: 'abort-race', outcome: 'inconclusive' })).toBe(1);
    expect(await sample(reg, 'kvcanary_last_run_outcome', { ...t, scenario: 'abort-race', outcome: 'pass' })).toBe(0);
    expect(await sample(reg, 'kvcanary_last_run_outcome', { ...t, scenario: 'overlimit-handoff', outcome: 'fail' })).toBe(1);
    expect(await sample(reg, 'kvcanary_inconclusive_streak', { ...t, scenario: 'abort-race' })).toBe(1);
    expect(await sample(reg, 'kvcanary_target_context_limit_tokens', t)).toBe(1_048_576);
    expect(await sample(reg, 'kvcanary_target_pool_capacity_tokens', t)).toBe(681_280);
    expect(await sample(reg, 'kvcanary_target_up', t)).toBe(1);

    // Never an id, marker or excerpt in the exposition.
    const text = await reg.metrics();
    expect(text).not.toContain(REQUEST_ID);
    expect(text).not.toContain(MARKER);
    expect(text).not.toContain('run-1');
    expect(text).not.toContain('secret text');
  });

  it('holds the last run\'s unacknowledged findings per kind until a later run of that scenario finds none, across a restart', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    const last = (kind: string) => sample(reg, 'kvcanary_last_run_findings', { target: 'prod', scenario: 'abort-race', kind });
    const leak = (acknowledged?: string) => ({
      ...makeFinding('cross-request-leak', 'abort-race', { match: 'kvcanary-…' }),
      ...(acknowledged !== undefined ? { acknowledged } : {}),
    });
    observeRun(m, probeRun([{ ...scen('abort-race', 'fail'), findings: [leak(), leak(), leak('silence 1')] }]));
    expect(await last('cross-request-leak')).toBe(2);
    observeRun(m, probeRun([scen('overlimit-handoff', 'pass')])); // another scenario's run changes nothing
    expect(await last('cross-request-leak')).toBe(2);
    observeRun(m, probeRun([scen('abort-race', 'pass')]));
    expect(await last('cross-request-leak')).toBe(0);
    observeRun(m, probeRun([{ ...scen('abort-race', 'fail'), findings: [leak('silence 1')] }]));
    expect(await last('cross-request-leak')).toBe(0);

    const restarted = new Registry();
    const m2 = createMetrics(restarted);
    seedScenarioState(m2, { target: 'prod', scenario: 'abort-race', outcome: 'fail', at: '2026-01-01T00:00:00Z', inconclusiveStreak: 0, findingCounts: { 'cross-request-leak': 1, 'no-such-kind': 2 } });
    expect(await sample(restarted, 'kvcanary_last_run_findings', { target: 'prod', scenario: 'abort-race', kind: 'cross-request-leak' })).toBe(1);
    expect(await sample(restarted, 'kvcanary_last_run_findings', { target: 'prod', scenario: 'abort-race', kind: 'unknown' })).toBe(2);
  });

  it('counts inconclusive streaks and resets them on a pass or fail', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    const streak = () => sample(reg, 'kvcanary_inconclusive_streak', { target: 'prod', scenario: 'abort-race' });
    observeRun(m, probeRun([scen('abort-race', 'inconclusive')]));
    observeRun(m, probeRun([scen('abort-race', 'inconclusive')]));
    expect(await streak()).toBe(2);
    observeRun(m, probeRun([scen('abort-race', 'pass')]));
    expect(await streak()).toBe(0);
    seedScenarioState(m, { target: 'prod', scenario: 'abort-race', outcome: 'inconclusive', at: '2026-01-01T00:00:00Z', inconclusiveStreak: 7 });
    observeRun(m, probeRun([scen('abort-race', 'inconclusive')]));
    expect(await streak()).toBe(8);
  });

  it('keeps the last known capacity while the target is down, drops it when a reachable target stops exposing it', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    const pool = () => sample(reg, 'kvcanary_target_pool_capacity_tokens', { target: 'prod' });
    observeRun(m, probeRun([scen('capacity-audit', 'pass')]));
    observeRun(m, probeRun([scen('capacity-audit', 'inconclusive')], { up: false, capacity: {} }));
    expect(await pool()).toBe(681_280);
    expect(await sample(reg, 'kvcanary_target_up', { target: 'prod' })).toBe(0);
    observeRun(m, probeRun([scen('capacity-audit', 'pass')], { capacity: { contextTokens: 4096 } }));
    expect(await pool()).toBeUndefined();
  });

  it('forgets every series of a removed target and only those', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    initTargetMetrics(m, 'prod', ['abort-race']);
    initTargetMetrics(m, 'stage', ['abort-race']);
    observeRun(m, probeRun([scen('abort-race', 'pass', { requests: [{ requestId: 'x', role: 'reader', tenant: 'd', transport: 'ok', latencyMs: 5 }] })]));
    await forgetTarget(m, 'prod');
    const text = await reg.metrics();
    expect(text).not.toContain('target="prod"');
    expect(text).toContain('kvcanary_probe_runs_total{target="stage",scenario="abort-race",outcome="pass"} 0');
  });

  it('roleLabel passes short role names and turns anything id-like into "other"', () => {
    expect(roleLabel('planter')).toBe('planter');
    expect(roleLabel('reader-2')).toBe('reader-2');
    for (const bad of [MARKER, REQUEST_ID, 'Planter', 'a'.repeat(40), 'reader 1', 'req-123456']) expect(roleLabel(bad)).toBe('other');
  });
});
