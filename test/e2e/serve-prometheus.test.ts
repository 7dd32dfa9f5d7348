/**
 * End to end: `kvcanary serve` (a child process, as an operator runs it) probes two bundled engines — the
 * incident preset and the remediated one — while a real Prometheus (Debian's package, on a free loopback
 * port) scrapes it. Every dashboard panel query and every alert expression must return data, /metrics must
 * pass `promtool check metrics`, findings must be printed for the incident engine only, and SIGTERM must
 * drain and exit 0.
 */
import { scratchHome } from '../helpers/cli.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';
import { dashboardQueries, metricNames, ruleQueries } from '../helpers/dashboard-queries.js';
import { BIN, runCli } from '../helpers/cli.js';
import { runPromtool, startPrometheus, type PrometheusHandle } from '../helpers/prometheus.js';

const DASHBOARD = JSON.parse(readFileSync(new URL('../../dashboards/kvcanary.json', import.meta.url), 'utf8')) as unknown;
const RULES_PATH = new URL('../../dashboards/alerts.yaml', import.meta.url).pathname;

describe('serve + real Prometheus + dashboards + alerts', () => {
  let engines: RunningEngine[] = [];
  let serve: ChildProcess;
  let serveUrl = '';
  let stdout = '';
  let prom: PrometheusHandle;
  let dir = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvcanary-e2e-'));
    engines = [await startEngine({ preset: 'incident', scale: 64 }), await startEngine({ preset: 'remediated', scale: 64 })];
    const config = join(dir, 'kvcanary.yaml');
    writeFileSync(
      config,
      `store: { path: ${join(dir, 'evidence.sqlite')}, retention: 1d }
external_url: https://kvcanary.example.com/
log: { level: warn }
schedule: { interval: 6s, timeout: 5s, jitter: 500ms, scenarios: every_cycle }
concurrency: { global: 2, per_target: 1 }
targets:
  - name: incident
    base_url: ${engines[0]!.url}
  - name: remediated
    base_url: ${engines[1]!.url}/v1
`,
    );
    serve = spawn(process.execPath, [BIN, 'serve', '--config', config, '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KVCANARY_HOME: scratchHome() } });
    serve.stderr!.resume();
    serveUrl = await new Promise<string>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`serve printed no URL: ${stdout}`)), 20_000);
      serve.stdout!.on('data', (c: Buffer) => {
        stdout += c.toString();
        const m = /^.*?(http:\/\/127\.0\.0\.1:\d+\/)/.exec(stdout.split('\n')[0] ?? '');
        if (m !== null && stdout.includes('\n')) {
          clearTimeout(t);
          resolve(m[1]!);
        }
      });
    });
    prom = await startPrometheus({ targets: [new URL(serveUrl).host], ruleFiles: [RULES_PATH] });
  }, 60_000);

  afterAll(async () => {
    await prom?.stop();
    if (serve !== undefined && serve.exitCode === null) serve.kill('SIGKILL');
    await Promise.all(engines.map((e) => e.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('scrapes every scenario of both targets, and every panel and alert expression has data', async () => {
    // Both targets, all three scenarios, at least one completed run each.
    await prom.waitFor('count(kvcanary_last_run_timestamp_seconds)', (s) => (s[0]?.value ?? 0) >= 6, { timeoutMs: 60_000 });
    await prom.waitFor('kvcanary_findings_total{target="incident"}', (s) => s.some((x) => x.value > 0), { timeoutMs: 30_000 });

    // rate() and histogram_quantile() need two samples in their window, and recording rules a few
    // evaluations: give each expression time to fill rather than asking once.
    const hasData = async (expr: string): Promise<boolean> =>
      prom.waitFor(expr, (s) => s.length > 0, { timeoutMs: 30_000, intervalMs: 500 }).then(() => true, () => false);
    const empty: string[] = [];
    for (const q of dashboardQueries(DASHBOARD)) {
      if (!(await hasData(q.expr))) empty.push(`panel "${q.title}" ${q.refId}: ${q.expr}`);
    }
    const rules = ruleQueries(parseYaml(readFileSync(RULES_PATH, 'utf8')));
    for (const r of rules) {
      for (const name of metricNames(r.expr)) {
        if (!(await hasData(`count(${name})`))) empty.push(`rule ${r.name}: no data for ${name}`);
      }
    }
    expect(empty).toEqual([]);
    // The leak alert fires for the incident engine (once the rules have evaluated the finding) and never for
    // the remediated one.
    await prom.waitFor('ALERTS{alertstate="firing", target="incident"}', (s) => s.length > 0, { timeoutMs: 60_000, intervalMs: 500 });
    const firing = (await prom.rules()).flatMap((r) => r.alerts.map((a) => ({ rule: r.name, target: a.labels['target'], page: a.labels['status_page'], shard: a.labels['shard'] })));
    expect(firing.find((a) => a.rule === 'KvcanaryCrossRequestLeak' && a.target === 'incident')).toMatchObject({ page: 'https://kvcanary.example.com/#target-incident', shard: '0/1' });
    expect(firing.some((a) => a.target === 'incident')).toBe(true);
    expect(firing.filter((a) => a.target === 'remediated' && /Leak|Rejection/.test(a.rule))).toEqual([]);
  }, 240_000);

  it('serves metrics that promtool accepts, and prints findings for the incident engine only', async () => {
    const text = await (await fetch(`${serveUrl}metrics`)).text();
    const check = await runPromtool(['check', 'metrics'], { stdin: text });
    // Every series, prom-client's defaults too: its gauges named *_total are not registered (build-info.ts).
    const problems = (check.stdout + check.stderr).split('\n').filter((l) => l.trim() !== '');
    expect(problems).toEqual([]);
    expect(check.code).toBe(0);
    expect(text).toMatch(/^kvcanary_open_findings\{/m);
    expect(text).toMatch(/^nodejs_active_handles\{/m);
    const findingLines = stdout.split('\n').filter((l) => l.startsWith('FINDING'));
    expect(findingLines.some((l) => l.includes('target=incident'))).toBe(true);
    expect(findingLines.filter((l) => l.includes('target=remediated'))).toEqual([]);
  });

  it('drains and exits 0 on SIGTERM', async () => {
    const code = await new Promise<number | null>((resolve) => {
      serve.once('exit', (c) => resolve(c));
      serve.kill('SIGTERM');
    });
    expect(code).toBe(0);
  }, 30_000);

  it('keeps the evidence: `kvcanary report` lists the incident findings, bounded and without keys', async () => {
    const r = await runCli(['report', '--store', join(dir, 'evidence.sqlite'), '--json']);
    expect(r.code).toBe(1);
    const doc = JSON.parse(r.stdout) as { runs: Array<{ target: string; outcome: string }>; findings: Array<{ target: string; kind: string; evidence: { excerpt?: string } }> };
    expect(doc.runs.some((x) => x.target === 'remediated')).toBe(true);
    expect(doc.findings.some((f) => f.target === 'incident' && f.kind === 'cross-request-leak')).toBe(true);
    expect(doc.findings.filter((f) => f.target === 'remediated')).toEqual([]);
    for (const f of doc.findings) expect((f.evidence.excerpt ?? '').length).toBeLessThanOrEqual(400);
  }, 30_000);
});
