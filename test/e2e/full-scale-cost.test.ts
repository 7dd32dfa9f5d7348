/**
 * What probing costs a full-scale endpoint, as measured (bench/full-scale.json, every scenario once at scale
 * 1 against the incident and remediated engines) and as docs/cost.md quotes it; and that the default budgets
 * follow from it: the sizes the endpoint advertises price every scenario at least as high as what it was
 * measured to send, so neither a default `kvcanary run` nor serve's derived hourly budget cuts a scenario
 * short on a full-scale endpoint.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { dailyTotals, HEALTHY_PRESET, type FullScaleFigures } from '../../bench/full-scale-figures.js';
import { figureBlocks } from '../../bench/render-figures.js';
import { defaultSchedule } from '../../bench/schedule-cost.js';
import { resolveEngineConfig } from '../../engine-under-test/src/config.js';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';
import { BUDGET_HEADROOM, runBudget, type EndpointSizes } from '../../prober/src/probe/scenarios/cost.js';
import { derivedBudget, scheduledCost } from '../../prober/src/service/scenario-cost.js';
import { runsOver } from '../../prober/src/service/scenario-schedule.js';

const figures = JSON.parse(readFileSync(new URL('../../bench/full-scale.json', import.meta.url), 'utf8')) as FullScaleFigures;

/** What the bundled engine advertises at scale 1 (/get_server_info: each role's pool; the smaller bounds admission). */
function advertised(preset: string): EndpointSizes {
  const c = resolveEngineConfig({ preset, scale: 1 });
  const decode = c.disaggregated?.decodePoolTokens ?? c.poolTokens;
  return { contextTokens: c.contextTokens, poolTokens: Math.min(c.poolTokens, decode), reservationPoolTokens: decode, largestPoolTokens: Math.max(c.poolTokens, decode), pageSize: c.pageSize };
}

describe('bench/full-scale.json', () => {
  it('holds every scenario against both presets, in the shape docs/cost.md is rendered from, with daily totals of the current tiers', () => {
    // Every scenario against both presets, or named as not measured (docs/cost.md and the daily totals say so).
    for (const preset of ['incident', 'remediated']) {
      const missing = (figures.unmeasured ?? []).filter((u) => u.startsWith(`${preset}/`)).map((u) => u.slice(preset.length + 1));
      expect([...figures.scenarios.filter((r) => r.preset === preset).map((r) => r.name), ...missing].sort()).toEqual([...SCENARIO_NAMES].sort());
    }
    for (const r of figures.scenarios) {
      expect(Object.keys(r).sort()).toEqual(['billed', 'computed', 'mode', 'name', 'preset', 'seconds', 'sent']);
      expect(['full', 'skip']).toContain(r.mode);
    }
    expect(figures.daily).toEqual(dailyTotals(figures.scenarios));
  });

  it('docs/cost.md quotes exactly what bench/full-scale.json renders', () => {
    const block = figureBlocks().find((b) => b.block.name === 'daily-cost')!;
    expect(block.documented, `${block.block.doc} figures:daily-cost differs from bench/full-scale.json (run npx tsx bench/render-figures.ts)`).toBe(block.rendered);
  });
});

describe('default budgets at full scale', () => {
  it('a default kvcanary run of any one scenario, or of all of them, is granted at least what it was measured to send', () => {
    for (const preset of ['incident', 'remediated']) {
      const rows = figures.scenarios.filter((r) => r.preset === preset);
      for (const r of rows) {
        expect(runBudget([r.name], advertised(preset), {}, 5_000_000), `${preset} ${r.name}`).toBeGreaterThanOrEqual(Math.max(r.sent, r.billed));
      }
      const all = rows.reduce((a, r) => a + Math.max(r.sent, r.billed), 0);
      expect(runBudget(SCENARIO_NAMES, advertised(preset), {}, 5_000_000), preset).toBeGreaterThanOrEqual(all);
    }
  });

  it('serve\'s derived hourly budget holds two hourly runs of every tier measured at full scale', () => {
    for (const preset of ['incident', 'remediated']) {
      const target = defaultSchedule();
      const budget = derivedBudget(scheduledCost(target, advertised(preset)))!;
      const runs = runsOver(target, 2 * 3_600_000);
      const measured = figures.scenarios.filter((r) => r.preset === preset).reduce((a, r) => a + (runs.get(r.name) ?? 0) * Math.max(r.sent, r.billed), 0);
      expect(budget, preset).toBeGreaterThanOrEqual(measured);
      // Bounded above: it also holds the prefix scenarios' worst case (the escalated timing test, the reuse
      // probes), which a healthy run seldom sends.
      expect(budget, preset).toBeLessThanOrEqual(measured * BUDGET_HEADROOM * 3);
    }
  });
});

describe('a healthy full-scale endpoint under the default tiers', () => {
  // Issue 25's goal, on measured rows only: a healthy full-scale endpoint computes at most 50 M tokens a day for
  // the default tiers, while the incident's signature is checked every 15 minutes, abort-race keeps 24
  // runs a day (its windows a day, so its daily power, as before the cut) and the prefix scenarios run daily.
  it('the default tiers cost a healthy full-scale endpoint at most 50 M tokens computed a day, every row measured', () => {
    expect((figures.unmeasured ?? []).filter((u) => u.startsWith(`${HEALTHY_PRESET}/`))).toEqual([]);
    expect(figures.daily.defaultTiers.computed).toBeLessThanOrEqual(50_000_000);
    const day = runsOver(defaultSchedule(), 86_400_000);
    expect(day.get('overlimit-rejection')).toBeGreaterThanOrEqual(96);
    expect(day.get('abort-race')).toBeGreaterThanOrEqual(24);
    // concurrent-interleave holds ballast now and runs every two hours: 12 runs a day, each stating the power
    // its calibration measured (CONCURRENT_INTERLEAVE_CONFIDENCE), where 24 a day stated 0 before (the old
    // workload, which never cycled a FIFO pool larger than it was sized on).
    expect(day.get('concurrent-interleave')).toBeGreaterThanOrEqual(12);
    for (const s of ['prefix-isolation', 'prefix-collision', 'prefix-churn']) expect(day.get(s), s).toBeGreaterThanOrEqual(1);
  });

  it('computes the day the JSON states, from its remediated rows', () => {
    const day = runsOver(defaultSchedule(), 86_400_000);
    const computed = figures.scenarios.filter((r) => r.preset === HEALTHY_PRESET).reduce((a, r) => a + (day.get(r.name) ?? 0) * r.computed, 0);
    expect(figures.daily.defaultTiers.computed).toBe(computed);
  });
});
