/**
 * End to end, fleet mode: three `kvcanary serve --shard i/3` processes over one file_sd list naming the
 * bundled incident engine and two remediated (clean) engines, each a `kvcanary engine` process; one real
 * Prometheus scraping all three shards with alerts.yaml and fleet-alerts.yaml; one real Alertmanager
 * (Debian's prometheus-alertmanager) running dashboards/alertmanager.yaml with its webhook pointed at a
 * receiver in this test.
 *
 * What an operator relies on: the shards' /api/targets together list every address exactly once; the leak
 * on the incident engine arrives as ONE notification naming that replica, its shard, its discovery labels and
 * its shard's status page; nothing arrives for the clean ones; `kvcanary ack` resolves the alert at the next
 * rule evaluation after the next scrape, and Alertmanager sends the resolved notification; an address removed
 * from the list stops being probed without a restart.
 */
import { scratchHome } from '../helpers/cli.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parse as parseYaml, stringify } from 'yaml';
import { BIN, runCli } from '../helpers/cli.js';
import { startPrometheus, type PrometheusHandle } from '../helpers/prometheus.js';
import { startAlertmanager, type AlertmanagerHandle } from '../helpers/alertmanager.js';

const DASHBOARDS = new URL('../../dashboards/', import.meta.url).pathname;

interface Notification {
  status: string;
  groupLabels: Record<string, string>;
  alerts: { status: string; labels: Record<string, string> }[];
}

/** Spawns `node bin/kvcanary.js ARGS` and resolves with the first http URL it prints on stdout. */
function spawnWithUrl(args: string[], procs: ChildProcess[]): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KVCANARY_HOME: scratchHome() } });
  procs.push(child);
  let err = '';
  child.stderr!.on('data', (c: Buffer) => { err = (err + c.toString()).slice(-4000); });
  return new Promise((resolve, reject) => {
    let out = '';
    const t = setTimeout(() => reject(new Error(`kvcanary ${args.join(' ')} printed no URL:\n${out}\n${err}`)), 90_000);
    child.stdout!.on('data', (c: Buffer) => {
      out += c.toString();
      const m = /(http:\/\/127\.0\.0\.1:\d+)[/\s]/.exec(out);
      if (m !== null) { clearTimeout(t); resolve({ child, url: m[1]! }); }
    });
    child.once('exit', (code) => { clearTimeout(t); reject(new Error(`kvcanary ${args.join(' ')} exited ${code}:\n${err}`)); });
  });
}

