import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Registry } from 'prom-client';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../prober/src/service/config.js';
import { makeFinding } from '../../prober/src/probe/findings.js';
import { createLogger } from '../../prober/src/service/logger.js';
import { createMetrics, initTargetMetrics } from '../../prober/src/service/metrics.js';
import type { ProbeFn } from '../../prober/src/probe/probe-fn.js';
import type { ProbeRun, ScenarioResult } from '../../prober/src/probe/result.js';
import { startServiceServer, type HealthReport, type ServiceServer } from '../../prober/src/service/server.js';
import { createService, type Service } from '../../prober/src/service/service.js';
import { openStore, type Store } from '../../prober/src/service/store.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-service-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const KNOWN = ['overlimit-handoff', 'abort-race', 'capacity-audit'];
const XSS = '<script>alert("pwned")</script><img src=x onerror=alert(1)>';

function scen(name: string, outcome: ScenarioResult['outcome'], extra: Partial<ScenarioResult> = {}): ScenarioResult {
  return { name, outcome, findings: [], requests: [], notes: [], tokens: { sent: 5, billed: 5 }, durationMs: 10, ...extra };
}

function probeRun(runId: string, target: string, at: string, scenarios: ScenarioResult[]): ProbeRun {
  return {
    runId, target, baseUrl: `http://${target}:8000`, model: 'glm', startedAt: at, finishedAt: at,
    outcome: scenarios.some((s) => s.outcome === 'fail') ? 'fail' : scenarios.every((s) => s.outcome === 'pass') ? 'pass' : 'inconclusive',
    scenarios, capacity: { contextTokens: 1_048_576, poolTokens: 681_280 }, up: true,
  };
}

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

