/**
 * A target's standing (docs/verdicts.md): pass only while its behavioural scenarios passed within their
 * intervals plus a grace and nothing applicable failed; the freshness a default schedule gives each scenario.
 */
import { describe, expect, it } from 'vitest';
import { freshnessMs } from '../../prober/src/service/scenario-schedule.js';
import { targetVerdict, type ScenarioStanding } from '../../prober/src/service/target-verdict.js';

const T0 = Date.parse('2026-01-01T12:00:00Z');
const MIN = 60_000;
const at = (minutesAgo: number): string => new Date(T0 - minutesAgo * MIN).toISOString();
const s = (scenario: string, outcome: ScenarioStanding['outcome'], minutesAgo: number): ScenarioStanding => ({ scenario, outcome, at: at(minutesAgo) });
const ALL = ['capacity-audit', 'overlimit-rejection', 'overlimit-handoff', 'abort-race', 'concurrent-interleave', 'prefix-isolation'];
const hourly = (name: string): number => (['capacity-audit', 'overlimit-rejection'].includes(name) ? 5 * MIN : 60 * MIN) + 5 * MIN;
const verdict = (latest: ScenarioStanding[], scenarios = ALL) => targetVerdict({ scenarios, latest, freshForMs: hourly, now: T0 });

describe('targetVerdict', () => {
  const fresh = [s('capacity-audit', 'pass', 1), s('overlimit-rejection', 'pass', 1), s('overlimit-handoff', 'pass', 40), s('abort-race', 'pass', 40), s('concurrent-interleave', 'pass', 40), s('prefix-isolation', 'not-applicable', 40)];

  it('passes while every behavioural scenario passed within its freshness and the rest is clean', () => {
    expect(verdict(fresh)).toEqual({ outcome: 'pass', reasons: [] });
  });

  it('drops to partial, naming it, once a behavioural pass is older than its interval and grace', () => {
    const stale = fresh.map((x) => (x.scenario === 'abort-race' ? s('abort-race', 'pass', 70) : x));
    const v = verdict(stale);
    expect(v.outcome).toBe('partial');
    expect(v.reasons).toEqual([expect.stringMatching(/^abort-race last passed 1h10m ago, past its interval and grace \(1h5m\)$/)]);
  });

  it('is partial while a configured behavioural scenario has not run, and with none configured', () => {
    expect(verdict(fresh.filter((x) => x.scenario !== 'concurrent-interleave')).reasons).toEqual(['concurrent-interleave has not run yet']);
    const cheap = verdict([s('capacity-audit', 'pass', 1), s('prefix-isolation', 'pass', 1)], ['capacity-audit', 'prefix-isolation']);
    expect(cheap.outcome).toBe('partial');
  });

  it('keeps a failure, however old, and an inconclusive, over any number of clean cheap results', () => {
    expect(verdict(fresh.map((x) => (x.scenario === 'abort-race' ? s('abort-race', 'fail', 300) : x))).outcome).toBe('fail');
    expect(verdict(fresh.map((x) => (x.scenario === 'prefix-isolation' ? s('prefix-isolation', 'inconclusive', 30) : x))).outcome).toBe('inconclusive');
  });

  it('ignores scenarios no longer configured, says none before any run, not-applicable when nothing applied', () => {
    expect(verdict([...fresh, s('prefix-churn', 'fail', 5)]).outcome).toBe('pass');
    expect(verdict([]).outcome).toBe('none');
    expect(verdict([s('prefix-isolation', 'not-applicable', 1)], ['prefix-isolation']).outcome).toBe('not-applicable');
  });

  it('lets a not-applicable behavioural scenario neither count nor block', () => {
    const na = fresh.map((x) => (x.scenario === 'concurrent-interleave' ? s('concurrent-interleave', 'not-applicable', 40) : x));
    expect(verdict(na).outcome).toBe('pass');
    const onlyNa = verdict([s('capacity-audit', 'pass', 1), s('abort-race', 'not-applicable', 10)], ['capacity-audit', 'abort-race']);
    expect(onlyNa.outcome).toBe('partial');
  });
});

describe('freshnessMs', () => {
  it('is the scenario\'s tier (else the interval) plus one more cycle with its jitter and timeout', () => {
    const target = { schedule: { intervalMs: 5 * MIN, jitterMs: 30_000, timeoutMs: 2 * MIN, scenarioIntervalsMs: { 'abort-race': 60 * MIN } } };
    expect(freshnessMs(target, 'abort-race')).toBe(60 * MIN + 5 * MIN + 30_000 + 2 * MIN);
    expect(freshnessMs(target, 'capacity-audit')).toBe(5 * MIN + 5 * MIN + 30_000 + 2 * MIN);
  });
});
