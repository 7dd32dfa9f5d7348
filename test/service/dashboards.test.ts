/**
 * dashboards/: the Grafana dashboard, its provisioning, and the Prometheus alert rules.
 *
 * (a) promtool checks and unit-tests the rules; (b) the dashboard is checked for what makes it import
 * and read correctly anywhere (datasource variable, unique ids, no overlap, inconclusive never green,
 * only agreed metric names); (c) a real Prometheus scrapes a prom-client exporter that serves the agreed
 * metrics for three targets (a leaking one, a healthy one, an unreachable one) and every dashboard query,
 * every rule expression and the alerts themselves are checked against what that exporter says.
 */
import { createServer, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import {
  dashboardPanels, dashboardQueries, metricNames, ruleQueries, substituteTemplateVariables,
} from '../helpers/dashboard-queries.js';
import { FINDING_KINDS } from '../../prober/src/probe/findings.js';
import { TARGET_STANDINGS, targetVerdict } from '../../prober/src/service/target-verdict.js';
import { runPromtool, startPrometheus, type PrometheusHandle, type Sample } from '../helpers/prometheus.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const dashboardsDir = join(root, 'dashboards');
const dashboardPath = join(dashboardsDir, 'kvcanary.json');
const alertsPath = join(dashboardsDir, 'alerts.yaml');
const dashboard = JSON.parse(readFileSync(dashboardPath, 'utf8')) as Record<string, unknown>;
const rules = ruleQueries(parseYaml(readFileSync(alertsPath, 'utf8')));

/** The agreed metric names (notes: metrics.md), the contract with prober/src/metrics.ts. */
const AGREED_METRICS = {
  kvcanary_probe_runs_total: 'counter',
  kvcanary_probe_cycles_total: 'counter',
  kvcanary_target_verdict: 'gauge',
  kvcanary_findings_total: 'counter',
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
  kvcanary_target_info: 'gauge',
} as const;

type Panel = Record<string, unknown>;
const panels = dashboardPanels(dashboard);
const contentPanels = panels.filter((p) => p.type !== 'row');
const panelByTitle = (title: string): Panel => {
  const panel = panels.find((p) => p.title === title);
  if (panel === undefined) throw new Error(`dashboard has no panel titled "${title}"`);
  return panel;
};

interface ValueMapping { text: string; color?: string }
function valueMappings(panel: Panel): Map<string, ValueMapping> {
  const out = new Map<string, ValueMapping>();
  const defaults = (panel.fieldConfig as { defaults?: { mappings?: { type: string; options: Record<string, ValueMapping> }[] } })?.defaults;
  for (const mapping of defaults?.mappings ?? []) {
    if (mapping.type !== 'value') continue;
    for (const [value, result] of Object.entries(mapping.options)) out.set(value, result);
  }
  return out;
}
/** Grafana named greens, or a hex colour whose green channel clearly dominates. */
function isGreenish(color: string | undefined): boolean {
  if (color === undefined) return false;
  if (/green/i.test(color)) return true;
  const hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(color);
  if (!hex) return false;
  const [r, g, b] = hex.slice(1).map((h) => parseInt(h, 16)) as [number, number, number];
  return g > r + 32 && g > b + 32;
}

describe('alert rules', () => {
  it('pass `promtool check rules`', async () => {
    const result = await runPromtool(['check', 'rules', alertsPath]);
    expect(result.stdout + result.stderr).toContain('SUCCESS');
    expect(result.code, result.stdout + result.stderr).toBe(0);
  });

  it('pass their unit tests (`promtool test rules dashboards/alerts.test.yaml`)', async () => {
    const result = await runPromtool(['test', 'rules', 'alerts.test.yaml'], { cwd: dashboardsDir });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toContain('SUCCESS');
  });

  it('define the seven alerts, each with a severity, summary, description and runbook; finding alerts say what to do', () => {
    const parsed = parseYaml(readFileSync(alertsPath, 'utf8')) as { groups: { rules: Record<string, unknown>[] }[] };
    const alerts = parsed.groups.flatMap((g) => g.rules).filter((r) => typeof r.alert === 'string');
    expect(alerts.map((a) => a.alert).sort()).toEqual([
      'KvcanaryCrossRequestLeak', 'KvcanaryPoolBelowContext', 'KvcanaryPrefixTimingSideChannel',
      'KvcanaryProbesInconclusive', 'KvcanaryProbesStale', 'KvcanaryRejectionNotEnforced', 'KvcanaryTargetDown',
    ]);
    for (const alert of alerts) {
      const annotations = alert.annotations as Record<string, string>;
      const findingAlert = /findings/.test(String(alert.expr)) || alert.alert === 'KvcanaryPoolBelowContext';
      expect(Object.keys(annotations).sort(), String(alert.alert)).toEqual(findingAlert ? ['description', 'remediation', 'runbook', 'summary'] : ['description', 'runbook', 'summary']);
      expect((alert.labels as Record<string, string>).severity, String(alert.alert)).toMatch(/^(critical|high|warning)$/);
    }
    const leak = alerts.find((a) => a.alert === 'KvcanaryCrossRequestLeak');
    // A leak pages at once: no pending period, and the pager's severity.
    expect(leak?.for).toBe('0m');
    expect((leak?.labels as Record<string, string>).severity).toBe('critical');
  });

  it('carry, for every finding kind that alerts, the remediation line the CLI and status page print', () => {
    const text = readFileSync(alertsPath, 'utf8').replace(/\s+/g, ' ');
    for (const [kind, info] of Object.entries(FINDING_KINDS)) {
      if (info.severity === 'info') continue;  // facts, not alerts
      expect(text, kind).toContain(info.remediation);
    }
  });

  it('read only agreed metric names or recorded ones, as do their unit tests\' input series', () => {
    const recorded = new Set(rules.filter((r) => r.kind === 'record').map((r) => r.name));
    for (const rule of rules) {
      for (const name of metricNames(rule.expr)) {
        expect(isAgreedName(name) || recorded.has(name), `${rule.name} reads unknown metric ${name}`).toBe(true);
      }
    }
    const tests = parseYaml(readFileSync(join(dashboardsDir, 'alerts.test.yaml'), 'utf8')) as { tests: { input_series: { series: string }[] }[] };
    for (const series of tests.tests.flatMap((t) => t.input_series)) {
      const name = /^[a-zA-Z_:][\w:]*/.exec(series.series)?.[0] ?? '';
      // `up` of another job is the one deliberate stranger: the "no kvcanary series at all" case.
      expect(isAgreedName(name) || name === 'up', `alerts.test.yaml feeds unknown metric ${name}`).toBe(true);
    }
  });
});

function isAgreedName(name: string): boolean {
  if (Object.hasOwn(AGREED_METRICS, name)) return AGREED_METRICS[name as keyof typeof AGREED_METRICS] !== 'histogram';
  const base = /^(.*)_(bucket|sum|count)$/.exec(name)?.[1];
  return base !== undefined && AGREED_METRICS[base as keyof typeof AGREED_METRICS] === 'histogram';
}

describe('metricNames (the check above relies on it)', () => {
  it('finds selectors and skips functions, aggregations, label lists, durations and strings', () => {
    expect(metricNames('histogram_quantile(0.95, sum by (target, le) (rate(a_bucket{x="y}"}[5m])))')).toEqual(['a_bucket']);
    expect(metricNames('max by (t) (a) < on (t) group_left(k) max(b offset 15m) or absent(c) unless d')).toEqual(['a', 'b', 'c', 'd']);
    expect(metricNames('time() - 1e3 * x:rec:rate5m')).toEqual(['x:rec:rate5m']);
  });
});

describe('dashboard JSON', () => {
  it('uses a datasource variable, never __inputs, on every panel and target', () => {
    expect(dashboard).not.toHaveProperty('__inputs');
    expect(JSON.stringify(dashboard)).not.toContain('${DS_');
    const variables = (dashboard.templating as { list: Record<string, unknown>[] }).list;
    const datasource = variables.find((v) => v.name === 'datasource');
    expect(datasource).toMatchObject({ type: 'datasource', query: 'prometheus' });
    for (const panel of contentPanels) {
      expect(panel.datasource, `panel "${String(panel.title)}"`).toEqual({ type: 'prometheus', uid: '${datasource}' });
      for (const target of panel.targets as Record<string, unknown>[]) {
        expect(target.datasource, `panel "${String(panel.title)}" ${String(target.refId)}`).toEqual({ type: 'prometheus', uid: '${datasource}' });
      }
    }
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
  });

  it('has a multi-select target variable with All meaning every target', () => {
    const variables = (dashboard.templating as { list: Record<string, unknown>[] }).list;
    const target = variables.find((v) => v.name === 'target');
    expect(target).toMatchObject({ type: 'query', multi: true, includeAll: true, allValue: '.*', datasource: { uid: '${datasource}' } });
    expect(JSON.stringify(target?.query)).toContain('label_values(kvcanary_probe_runs_total, target)');
  });

  it('filters by $target with a regex matcher everywhere, so multi-select and All work', () => {
    for (const query of dashboardQueries(dashboard)) {
      if (!query.rawExpr.includes('$target')) continue;
      expect(query.rawExpr, `${query.title} ${query.refId}`).not.toMatch(/target\s*(=|!=)\s*"\$target"/);
      expect(query.rawExpr).toMatch(/target=~"\$target"/);
    }
    expect(dashboardQueries(dashboard).filter((q) => q.source === 'panel' && !q.rawExpr.includes('$target'))).toEqual([]);
  });

  it('has unique panel ids, an expr on every target, and panels that fit the grid without overlapping', () => {
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.every((id) => typeof id === 'number')).toBe(true);
    for (const panel of contentPanels) {
      const targets = panel.targets as Record<string, unknown>[];
      expect(targets.length, String(panel.title)).toBeGreaterThan(0);
      for (const t of targets) expect(typeof t.expr === 'string' && t.expr.trim() !== '', `${String(panel.title)} ${String(t.refId)}`).toBe(true);
      expect(typeof panel.description === 'string' && panel.description.length > 40, `panel "${String(panel.title)}" needs an on-call description`).toBe(true);
    }
    type Box = { x: number; y: number; w: number; h: number };
    const boxes = panels.map((p) => ({ title: String(p.title), ...(p.gridPos as Box) }));
    for (const [i, a] of boxes.entries()) {
      expect(a.x + a.w, a.title).toBeLessThanOrEqual(24);
      for (const b of boxes.slice(i + 1)) {
        const overlap = a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
        expect(overlap, `"${a.title}" overlaps "${b.title}"`).toBe(false);
      }
    }
  });

  it('shows every required view', () => {
    const uses = (metric: string) => contentPanels.filter((p) => (p.targets as { expr: string }[]).some((t) => metricNames(t.expr).includes(metric)));
    expect(uses('kvcanary_last_run_outcome').map((p) => p.type)).toContain('state-timeline');
    expect(uses('kvcanary_findings_total').map((p) => p.type)).toEqual(expect.arrayContaining(['stat', 'timeseries']));
    for (const metric of [
      'kvcanary_inconclusive_streak', 'kvcanary_target_pool_capacity_tokens', 'kvcanary_target_context_limit_tokens',
      'kvcanary_tokens_sent_total', 'kvcanary_tokens_billed_total', 'kvcanary_request_duration_seconds_bucket',
      'kvcanary_time_to_first_token_seconds_bucket', 'kvcanary_probe_duration_seconds_bucket', 'kvcanary_target_up',
      'kvcanary_last_run_timestamp_seconds', 'kvcanary_runs_skipped_total',
    ]) {
      expect(uses(metric).length, metric).toBeGreaterThan(0);
    }
    const ratio = contentPanels.find((p) => (p.targets as { expr: string }[]).some((t) =>
      /pool_capacity_tokens[\s\S]*\/[\s\S]*context_limit_tokens/.test(t.expr)));
    expect(ratio, 'a pool / context ratio panel').toBeDefined();
  });

  it('renders only pass as green: inconclusive is amber, fail red, not applicable blue, not-yet-run grey', () => {
    const outcome = panelByTitle('Outcome per target and scenario');
    const byText = new Map([...valueMappings(outcome).values()].map((m) => [m.text, m.color]));
    expect(byText.get('pass')).toBe('green');
    expect(byText.get('fail')).toBe('red');
    expect(byText.get('inconclusive')).toBe('orange');
    expect(isGreenish(byText.get('inconclusive'))).toBe(false);
    expect(byText.get('not applicable')).toBe('blue');
    expect(isGreenish(byText.get('no run yet'))).toBe(false);
    // A value no mapping covers falls back to the thresholds' base colour: that must not be green either.
    const steps = (outcome.fieldConfig as { defaults: { thresholds: { steps: { color: string }[] } } }).defaults.thresholds.steps;
    expect(steps.some((s) => isGreenish(s.color))).toBe(false);
    // The runs-by-outcome panel colours series by outcome (its legend is "{{target}} · {{outcome}}"),
    // not by palette, which could hand inconclusive a green.
    const runs = panelByTitle('Probe runs by outcome');
    const overrides = (runs.fieldConfig as { overrides: { matcher: { id: string; options: string }; properties: { id: string; value: { fixedColor?: string } }[] }[] }).overrides;
    const colourOf = (seriesName: string) => overrides
      .filter((o) => o.matcher.id === 'byRegexp' && new RegExp(o.matcher.options).test(seriesName))
      .flatMap((o) => o.properties.filter((p) => p.id === 'color').map((p) => p.value.fixedColor));
    expect(colourOf('remediated · pass')).toEqual(['green']);
    expect(colourOf('unreachable · inconclusive')).toEqual(['orange']);
    expect(colourOf('incident · fail')).toEqual(['red']);
    expect(colourOf('llama · not_applicable')).toEqual(['blue']);
  });

  it('reads only agreed metric names or recorded ones', () => {
    const recorded = new Set(rules.filter((r) => r.kind === 'record').map((r) => r.name));
    for (const query of dashboardQueries(dashboard)) {
      for (const name of metricNames(query.expr)) {
        expect(isAgreedName(name) || recorded.has(name), `${query.title} ${query.refId} reads unknown metric ${name}`).toBe(true);
      }
    }
  });

  it('rejects an unknown template variable by name rather than sending it to Prometheus', () => {
    expect(() => substituteTemplateVariables('rate(x{a=~"$tenant"}[$__rate_interval])', undefined, 'panel 9'))
      .toThrow(/panel 9: template variable \$tenant has no value/);
    expect(substituteTemplateVariables('rate(x{a=~"${target:regex}"}[$__rate_interval]) offset [[__range]]'))
      .toBe('rate(x{a=~".*"}[1m]) offset 5m');
  });
});

