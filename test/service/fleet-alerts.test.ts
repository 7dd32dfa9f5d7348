/**
 * dashboards/alertmanager.yaml and dashboards/fleet-alerts.yaml: the real tools accept them (amtool,
 * promtool), the rules' unit tests pass, and they read only metrics the prober exports.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { metricNames, ruleQueries } from '../helpers/dashboard-queries.js';
import { runPromtool } from '../helpers/prometheus.js';
import { runAmtool } from '../helpers/alertmanager.js';
import { createFleetMetrics } from '../../prober/src/service/fleet-metrics.js';

const dashboardsDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'dashboards');

describe('dashboards/alertmanager.yaml', () => {
  it('passes `amtool check-config`', async () => {
    const r = await runAmtool(['check-config', join(dashboardsDir, 'alertmanager.yaml')]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain('SUCCESS');
  });

  it('groups pages by target and kind, and lets a leak inhibit the same target\'s inconclusive alert', () => {
    const c = parseYaml(readFileSync(join(dashboardsDir, 'alertmanager.yaml'), 'utf8')) as {
      route: { routes: { matchers: string[]; group_by: string[] }[] };
      inhibit_rules: { source_matchers: string[]; target_matchers: string[]; equal: string[] }[];
    };
    expect(c.route.routes[0]).toMatchObject({ matchers: ['severity="critical"'], group_by: ['target', 'kind'] });
    expect(c.inhibit_rules).toContainEqual({
      source_matchers: ['alertname="KvcanaryCrossRequestLeak"'], target_matchers: ['alertname="KvcanaryProbesInconclusive"'], equal: ['target'],
    });
  });
});

describe('dashboards/fleet-alerts.yaml', () => {
  it('passes `promtool check rules` and its unit tests', async () => {
    const check = await runPromtool(['check', 'rules', join(dashboardsDir, 'fleet-alerts.yaml')]);
    expect(check.code, check.stdout + check.stderr).toBe(0);
    const test = await runPromtool(['test', 'rules', 'fleet-alerts.test.yaml'], { cwd: dashboardsDir });
    expect(test.code, test.stdout + test.stderr).toBe(0);
  });

  it('reads only metrics the prober exports', async () => {
    const registry = new Registry();
    createFleetMetrics(registry);
    const exported = new Set(registry.getMetricsAsArray().map((m) => m.name));
    const rules = ruleQueries(parseYaml(readFileSync(join(dashboardsDir, 'fleet-alerts.yaml'), 'utf8')));
    expect(rules.length).toBe(2);
    for (const r of rules) for (const name of metricNames(r.expr)) expect(exported.has(name), `${r.name} reads ${name}`).toBe(true);
  });
});
