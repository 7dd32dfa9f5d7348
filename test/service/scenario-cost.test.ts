/**
 * The default budget follows from the tiers and the endpoint's advertised sizes (`tokens_per_hour: auto`):
 * unlimited until a probe has seen the sizes, then 1.5 × what the tiers send in their first two hours; a
 * budget set by hand stays as set. check-config prints each target's expected daily cost.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';
import { parseConfig } from '../../prober/src/service/config.js';
import { createLogger } from '../../prober/src/service/logger.js';
import { createMetrics } from '../../prober/src/service/metrics.js';
import { derivedBudget, scheduledCost } from '../../prober/src/service/scenario-cost.js';
import { createTargetBudgets, sizeBudget } from '../../prober/src/service/target-budgets.js';
import type { ProbeRun } from '../../prober/src/probe/result.js';
import { runCli } from '../helpers/cli.js';

const FULL = { contextTokens: 1_048_576, poolTokens: 1_064_960, reservationPoolTokens: 1_064_960, largestPoolTokens: 2_040_000, pageSize: 16 };

function setup(yaml: string) {
  const target = parseConfig(yaml, { knownScenarios: SCENARIO_NAMES, requireSecrets: false, env: {} }).targets[0]!;
  const lines: string[] = [];
  const logger = createLogger({ level: 'info', destination: new Writable({ write(c, _e, cb) { lines.push(String(c)); cb(); } }) });
  const budgets = createTargetBudgets({ metrics: createMetrics(new Registry()), clock: { now: () => 0 } as never, logger, configured: () => true });
  const run = { capacity: FULL } as unknown as ProbeRun;
  return { target, budgets, logger, lines, run };
}

describe('derived budget', () => {
  it('is unlimited until the sizes are known, then 1.5 × the first two hours at those sizes, and logged with the daily cost', () => {
    const { target, budgets, logger, lines, run } = setup('targets: [{ name: prod, base_url: "http://127.0.0.1:1" }]');
    expect(budgets.of(target).tokensPerHour).toBe(1_000_000_000_000);
    sizeBudget({ target }, run, budgets, logger);
    const expected = derivedBudget(scheduledCost(target, FULL))!;
    expect(expected).toBe(Math.ceil(1.5 * scheduledCost(target, FULL).firstTwoHours.sent));
    expect(budgets.of(target).tokensPerHour).toBe(expected);
    // Scenarios that never ran weigh by their expected cost: abort-race's share is not the audit's.
    expect(budgets.of(target).costEstimate('abort-race')).toBeGreaterThan(1_000_000);
    expect(budgets.of(target).costEstimate('capacity-audit')).toBe(0);
    expect(lines.join('')).toMatch(/prod: expected cost at the endpoint's advertised size about [\d.]+ M tokens computed and [\d.]+ M sent a day; budget \d+ tokens\/hour \(auto/);
  });

  it('leaves a budget set by hand as set, and warns in one line with the numbers when it cannot fit a cycle', () => {
    const { target, budgets, logger, lines, run } = setup('budget: { tokens_per_hour: 2000000 }\ntargets: [{ name: prod, base_url: "http://127.0.0.1:1" }]');
    sizeBudget({ target }, run, budgets, logger);
    expect(budgets.of(target).tokensPerHour).toBe(2_000_000);
    const warn = lines.find((l) => l.includes('cannot fit'));
    expect(warn).toMatch(/prod: budget\.tokens_per_hour 2000000 cannot fit one cycle of .* \(at least \d+ tokens at the endpoint's advertised size\)/);
  });

  it('check-config prints each target\'s expected daily cost, computed and sent', async () => {
    const d = mkdtempSync(join(tmpdir(), 'kvcanary-cost-'));
    try {
      const file = join(d, 'k.yaml');
      writeFileSync(file, 'targets:\n  - { name: a, base_url: "http://127.0.0.1:1" }\n  - { name: b, base_url: "http://127.0.0.1:2", schedule: { scenarios: every_cycle } }\n');
      const r = await runCli(['check-config', file]);
      expect(r.code, r.stderr).toBe(0);
      const a = /  a: about ([\d.]+) M tokens computed and ([\d.]+) M sent a day; busiest hour \d+ sent; budget auto: \d+ tokens\/hour at this size/.exec(r.stdout);
      const b = /  b: about ([\d.]+) (M|billion) tokens computed/.exec(r.stdout);
      expect(a, r.stdout).not.toBeNull();
      expect(b, r.stdout).not.toBeNull();
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