describe('fleet: three shards, file_sd, Prometheus and Alertmanager', () => {
  const procs: ChildProcess[] = [];
  const notifications: Notification[] = [];
  let dir = '';
  let sdPath = '';
  let engines: { name: string; hostPort: string }[] = [];
  let shards: string[] = [];
  let receiver: Server;
  let prom: PrometheusHandle | undefined;
  let am: AlertmanagerHandle | undefined;
  let config = '';

  const writeSd = (hostPorts: string[]): void => {
    writeFileSync(`${sdPath}.tmp`, JSON.stringify([{ targets: hostPorts, labels: { deployment: 'glm' } }]));
    renameSync(`${sdPath}.tmp`, sdPath);
  };
  const apiTargets = async (): Promise<{ name: string; shard: string; lastOutcome: string | null }[][]> =>
    Promise.all(shards.map(async (u) => (await (await fetch(`${u}/api/targets`)).json()) as { name: string; shard: string; lastOutcome: string | null }[]));

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvcanary-fleet-e2e-'));
    sdPath = join(dir, 'replicas.json');

    receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => { body += c.toString(); });
      req.on('end', () => { notifications.push(JSON.parse(body) as Notification); res.end('ok'); });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;

    // The example config as shipped, with its receivers pointed here and group_wait shortened for the test.
    const amConfig = parseYaml(readFileSync(join(DASHBOARDS, 'alertmanager.yaml'), 'utf8')) as {
      route: { group_wait: string; group_interval: string }; receivers: { webhook_configs: { url: string }[] }[];
    };
    amConfig.route.group_wait = '1s';
    // Resolved notifications go out at the group's next flush: 5m in the example, 1s here.
    amConfig.route.group_interval = '1s';
    for (const r of amConfig.receivers) for (const w of r.webhook_configs) w.url = hook;
    am = await startAlertmanager(stringify(amConfig));

    const started = await Promise.all([
      spawnWithUrl(['engine', '--preset', 'incident', '--scale', '64', '--port', '0'], procs),
      spawnWithUrl(['engine', '--preset', 'remediated', '--scale', '64', '--port', '0'], procs),
      spawnWithUrl(['engine', '--preset', 'remediated', '--scale', '64', '--port', '0'], procs),
    ]);
    engines = started.map((e, i) => ({ name: i === 0 ? 'incident' : `clean-${i}`, hostPort: new URL(e.url).host }));
    writeSd(engines.map((e) => e.hostPort));

    config = join(dir, 'kvcanary.yaml');
    writeFileSync(config, `listen: 127.0.0.1:0
external_url: http://kvcanary-{shard}.test:9464/
store:
  path: ${join(dir, 'shard-{shard}.sqlite')}
  retention: 1d
log: { level: warn }
schedule: { interval: 5s, timeout: 4s, jitter: 500ms, scenarios: every_cycle }
concurrency: { global: 2, per_target: 1 }
scenarios: [overlimit-handoff]
targets:
  - name: glm
    discover: { file_sd: ${sdPath}, refresh: 2s }
`);
    // One installation: every shard shares the marker key in the test's KVCANARY_HOME (as the Secret gives it in k8s).
    shards = (await Promise.all([0, 1, 2].map((i) => spawnWithUrl(['serve', '--config', config, '--shard', `${i}/3`], procs)))).map((s) => s.url);
    prom = await startPrometheus({
      targets: shards.map((u) => new URL(u).host),
      ruleFiles: [join(DASHBOARDS, 'alerts.yaml'), join(DASHBOARDS, 'fleet-alerts.yaml')],
      alertmanagers: [am.hostPort],
    });
  }, 240_000);

  afterAll(async () => {
    await prom?.stop();
    await am?.stop();
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGTERM');
    await new Promise<void>((r) => receiver?.close(() => r()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('splits the file_sd list across the shards: every address exactly once', async () => {
    const lists = await apiTargets();
    const names = lists.flat().map((t) => t.name).sort();
    expect(names).toEqual(engines.map((e) => `glm/${e.hostPort}`).sort());
    lists.forEach((l, i) => { for (const t of l) expect(t.shard).toBe(`${i}/3`); });
  });

  it('delivers the incident replica\'s leak as one notification naming it, and nothing for the clean replicas', async () => {
    const incident = `glm/${engines[0]!.hostPort}`;
    const isLeak = (n: Notification): boolean => n.alerts.some((a) => a.labels.alertname === 'KvcanaryCrossRequestLeak');
    await vi.waitFor(() => expect(notifications.some(isLeak)).toBe(true), { timeout: 90_000, interval: 500 });
    // Let every shard finish more cycles and Prometheus re-evaluate and re-send: still one leak notification.
    const clean = engines.slice(1).map((e) => `glm/${e.hostPort}`);
    await vi.waitFor(async () => {
      const l = (await apiTargets()).flat();
      expect(l.filter((t) => clean.includes(t.name)).every((t) => t.lastOutcome !== null)).toBe(true);
    }, { timeout: 30_000, interval: 500 });
    await new Promise((r) => setTimeout(r, 8000));

    const leaks = notifications.filter(isLeak);
    expect(leaks).toHaveLength(1);
    expect(leaks[0]!.groupLabels).toMatchObject({ target: incident, kind: 'cross-request-leak' });
    for (const a of leaks[0]!.alerts) expect(a.labels.target).toBe(incident);
    const aboutClean = notifications.flatMap((n) => n.alerts).filter((a) => clean.includes(a.labels.target ?? ''));
    expect(aboutClean).toEqual([]);
    // Prometheus saw the replica's discovered label through the info metric, not on the finding series.
    const info = await prom!.query(`kvcanary_target_info{target="${incident}"}`);
    expect(info.map((s) => s.metric.deployment)).toEqual(['glm']);
    // The alert carries the shard, the discovery labels and the shard's status page, anchored at the replica.
    const owner = info[0]!.metric.shard!;
    const index = owner.split('/')[0]!;
    for (const a of leaks[0]!.alerts) {
      expect(a.labels).toMatchObject({ shard: owner, source: 'glm', deployment: 'glm', status_page: `http://kvcanary-${index}.test:9464/#target-${encodeURIComponent(incident)}` });
    }
  }, 150_000);

  it('resolves the leak alert at the next evaluation after `kvcanary ack`, and Alertmanager sends the resolution', async () => {
    const incident = `glm/${engines[0]!.hostPort}`;
    const firing = `ALERTS{alertname="KvcanaryCrossRequestLeak", alertstate="firing", target="${incident}"}`;
    await prom!.waitFor(firing, (s) => s.length > 0, { timeoutMs: 30_000 });
    const ackedAt = Date.now();
    const ack = await runCli(['ack', '--config', config, '--target', incident, '--kind', 'cross-request-leak', '--expires', '1h', '--reason', 'drained for INC-42'], { env: { KVCANARY_HOME: dir } });
    expect(ack.code, ack.stderr).toBe(0);
    const stored = Date.now();
    // Scrape and evaluation every second here: the next scrape reads 0, the next evaluation resolves.
    await prom!.waitFor(firing, (s) => s.length === 0, { timeoutMs: 30_000, intervalMs: 200 });
    const resolvedMs = Date.now() - stored;
    const summary = (): string => JSON.stringify(notifications.map((n) => ({ status: n.status, alerts: n.alerts.map((a) => `${a.labels.alertname} ${a.labels.target} ${a.labels.scenario ?? ''} ${a.status}`) })));
    await vi.waitFor(() => expect(notifications.some((n) => n.alerts.some((a) => a.labels.alertname === 'KvcanaryCrossRequestLeak' && a.status === 'resolved')), summary()).toBe(true), { timeout: 45_000, interval: 250 });
    process.stdout.write(`kvcanary ack took ${stored - ackedAt} ms; KvcanaryCrossRequestLeak resolved in Prometheus ${resolvedMs} ms after it returned (1 s scrape and evaluation intervals)\n`);
    // A few scrape and evaluation intervals on a loaded machine; a 15-minute counter window would be 900 s.
    expect(resolvedMs).toBeLessThan(10_000);
    // Probing goes on; the leak is recorded (acknowledged), not paged. Only the acked kind closed.
    const open = await prom!.query(`kvcanary_open_findings{target="${incident}", kind="cross-request-leak"}`);
    expect(open.length).toBeGreaterThan(0);
    expect(open.every((s) => s.value === 0)).toBe(true);
  }, 60_000);

  it('stops probing an address removed from the list, without a restart', async () => {
    const gone = `glm/${engines[2]!.hostPort}`;
    writeSd(engines.slice(0, 2).map((e) => e.hostPort));
    await vi.waitFor(async () => {
      const names = (await apiTargets()).flat().map((t) => t.name).sort();
      expect(names).toEqual(engines.slice(0, 2).map((e) => `glm/${e.hostPort}`).sort());
    }, { timeout: 15_000, interval: 250 });
    const metrics = await Promise.all(shards.map(async (u) => (await fetch(`${u}/metrics`)).text()));
    // Its series leave once its in-flight cycle (if any) has been recorded.
    await vi.waitFor(async () => {
      const texts = await Promise.all(shards.map(async (u) => (await fetch(`${u}/metrics`)).text()));
      expect(texts.join('\n')).not.toContain(`target="${gone}"`);
    }, { timeout: 15_000, interval: 250 });
    expect(metrics.join('\n')).toContain('kvcanary_shard_info{shard="2/3"} 1');
  }, 40_000);
});
