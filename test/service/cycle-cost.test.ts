/**
 * The budget floor: check-config warns, from the config alone, when the hourly budget cannot fit one cycle
 * of the configured scenarios at the sizes the config states; the status page shows skipped cycles.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { budgetWarning, cycleCostFloor } from '../../prober/src/service/cycle-cost.js';
import { renderStatusPage } from '../../prober/src/service/server.js';
import { runCli } from '../helpers/cli.js';

const dirs: string[] = [];
afterAll(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });

describe('cycle cost floor', () => {
  it('prices what each scenario must send at the advertised sizes; unknown sizes are named, not guessed', () => {
    const sizes = { contextTokens: 16384, poolTokens: 16640 };
    const floor = cycleCostFloor(['capacity-audit', 'overlimit-handoff', 'abort-race'], sizes);
    expect(floor.unknown).toEqual([]);
    // overlimit-handoff: the pool planted plus one prompt 2% over the context; abort-race: 29 windows of a planter and its readers.
    expect(floor.tokens).toBe(16640 + Math.ceil(16384 * 1.02) + 29 * 2 * (4096 + 48));
    expect(cycleCostFloor(['overlimit-handoff', 'abort-race'], {}).unknown).toEqual(['overlimit-handoff', 'abort-race']);
    const target = { name: 'prod', scenarios: ['abort-race'], budget: { tokensPerHour: 100_000 }, schedule: { intervalMs: 300_000, scenarioIntervalsMs: { 'abort-race': 3_600_000 } } };
    expect(budgetWarning(target, sizes, 'at the advertised size')).toMatch(/prod: budget\.tokens_per_hour 100000 cannot fit one cycle of abort-race \(at least 240352 tokens/);
    expect(budgetWarning({ ...target, budget: { tokensPerHour: 2_000_000 } }, sizes, 'x')).toBeUndefined();
  });

  it('prices overlimit-rejection as its must-reject prompts: between the pool and the context, and beyond the context', () => {
    const sizes = { contextTokens: 16384, poolTokens: 8192 };
    const margin = Math.ceil(16384 * 0.02);
    const between = Math.floor((8192 + margin + 16384 - 48 - margin) / 2);
    expect(cycleCostFloor(['overlimit-rejection'], sizes).tokens).toBe(between + 16384 + margin);
    expect(cycleCostFloor(['overlimit-rejection'], {}).unknown).toEqual(['overlimit-rejection']);
  });

  it('compares the budget with the busiest hour of the tiered schedule, not with one cycle times the cycles of an hour', () => {
    const sizes = { contextTokens: 16384, poolTokens: 16640 };
    const raceCycle = 29 * 2 * (4096 + 48);
    const base = { name: 'prod', scenarios: ['capacity-audit', 'abort-race'], budget: { tokensPerHour: 900_000 } };
    // Hourly: one race cycle an hour fits 900k; every 5 minutes, twelve do not.
    const tiered = { ...base, schedule: { intervalMs: 300_000, scenarioIntervalsMs: { 'abort-race': 3_600_000 } } };
    expect(budgetWarning(tiered, sizes, 'x')).toBeUndefined();
    const everyCycle = { ...base, schedule: { intervalMs: 300_000 } };
    expect(budgetWarning(everyCycle, sizes, 'x')).toMatch(new RegExp(`cannot fit the busiest hour of its schedule \\(every scenario every cycle: at least ${12 * raceCycle} tokens x\\)`));
    // Every 15 minutes: four in the busiest hour.
    const quarter = { ...base, schedule: { intervalMs: 300_000, scenarioIntervalsMs: { 'abort-race': 900_000 } } };
    expect(budgetWarning(quarter, sizes, 'x')).toMatch(new RegExp(`with its cost tiers: at least ${4 * raceCycle} tokens`));
  });

  it('check-config warns from the config alone (stated planter size), still valid', async () => {
    const d = mkdtempSync(join(tmpdir(), 'kvcanary-cost-'));
    dirs.push(d);
    const file = join(d, 'tight.yaml');
    writeFileSync(file, 'budget: { tokens_per_hour: 10000 }\nscenarios: [abort-race]\nprobe: { planter_tokens: 4096 }\ntargets:\n  - name: a\n    base_url: http://127.0.0.1:8000\n');
    const r = await runCli(['check-config', file]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/warning: a: budget\.tokens_per_hour 10000 cannot fit one cycle of abort-race/);
    const roomy = join(d, 'roomy.yaml');
    writeFileSync(roomy, 'scenarios: [abort-race]\nprobe: { planter_tokens: 4096 }\ntargets:\n  - name: a\n    base_url: http://127.0.0.1:8000\n');
    expect((await runCli(['check-config', roomy])).stderr).not.toMatch(/warning/);
  });
});

describe('status page', () => {
  it('shows skipped cycles with the reason, what was needed and what was left', () => {
    const html = renderStatusPage({
      latest: [], findings: [], now: Date.parse('2026-03-01T01:00:00Z'),
      configured: [{ name: 'prod', baseUrl: 'http://h', scenarios: ['abort-race'] }],
      health: { status: 'ok', loops: [{ target: 'prod', state: 'idle', abandoned: 0, skipped: { budget: 3 }, lastSkip: { reason: 'budget', at: '2026-03-01T00:59:00Z', neededTokens: 240352, availableTokens: 1200 } }] },
    });
    expect(html).toMatch(/SKIPPED<\/span> budget: 3/);
    expect(html).toContain('needed 240,352 tokens');
    expect(html).toContain('1,200 left this hour');
  });
});
