/**
 * The daily token cost bench/REPORT.md projects: the bench's per-scenario projection times the runs a day of
 * serve's own default schedule (and of every scenario every cycle). docs/cost.md quotes the measured full-scale
 * costs instead (test/e2e/full-scale-cost.test.ts).
 */
import { describe, expect, it } from 'vitest';
import type { ProjectionRow } from '../../bench/cost.js';
import { defaultSchedule, everyCycleSchedule, scheduleCost } from '../../bench/schedule-cost.js';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';

const row = (scenario: string, projectedSent: number): ProjectionRow => ({ scenario, at: [], projectedSent, projectedBilled: 0 });
/** 1,000 tokens per run for every scenario but the audit (0), and none measured for prefix-collision. */
const PROJECTION = SCENARIO_NAMES.filter((s) => s !== 'prefix-collision').map((s) => row(s, s === 'capacity-audit' ? 0 : 1000));

describe('schedule cost', () => {
  it('multiplies each scenario\'s tokens per run by its runs a day on the default tiers, and names what was not measured', () => {
    const c = scheduleCost(defaultSchedule(), PROJECTION);
    // A day of 5m cycles: the rejection check 96 times, two hourly scenarios 24 times, concurrent-interleave
    // (two-hourly) 12 times, overlimit-handoff 4 times, prefix-churn once.
    expect(c.sentPerDay).toBe(1000 * (96 + 2 * 24 + 12 + 4 + 1));
    expect(c.unmeasured).toEqual(['prefix-collision']);
    // The first hour: four rejection checks, every other tier once.
    expect(c.sentInBusiestHour).toBe(1000 * (4 + 4 + 1));
    const flat = scheduleCost(everyCycleSchedule(), PROJECTION);
    expect(flat.sentPerDay).toBe(288 * 1000 * 6);
    expect(flat.rows.every((r) => r.runsPerDay === 288)).toBe(true);
  });
});