describe('status server', () => {
  async function serve(health?: () => HealthReport): Promise<{ server: ServiceServer; store: Store; registry: Registry }> {
    const store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
    const registry = new Registry();
    const metrics = createMetrics(registry);
    initTargetMetrics(metrics, 'incident', KNOWN);
    const now = Date.parse('2026-01-01T01:00:00Z');
    store.recordRun(probeRun('r1', 'incident', '2026-01-01T00:50:00Z', [
      scen('overlimit-handoff', 'fail', { findings: [makeFinding('cross-request-leak', 'overlimit-handoff', { match: 'kvcanary-abc', excerpt: `before ${XSS} after` }, 1e-25)] }),
      scen('abort-race', 'inconclusive', { notes: ['5xx from target: <b>bold</b>'] }),
      scen('capacity-audit', 'pass'),
    ]));
    store.recordRun(probeRun('r0', 'old-target', '2026-01-01T00:10:00Z', [scen('capacity-audit', 'pass')]));
    const server = await startServiceServer({
      port: 0, registry, store, now: () => now,
      targets: () => [{ name: 'incident', baseUrl: 'http://incident:8000', scenarios: KNOWN }, { name: 'fresh', baseUrl: 'http://fresh', scenarios: ['abort-race'] }],
      ...(health === undefined ? {} : { health }),
    });
    closers.push(() => store.close(), () => server.close());
    return { server, store, registry };
  }

  it('listens on 127.0.0.1 with the real port in its url, and closes', async () => {
    const { server } = await serve();
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    expect(server.url).not.toMatch(/:0\/$/);
    await server.close();
    await expect(fetch(server.url)).rejects.toThrow();
  });

  it('serves Prometheus metrics', async () => {
    const { server } = await serve();
    const res = await fetch(`${server.url}metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(await res.text()).toContain('kvcanary_probe_runs_total{target="incident",scenario="abort-race",outcome="pass"} 0');
  });

  it('healthz reports loop states, and 503 while stopping', async () => {
    let status: HealthReport['status'] = 'ok';
    const { server } = await serve(() => ({ status, loops: [{ target: 'incident', state: 'idle', abandoned: 0, lastOutcome: 'fail' }] }));
    let res = await fetch(`${server.url}healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok', loops: [{ target: 'incident', state: 'idle', abandoned: 0, lastOutcome: 'fail' }] });
    status = 'stopping';
    res = await fetch(`${server.url}healthz`);
    expect(res.status).toBe(503);
  });

  it('renders a status page: outcome per scenario, inconclusive never green, escaped bounded evidence', async () => {
    const { server } = await serve();
    const res = await fetch(server.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'/);
    const html = await res.text();
    const section = (name: string): string => html.slice(html.indexOf(`<h2>${name} `), html.indexOf('</section>', html.indexOf(`<h2>${name} `)));
    const incident = section('incident');
    const row = (scenario: string): string => incident.slice(incident.indexOf(`<td>${scenario}</td>`), incident.indexOf('</tr>', incident.indexOf(`<td>${scenario}</td>`)));
    expect(row('overlimit-handoff')).toContain('class="badge fail"');
    expect(row('capacity-audit')).toContain('class="badge pass"');
    const inconclusive = row('abort-race');
    expect(inconclusive).toContain('class="badge inconclusive"');
    expect(inconclusive).toContain('INCONCLUSIVE');
    expect(inconclusive).not.toContain('badge pass');
    expect(inconclusive).not.toContain('PASS');
    expect(inconclusive).toContain('1 in a row');
    expect(inconclusive).toContain('5xx from target: &lt;b&gt;bold&lt;/b&gt;');
    expect(incident).toContain('POOL BELOW CONTEXT');
    expect(section('fresh')).toContain('NO RUN YET');
    expect(section('old-target')).toContain('no longer configured');
    // The .pass colour is green and is used by nothing but PASS badges.
    expect(html).toMatch(/\.pass\{background:#1a7f37\}/);
    expect(html).toMatch(/\.inconclusive\{background:#bf8700\}/);

    expect(html).not.toContain('<script');
    expect(html).not.toContain('<img');
    expect(html).toContain('&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;');
    expect(html).toContain('cross-request-leak');
  });

  it('serves runs and findings as JSON with since, target and limit filters', async () => {
    const { server } = await serve();
    const runs = await (await fetch(`${server.url}api/runs`)).json() as { runs: { runId: string; scenarios: unknown[] }[] };
    expect(runs.runs.map((r) => r.runId)).toEqual(['r1', 'r0']);
    expect(runs.runs[0]!.scenarios).toHaveLength(3);
    const one = await (await fetch(`${server.url}api/runs?target=old-target&limit=1`)).json() as { runs: { runId: string }[] };
    expect(one.runs.map((r) => r.runId)).toEqual(['r0']);
    const recent = await (await fetch(`${server.url}api/runs?since=30m`)).json() as { runs: { runId: string }[] };
    expect(recent.runs.map((r) => r.runId)).toEqual(['r1']);
    const iso = await (await fetch(`${server.url}api/runs?since=2026-01-01T00:20:00Z`)).json() as { runs: { runId: string }[] };
    expect(iso.runs.map((r) => r.runId)).toEqual(['r1']);
    const findings = await (await fetch(`${server.url}api/findings?since=1h`)).json() as { findings: { kind: string; evidence: { excerpt: string } }[] };
    expect(findings.findings).toEqual([expect.objectContaining({ kind: 'cross-request-leak', target: 'incident', severity: 'critical' })]);

    const bad = await fetch(`${server.url}api/runs?limit=lots`);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ error: 'limit: expected an integer 1-1000, got "lots"' });
    expect((await fetch(`${server.url}api/findings?since=yesterday`)).status).toBe(400);
  });

  it('answers 404 for unknown paths and 405 for other methods', async () => {
    const { server } = await serve();
    expect((await fetch(`${server.url}nope`)).status).toBe(404);
    const post = await fetch(`${server.url}api/runs`, { method: 'POST', body: '{}' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
  });
});

describe('createService', () => {
  const KEY = 'sk-service-test-key-0123456789abcdef';
  const env = { SVC_KEY: KEY };
  const yaml = (storePath: string, extra = ''): string => `
listen: 127.0.0.1:0
store: { path: ${JSON.stringify(storePath)} }
log: { level: debug }
schedule: { interval: 1h, timeout: 1m, jitter: 0s }
scenarios: [overlimit-handoff, capacity-audit]
targets:
  - { name: incident, base_url: "http://127.0.0.1:9", api_key_env: SVC_KEY }
${extra}`;

  function quietLogger(): { logger: ReturnType<typeof createLogger>; text: () => string } {
    const chunks: string[] = [];
    const logger = createLogger({ level: 'debug', secrets: [KEY], destination: new Writable({ write(c: Buffer, _e, cb) { chunks.push(c.toString()); cb(); } }) });
    return { logger, text: () => chunks.join('') };
  }

  const probe: ProbeFn = async (req) => ({
    runId: req.runId, target: req.target.name, baseUrl: req.target.baseUrl, model: 'glm-test', startedAt: new Date().toISOString(),
    finishedAt: new Date().toISOString(), outcome: 'fail', up: true, capacity: { contextTokens: 4096, poolTokens: 1024 },
    scenarios: req.scenarios.map((name) => scen(name, name === 'overlimit-handoff' ? 'fail' : 'pass', {
      findings: name === 'overlimit-handoff'
        ? [makeFinding('rejection-not-enforced', name, { excerpt: `echoed header Authorization: Bearer ${KEY}`, facts: { status: 200 } })] : [],
      notes: [`used key ${KEY}`],
    })),
  });

  it('assembles store, metrics, scheduler and server; runs, records, serves, and stops cleanly', async () => {
    const storePath = path.join(dir, 'svc1', 'kvcanary.sqlite');
    const config = parseConfig(yaml(storePath), { knownScenarios: KNOWN, env });
    const seen: ProbeRun[] = [];
    const log = quietLogger();
    const svc: Service = await createService({ config, probe, env, logger: log.logger, onRun: (r) => { seen.push(r); } });
    let stopped = false;
    closers.push(async () => { if (!stopped) await svc.stop(); });
    expect(svc.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);

    await vi.waitFor(() => expect(seen).toHaveLength(1));
    const runs = await (await fetch(`${svc.url}api/runs`)).json() as { runs: { outcome: string }[] };
    expect(runs.runs.map((r) => r.outcome)).toEqual(['fail']);
    const metrics = await (await fetch(`${svc.url}metrics`)).text();
    expect(metrics).toContain('kvcanary_findings_total{target="incident",scenario="overlimit-handoff",kind="rejection-not-enforced",severity="high"} 1');
    expect(metrics).toContain('kvcanary_target_pool_capacity_tokens{target="incident"} 1024');
    const health = await (await fetch(`${svc.url}healthz`)).json() as HealthReport;
    expect(health.loops).toEqual([expect.objectContaining({ target: 'incident', state: 'idle', lastOutcome: 'fail' })]);

    // The key the probe saw in a response is nowhere in what the service exposes or logs.
    const everything = [
      metrics, await (await fetch(`${svc.url}api/findings`)).text(), await (await fetch(`${svc.url}api/runs`)).text(),
      await (await fetch(svc.url)).text(), log.text(),
    ].join('\n');
    expect(everything).not.toContain(KEY);
    expect(everything).toContain('[redacted]');

    await svc.stop();
    stopped = true;
    await expect(fetch(svc.url)).rejects.toThrow();
    expect(statSync(storePath).mode & 0o777).toBe(0o600);
    expect(log.text()).toContain('kvcanary service stopped');
  });

  it('hands a probe factory the store, so the probe can persist and reload plantings', async () => {
    const storePath = path.join(dir, 'svc4', 'kvcanary.sqlite');
    const config = parseConfig(yaml(storePath), { knownScenarios: KNOWN, env });
    const seen: ProbeRun[] = [];
    const svc = await createService({
      config, env, logger: quietLogger().logger, onRun: (r) => { seen.push(r); },
      createProbe: ({ store }) => async (req) => {
        const requestNo = req.scenarios[0] === 'capacity-audit' ? '00000000000000c1' : '00000000000000c2';
        store.recordPlantings([{ requestNo, runId: req.runId, requestId: `q-${req.scenarios[0]!}`, role: 'planter', tenant: 'default', plantedAt: new Date().toISOString(), markerCount: 3 }]);
        return probe(req);
      },
    });
    closers.push(() => svc.stop());
    await vi.waitFor(() => expect(seen).toHaveLength(1));
    expect(svc.store.loadPlantings(0).map((m) => `${m.requestId} ${m.runId}`).sort()).toEqual([
      `q-capacity-audit ${seen[0]!.runId}`, `q-overlimit-handoff ${seen[0]!.runId}`,
    ]);
  });

  it('restores last-run gauges from the store on restart, and reload adds targets', async () => {
    const storePath = path.join(dir, 'svc2', 'kvcanary.sqlite');
    const store = openStore({ path: storePath, retentionMs: 86_400_000 });
    store.recordRun(probeRun('earlier', 'incident', '2026-01-01T00:00:00Z', [scen('overlimit-handoff', 'inconclusive'), scen('capacity-audit', 'pass')]));
    store.recordRun(probeRun('earlier2', 'incident', '2026-01-01T00:05:00Z', [scen('overlimit-handoff', 'inconclusive')]));
    store.close();
    // A first run far away: only restored state can show up.
    const config = parseConfig(yaml(storePath).replace('jitter: 0s', 'jitter: 59m'), { knownScenarios: KNOWN, env });
    const svc = await createService({ config, probe, env, logger: quietLogger().logger, random: () => 0.99 });
    closers.push(() => svc.stop());
    const metrics = await (await fetch(`${svc.url}metrics`)).text();
    expect(metrics).toContain(`kvcanary_last_run_timestamp_seconds{target="incident",scenario="overlimit-handoff"} ${Date.parse('2026-01-01T00:05:00Z') / 1000}`);
    expect(metrics).toContain('kvcanary_inconclusive_streak{target="incident",scenario="overlimit-handoff"} 2');
    expect(metrics).toContain('kvcanary_last_run_outcome{target="incident",scenario="capacity-audit",outcome="pass"} 1');
    expect(metrics).toContain('kvcanary_target_up{target="incident"} 1');

    svc.reload(parseConfig(yaml(storePath, '  - { name: second, base_url: "http://127.0.0.1:10", schedule: { interval: 10m, jitter: 5m } }').replace('jitter: 0s', 'jitter: 59m'), { knownScenarios: KNOWN, env }));
    const health = await (await fetch(`${svc.url}healthz`)).json() as HealthReport;
    expect(health.loops.map((l) => l.target)).toEqual(['incident', 'second']);
    // How often each scenario is due, for the staleness alert: the default hourly tier of overlimit-handoff, the cycle for the audit.
    const intervals = await (await fetch(`${svc.url}metrics`)).text();
    expect(intervals).toContain('kvcanary_scenario_interval_seconds{target="second",scenario="overlimit-handoff"} 21600');
    expect(intervals).toContain('kvcanary_scenario_interval_seconds{target="second",scenario="capacity-audit"} 600');
    expect(await (await fetch(`${svc.url}metrics`)).text()).toContain('kvcanary_probe_runs_total{target="second",scenario="capacity-audit",outcome="pass"} 0');
  });

  it('fails clearly when the port is taken, and leaves the store closed', async () => {
    const first = await createService({ config: parseConfig(yaml(path.join(dir, 'svc3', 'a.sqlite')), { knownScenarios: KNOWN, env }), probe, env, logger: quietLogger().logger, random: () => 0.99 });
    closers.push(() => first.stop());
    const port = Number(new URL(first.url).port);
    const config = parseConfig(yaml(path.join(dir, 'svc3', 'b.sqlite')).replace('127.0.0.1:0', `127.0.0.1:${port}`), { knownScenarios: KNOWN, env });
    await expect(createService({ config, probe, env, logger: quietLogger().logger })).rejects.toThrow(/EADDRINUSE/);
  });
});
