/**
 * The daily token cost the README quotes: the bench's per-scenario projection times the runs a day of
 * serve's own default schedule (and of every scenario every cycle), rendered into README.md's
 * figures:daily-cost block from bench/report.json.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { ProjectionRow } from '../../bench/cost.js';
import { dailyCostTable, markedBlock } from '../../bench/figures.js';
import { figureBlocks } from '../../bench/render-figures.js';
import type { BenchReport } from '../../bench/report.js';
import { defaultSchedule, everyCycleSchedule, scheduleCost } from '../../bench/schedule-cost.js';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';

const row = (scenario: string, projectedSent: number): ProjectionRow => ({ scenario, at: [], projectedSent, projectedBilled: 0 });
/** 1,000 tokens per run for every scenario but the audit (0), and none measured for prefix-collision. */
const PROJECTION = SCENARIO_NAMES.filter((s) => s !== 'prefix-collision').map((s) => row(s, s === 'capacity-audit' ? 0 : 1000));

describe('schedule cost', () => {
  it('multiplies each scenario\'s tokens per run by its runs a day on the default tiers, and names what was not measured', () => {
    const c = scheduleCost(defaultSchedule(), PROJECTION);
    // A day of 5m cycles: the rejection check 96 times, four hourly scenarios 24 times, prefix-churn 4 times.
    expect(c.sentPerDay).toBe(1000 * (96 + 4 * 24 + 4));
    expect(c.unmeasured).toEqual(['prefix-collision']);
    // The first hour: four rejection checks, every other tier once.
    expect(c.sentInBusiestHour).toBe(1000 * (4 + 4 + 1));
    const flat = scheduleCost(everyCycleSchedule(), PROJECTION);
    expect(flat.sentPerDay).toBe(288 * 1000 * 6);
    expect(flat.rows.every((r) => r.runsPerDay === 288)).toBe(true);
  });

  it('renders the table from the report: both schedules, the ratio, and a missing scenario said so', () => {
    const report = { sections: { cost: { command: 'npm run bench -- --only cost', seconds: 1, result: {
      cell: 'incident', available: true, scale: 128, contextTokens: 8192, poolTokens: 5312, search: [], smallest: null, smallestEither: null, smallestFullScaleTokens: null, projection: PROJECTION,
    } } } } as unknown as BenchReport;
    const text = dailyCostTable(report);
    expect(text).toContain('a 1,048,576-token context, pool 679,936');
    expect(text).toContain('| the default cost tiers | 288 × capacity-audit (0) + 96 × overlimit-rejection (1,000) + 24 × (overlimit-handoff 1,000 + abort-race 1,000 + concurrent-interleave 1,000 + prefix-isolation 1,000) + 4 × (prefix-collision not measured + prefix-churn 1,000) | **about 196,000** |');
    expect(text).toContain('| 288 × 6,000 | **about 1.7 million** (8.8× more) |');
    expect(text).toContain('fits both at full scale');
    expect(text).toContain('Not in the projection, counted as 0: prefix-collision.');
  });

  it('README.md quotes exactly what bench/report.json renders, with every scenario of the default set measured', () => {
    const block = figureBlocks().find((b) => b.block.name === 'daily-cost')!;
    expect(block.documented, 'README.md figures:daily-cost differs from bench/report.json (run npx tsx bench/render-figures.ts)').toBe(block.rendered);
    expect(markedBlock(readFileSync(new URL('../../README.md', import.meta.url), 'utf8'), 'daily-cost')).not.toContain('not measured');
  });
});
