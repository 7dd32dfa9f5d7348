/** kvcanary_last_run_outcome knows not_applicable, and a not-applicable run ends an inconclusive streak (the alert must not fire on it). */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import type { ProbeRun, ScenarioResult } from '../../prober/src/probe/result.js';
import { createMetrics, initTargetMetrics, observeRun } from '../../prober/src/service/metrics.js';

const scen = (outcome: ScenarioResult['outcome']): ScenarioResult => ({ name: 'prefix-churn', outcome, findings: [], requests: [], notes: [], tokens: { sent: 0, billed: 0 }, durationMs: 1 });
const run = (outcome: ScenarioResult['outcome']): ProbeRun => ({
  runId: `r-${Math.random()}`, target: 't', baseUrl: 'http://t', model: 'm', startedAt: '2026-01-01T00:00:00Z', finishedAt: '2026-01-01T00:00:01Z',
  outcome, scenarios: [scen(outcome)], capacity: {}, up: true,
});

describe('metrics for not-applicable', () => {
  it('sets the not_applicable state and resets the inconclusive streak', async () => {
    const registry = new Registry();
    const m = createMetrics(registry);
    initTargetMetrics(m, 't', ['prefix-churn']);
    observeRun(m, run('inconclusive'));
    observeRun(m, run('inconclusive'));
    const value = async (name: string, labels: Record<string, string>): Promise<number | undefined> => {
      const metric = (await registry.getMetricsAsJSON()).find((x) => x.name === name);
      return (metric?.values as { labels: Record<string, string>; value: number }[]).find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value;
    };
    expect(await value('kvcanary_inconclusive_streak', { scenario: 'prefix-churn' })).toBe(2);
    observeRun(m, run('not-applicable'));
    expect(await value('kvcanary_last_run_outcome', { scenario: 'prefix-churn', outcome: 'not_applicable' })).toBe(1);
    expect(await value('kvcanary_last_run_outcome', { scenario: 'prefix-churn', outcome: 'inconclusive' })).toBe(0);
    expect(await value('kvcanary_inconclusive_streak', { scenario: 'prefix-churn' })).toBe(0);
    expect(await value('kvcanary_probe_cycles_total', { outcome: 'not_applicable' })).toBe(1);
  });
});