describe('provisioning', () => {
  it('provides the dashboards folder through a file provider', () => {
    const config = parseYaml(readFileSync(join(dashboardsDir, 'provisioning', 'dashboards.yaml'), 'utf8')) as { apiVersion: number; providers: Record<string, unknown>[] };
    expect(config.apiVersion).toBe(1);
    expect(config.providers).toHaveLength(1);
    expect(config.providers[0]).toMatchObject({ type: 'file', options: { path: expect.stringMatching(/^\//) } });
  });

  it('provides a Prometheus datasource whose URL comes from KVCANARY_PROMETHEUS_URL', () => {
    const text = readFileSync(join(dashboardsDir, 'provisioning', 'datasources.yaml'), 'utf8');
    const config = parseYaml(text) as { apiVersion: number; datasources: Record<string, unknown>[] };
    expect(config.apiVersion).toBe(1);
    expect(config.datasources).toHaveLength(1);
    expect(config.datasources[0]).toMatchObject({ type: 'prometheus', access: 'proxy', url: '${KVCANARY_PROMETHEUS_URL}' });
    // Grafana expands with Go's os.ExpandEnv: `${VAR:-default}` would silently become an empty URL.
    expect(text.split('\n').filter((l) => !l.trimStart().startsWith('#')).join('\n')).not.toContain(':-');
    expect(text).toContain('http://127.0.0.1:9090');
  });
});

// ---------------------------------------------------------------------------------------------------
// End to end: prom-client exporter → real Prometheus → every dashboard query and rule expression.

type Outcome = 'pass' | 'fail' | 'inconclusive';
/** `hourly`: on a 1h cost tier, last run 50 minutes ago (between its runs: not stale). */
interface FixtureScenario { outcome: Outcome; findings?: { kind: string; severity: string }[]; stale?: boolean; hourly?: boolean }
interface FixtureTarget { up: boolean; pool?: number; context?: number; scenarios: Record<string, FixtureScenario>; skipped?: string; shard: string; page?: string }

/** A fixture target's standing by the product's own rule: hourly scenarios ran 50 minutes ago, stale ones an hour ago. */
function standingOf(t: FixtureTarget) {
  const now = Date.now();
  const latest = Object.entries(t.scenarios).map(([scenario, s]) => ({
    scenario, outcome: s.outcome, at: new Date(now - (s.hourly ? 3000 : s.stale ? 3600 : 0) * 1000).toISOString(),
  }));
  const fresh = (scenario: string): number => (t.scenarios[scenario]?.hourly ? 3600 : 300) * 1000 + 300_000 + 30_000 + 120_000;
  return targetVerdict({ scenarios: Object.keys(t.scenarios), latest, freshForMs: fresh, now });
}

/** What the exporter claims; the assertions below are derived from this, not restated. */
const FIXTURE: Record<string, FixtureTarget> = {
  incident: {
    up: true, pool: 681_280, context: 1_048_576, shard: '0/2', page: 'https://kvcanary-0.example.com/#target-incident',
    scenarios: {
      'overlimit-handoff': { outcome: 'fail', findings: [{ kind: 'cross-request-leak', severity: 'critical' }, { kind: 'rejection-not-enforced', severity: 'high' }] },
      'capacity-audit': { outcome: 'fail', findings: [{ kind: 'pool-below-context', severity: 'warning' }] },
      'abort-race': { outcome: 'pass' },
      'prefix-isolation': { outcome: 'fail', findings: [{ kind: 'prefix-timing-side-channel', severity: 'high' }] },
    },
  },
  remediated: {
    up: true, pool: 2_040_000, context: 1_048_576, skipped: 'budget', shard: '1/2', page: 'https://kvcanary-1.example.com/#target-remediated',
    scenarios: { 'overlimit-handoff': { outcome: 'pass', hourly: true }, 'capacity-audit': { outcome: 'pass' }, 'abort-race': { outcome: 'pass' } },
  },
  unreachable: {
    up: false, skipped: 'overlap', shard: '1/2',
    scenarios: {
      'overlimit-handoff': { outcome: 'inconclusive' },
      'capacity-audit': { outcome: 'inconclusive' },
      'abort-race': { outcome: 'inconclusive', stale: true },
    },
  },
};

/**
 * A stand-in for the prober's /metrics built with prom-client on its own Registry. Each scrape first
 * records one more probe cycle, so counters move between scrapes the way a running prober's do.
 */
async function startFixtureExporter(): Promise<{ url: string; hostPort: string; close(): Promise<void> }> {
  const registry = new Registry();
  const runs = new Counter({ name: 'kvcanary_probe_runs_total', help: 'Scenario runs completed', labelNames: ['target', 'scenario', 'outcome'], registers: [registry] });
  const cycles = new Counter({ name: 'kvcanary_probe_cycles_total', help: 'Probe cycles completed', labelNames: ['target', 'outcome'], registers: [registry] });
  const findings = new Counter({ name: 'kvcanary_findings_total', help: 'Findings', labelNames: ['target', 'scenario', 'kind', 'severity'], registers: [registry] });
  const probeDuration = new Histogram({ name: 'kvcanary_probe_duration_seconds', help: 'Scenario wall time', labelNames: ['target', 'scenario'], buckets: [0.5, 1, 2, 5, 10, 30, 60, 120], registers: [registry] });
  const requestDuration = new Histogram({ name: 'kvcanary_request_duration_seconds', help: 'Per request latency', labelNames: ['target', 'role'], buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], registers: [registry] });
  const ttft = new Histogram({ name: 'kvcanary_time_to_first_token_seconds', help: 'Time to first token', labelNames: ['target', 'role'], buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5], registers: [registry] });
  const requests = new Counter({ name: 'kvcanary_requests_total', help: 'Requests by transport class', labelNames: ['target', 'role', 'transport'], registers: [registry] });
  const tokensSent = new Counter({ name: 'kvcanary_tokens_sent_total', help: 'Prompt tokens sent (estimate)', labelNames: ['target', 'scenario'], registers: [registry] });
  const tokensBilled = new Counter({ name: 'kvcanary_tokens_billed_total', help: 'Tokens the endpoint reported in usage', labelNames: ['target', 'scenario'], registers: [registry] });
  const lastRun = new Gauge({ name: 'kvcanary_last_run_timestamp_seconds', help: 'Unix time of the last completed scenario run', labelNames: ['target', 'scenario'], registers: [registry] });
  const lastOutcome = new Gauge({ name: 'kvcanary_last_run_outcome', help: 'Outcome of the last run (state set)', labelNames: ['target', 'scenario', 'outcome'], registers: [registry] });
  const streak = new Gauge({ name: 'kvcanary_inconclusive_streak', help: 'Consecutive inconclusive runs', labelNames: ['target', 'scenario'], registers: [registry] });
  const context = new Gauge({ name: 'kvcanary_target_context_limit_tokens', help: 'Advertised context limit', labelNames: ['target'], registers: [registry] });
  const pool = new Gauge({ name: 'kvcanary_target_pool_capacity_tokens', help: 'KV pool capacity', labelNames: ['target'], registers: [registry] });
  const up = new Gauge({ name: 'kvcanary_target_up', help: 'Whether the last cycle reached the endpoint', labelNames: ['target'], registers: [registry] });
  const skipped = new Counter({ name: 'kvcanary_runs_skipped_total', help: 'Scheduled runs not started', labelNames: ['target', 'reason'], registers: [registry] });
  const budget = new Gauge({ name: 'kvcanary_budget_tokens_remaining', help: 'Tokens left in the hourly budget', labelNames: ['target'], registers: [registry] });
  const interval = new Gauge({ name: 'kvcanary_scenario_interval_seconds', help: 'How often the scenario is due', labelNames: ['target', 'scenario'], registers: [registry] });
  const standing = new Gauge({ name: 'kvcanary_target_verdict', help: 'Target standing (state set)', labelNames: ['target', 'outcome'], registers: [registry] });
  const lastFindings = new Gauge({ name: 'kvcanary_last_run_findings', help: 'Unacknowledged findings in the last run of a scenario', labelNames: ['target', 'scenario', 'kind'], registers: [registry] });
  const open = new Gauge({ name: 'kvcanary_open_findings', help: 'Findings that page', labelNames: ['target', 'scenario', 'kind', 'severity', 'shard', 'source', 'status_page'], registers: [registry] });
  const info = new Gauge({ name: 'kvcanary_target_info', help: 'Always 1 per probed target', labelNames: ['target', 'source', 'shard', 'status_page'], registers: [registry] });

  const spent = new Map<string, number>();
  const streaks = new Map<string, number>();
  function recordCycle(): void {
    const now = Date.now() / 1000;
    for (const [target, t] of Object.entries(FIXTURE)) {
      const place = { shard: t.shard, source: target, ...(t.page === undefined ? {} : { status_page: t.page }) };
      info.set({ target, ...place }, 1);
      up.set({ target }, t.up ? 1 : 0);
      if (t.pool !== undefined) pool.set({ target }, t.pool);
      if (t.context !== undefined) context.set({ target }, t.context);
      if (t.skipped) skipped.inc({ target, reason: t.skipped });
      const outcomes: Outcome[] = [];
      for (const [scenario, s] of Object.entries(t.scenarios)) {
        interval.set({ target, scenario }, s.hourly ? 3600 : 300);
        if (s.hourly) {
          lastRun.set({ target, scenario }, now - 3000);
          for (const o of ['pass', 'fail', 'inconclusive'] as const) lastOutcome.set({ target, scenario, outcome: o }, o === s.outcome ? 1 : 0);
          continue;
        }
        if (s.stale) {
          // Last ran an hour ago, at the start of a long inconclusive streak; nothing since.
          lastRun.set({ target, scenario }, now - 3600);
          streak.set({ target, scenario }, 4);
          for (const o of ['pass', 'fail', 'inconclusive'] as const) lastOutcome.set({ target, scenario, outcome: o }, o === s.outcome ? 1 : 0);
          continue;
        }
        outcomes.push(s.outcome);
        runs.inc({ target, scenario, outcome: s.outcome });
        lastRun.set({ target, scenario }, now);
        for (const o of ['pass', 'fail', 'inconclusive'] as const) lastOutcome.set({ target, scenario, outcome: o }, o === s.outcome ? 1 : 0);
        const key = `${target}/${scenario}`;
        streaks.set(key, s.outcome === 'inconclusive' ? (streaks.get(key) ?? 4) + 1 : 0);
        streak.set({ target, scenario }, streaks.get(key) ?? 0);
        for (const f of s.findings ?? []) findings.inc({ target, scenario, ...f });
        for (const f of s.findings ?? []) lastFindings.set({ target, scenario, kind: f.kind }, 1);
        for (const f of s.findings ?? []) open.set({ target, scenario, ...f, ...place }, 1);
        probeDuration.observe({ target, scenario }, t.up ? 3 + Math.random() * 20 : 30);
        if (t.up) {
          tokensSent.inc({ target, scenario }, 40_000);
          tokensBilled.inc({ target, scenario }, target === 'incident' ? 52_000 : 21_000);
          spent.set(target, (spent.get(target) ?? 0) + 40_000);
        }
      }
      budget.set({ target }, Math.max(0, 2_000_000 - (spent.get(target) ?? 0)));
      const verdict = standingOf(t).outcome;
      for (const o of TARGET_STANDINGS) standing.set({ target, outcome: o.replace('-', '_') }, o === verdict ? 1 : 0);
      cycles.inc({ target, outcome: outcomes.includes('fail') ? 'fail' : outcomes.includes('inconclusive') ? 'inconclusive' : 'pass' });
      if (!t.up) {
        requests.inc({ target, role: 'planter', transport: 'refused' });
        continue;
      }
      for (const role of ['planter', 'reader', 'overlimit']) {
        const rejected = role === 'overlimit' && target !== 'incident';
        requests.inc({ target, role, transport: rejected ? 'http-4xx' : 'ok' });
        requestDuration.observe({ target, role }, rejected ? 0.02 + Math.random() * 0.05 : 0.3 + Math.random() * 2);
        if (!rejected) ttft.observe({ target, role }, 0.05 + Math.random() * 0.4);
      }
    }
  }

  const server: Server = createServer((req, res) => {
    if (req.url !== '/metrics') { res.writeHead(404).end(); return; }
    recordCycle();
    registry.metrics().then(
      (text) => { res.writeHead(200, { 'content-type': registry.contentType }).end(text); },
      (err: unknown) => { res.writeHead(500).end(String(err)); },
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address();
  if (typeof address !== 'object' || address === null) throw new Error('fixture exporter has no address');
  const hostPort = `127.0.0.1:${address.port}`;
  return {
    url: `http://${hostPort}/metrics`,
    hostPort,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

const describeLabels = (s: Sample) => JSON.stringify(s.metric);

describe('end to end: a real Prometheus scraping the agreed metrics', () => {
  let exporter: Awaited<ReturnType<typeof startFixtureExporter>> | undefined;
  let prometheus: PrometheusHandle | undefined;
  const prom = () => {
    if (prometheus === undefined) throw new Error('prometheus did not start');
    return prometheus;
  };

  beforeAll(async () => {
    exporter = await startFixtureExporter();
    prometheus = await startPrometheus({ targets: [exporter.hostPort], ruleFiles: [alertsPath] });
    // rate() and increase() over 1m need at least two samples; four scrapes leave margin for a slow one.
    await prometheus.waitFor('count_over_time(up{job="kvcanary"}[1m])', (s) => (s[0]?.value ?? 0) >= 4);
    await prometheus.waitFor('up{job="kvcanary"}', (s) => s[0]?.value === 1);
  }, 45_000);

  afterAll(async () => {
    await prometheus?.stop();
    await exporter?.close();
  });

  it('serves metrics that `promtool check metrics` finds clean', async () => {
    const text = await (await fetch(exporter?.url ?? '')).text();
    const result = await runPromtool(['check', 'metrics'], { stdin: text });
    expect(result.stdout + result.stderr).toBe('');
    expect(result.code).toBe(0);
    // Every agreed metric is in the text the lint passed, so the lint covered all of them.
    for (const name of Object.keys(AGREED_METRICS)) expect(text).toContain(`# TYPE ${name} `);
  });

  it('returns data for every dashboard query and template variable', async () => {
    const empty: string[] = [];
    for (const query of dashboardQueries(dashboard)) {
      const samples = await prom().query(query.expr);
      if (samples.length === 0 || samples.every((s) => Number.isNaN(s.value))) empty.push(`${query.title} ${query.refId}: ${query.expr}`);
    }
    expect(empty).toEqual([]);
    const targets = await prom().query(dashboardQueries(dashboard).find((q) => q.source === 'variable' && q.title === 'target')?.expr ?? '');
    expect(targets.map((s) => s.metric.target).sort()).toEqual(Object.keys(FIXTURE).sort());
  });

  it('returns data for every alert and recording rule expression, and every rule evaluates cleanly', async () => {
    const empty: string[] = [];
    for (const rule of rules) {
      if ((await prom().query(rule.expr)).length === 0) empty.push(`${rule.name}: ${rule.expr}`);
    }
    expect(empty).toEqual([]);
    const loaded = await prom().waitFor('count(kvcanary:findings:increase15m)', (s) => s.length > 0);
    expect(loaded[0]?.value).toBeGreaterThan(0);
    const states = await prom().rules();
    expect(states.map((r) => r.name).sort()).toEqual(rules.map((r) => r.name).sort());
    for (const rule of states) expect({ rule: rule.name, health: rule.health, lastError: rule.lastError ?? '' }).toEqual({ rule: rule.name, health: 'ok', lastError: '' });
  });

  it('shows each scenario\'s outcome through the panel\'s own value mappings', async () => {
    const panel = panelByTitle('Outcome per target and scenario');
    const expr = dashboardQueries(dashboard).find((q) => q.panelId === panel.id)?.expr ?? '';
    const mappings = valueMappings(panel);
    const shown = Object.fromEntries((await prom().query(expr)).map((s) => [`${s.metric.target}/${s.metric.scenario}`, mappings.get(String(s.value))?.text ?? `unmapped ${s.value}`]));
    const expected = Object.fromEntries(Object.entries(FIXTURE).flatMap(([target, t]) => Object.entries(t.scenarios).map(([scenario, s]) => [`${target}/${scenario}`, s.outcome])));
    expect(shown).toEqual(expected);
  });

  it('lists every replica across shards in the fleet table: its last verdict per scenario, its shard and its page', async () => {
    const panel = panelByTitle("Fleet: every replica's last verdict per scenario");
    expect(panel.type).toBe('table');
    const query = dashboardQueries(dashboard).find((q) => q.panelId === panel.id)!;
    const overrides = (panel.fieldConfig as { overrides: { matcher: { options: string }; properties: { id: string; value: unknown }[] }[] }).overrides;
    const valueMap = new Map<string, ValueMapping>();
    for (const m of (overrides.find((o) => o.matcher.options === 'Value')?.properties.find((p) => p.id === 'mappings')?.value ?? []) as { type: string; options: Record<string, ValueMapping> }[]) {
      for (const [v, r] of Object.entries(m.options)) valueMap.set(v, r);
    }
    const link = overrides.find((o) => o.matcher.options === 'status_page')?.properties.find((p) => p.id === 'links')?.value as { url: string }[];
    expect(link[0]?.url).toBe('${__value.raw}');
    const rows = (await prom().query(query.expr)).map((s) => ({
      target: s.metric.target, scenario: s.metric.scenario, shard: s.metric.shard, page: s.metric.status_page, verdict: valueMap.get(String(s.value))?.text,
    }));
    const expected = Object.entries(FIXTURE).flatMap(([target, t]) => Object.entries(t.scenarios).map(([scenario, sc]) => ({
      target, scenario, shard: t.shard, page: t.page, verdict: sc.outcome,
    })));
    const key = (r: { target?: string; scenario?: string }): string => `${r.target}/${r.scenario}`;
    expect(rows.sort((a, b) => key(a).localeCompare(key(b)))).toEqual(expected.sort((a, b) => key(a).localeCompare(key(b))));
    expect(new Set(rows.map((r) => r.shard))).toEqual(new Set(['0/2', '1/2']));
  });

  it('shows each target\'s standing through the standing panel\'s own value mappings, only pass in green', async () => {
    const panel = panelByTitle('Target standing');
    const mappings = valueMappings(panel);
    const byText = new Map([...mappings.values()].map((m) => [m.text, m.color]));
    expect(byText.get('pass')).toBe('green');
    for (const text of ['partial', 'inconclusive', 'fail', 'not applicable', 'no run yet']) expect(isGreenish(byText.get(text)), text).toBe(false);
    const expr = dashboardQueries(dashboard).find((q) => q.panelId === panel.id)?.expr ?? '';
    const shown = Object.fromEntries((await prom().query(expr)).map((s) => [s.metric.target, mappings.get(String(s.value))?.text ?? `unmapped ${s.value}`]));
    const expected = Object.fromEntries(Object.entries(FIXTURE).map(([target, t]) => [target, standingOf(t).outcome]));
    expect(shown).toEqual(expected);
    expect(new Set(Object.values(shown))).toEqual(new Set(['fail', 'pass', 'inconclusive']));
  });

  it('raises each alert for the target that earns it and for no other', async () => {
    // Zero-`for` alerts fire; the rest are pending until their `for` elapses. Either way the labels say who.
    const active = await prom().waitFor('ALERTS{alertname="KvcanaryCrossRequestLeak", alertstate="firing"}', (s) => s.length > 0);
    // The finding alert carries the series' own labels: shard, source, the status page, and Prometheus's job and instance.
    expect(active.map(describeLabels)).toEqual([JSON.stringify({
      __name__: 'ALERTS', alertname: 'KvcanaryCrossRequestLeak', alertstate: 'firing', instance: exporter?.hostPort, job: 'kvcanary', kind: 'cross-request-leak',
      scenario: 'overlimit-handoff', severity: 'critical', shard: '0/2', source: 'incident', status_page: FIXTURE.incident!.page, target: 'incident',
    })]);
    const all = await prom().waitFor('ALERTS', (s) => new Set(s.map((a) => a.metric.alertname)).size >= 7);
    const who = (alertname: string) => [...new Set(all.filter((a) => a.metric.alertname === alertname).map((a) => `${a.metric.target}/${a.metric.scenario ?? ''}/${a.metric.alertstate}`))].sort();
    expect(who('KvcanaryCrossRequestLeak')).toEqual(['incident/overlimit-handoff/firing']);
    expect(who('KvcanaryRejectionNotEnforced')).toEqual(['incident/overlimit-handoff/firing']);
    expect(who('KvcanaryPrefixTimingSideChannel')).toEqual(['incident/prefix-isolation/firing']);
    expect(who('KvcanaryPoolBelowContext')).toEqual(['incident/capacity-audit/pending']);
    // The others take shard and status page from kvcanary_target_info.
    const down = all.filter((a) => a.metric.alertname === 'KvcanaryTargetDown');
    expect(down.map((a) => [a.metric.target, a.metric.shard, a.metric.status_page])).toEqual([['unreachable', '1/2', undefined]]);
    const inconclusive = all.filter((a) => a.metric.alertname === 'KvcanaryProbesInconclusive');
    expect(new Set(inconclusive.map((a) => a.metric.shard))).toEqual(new Set(['1/2']));
    expect(who('KvcanaryProbesInconclusive')).toEqual(['unreachable/abort-race/pending', 'unreachable/capacity-audit/pending', 'unreachable/overlimit-handoff/pending']);
    expect(who('KvcanaryProbesStale')).toEqual(['unreachable/abort-race/pending']);
    expect(who('KvcanaryTargetDown')).toEqual(['unreachable//pending']);
  });
});
