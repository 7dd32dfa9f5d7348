/**
 * Fleet mode: discovery (file_sd and DNS), shards (rendezvous hashing) and the service that ties them to the
 * scheduler. Services here run a fast fake probe on real timers; the file_sd list is a real file rewritten
 * while three shards serve it.
 */
import { mkdtempSync, rmSync, writeFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { ConfigError, parseConfig } from '../../prober/src/service/config.js';
import { createLogger } from '../../prober/src/service/logger.js';
import type { ProbeFn } from '../../prober/src/probe/probe-fn.js';
import { createService, type Service } from '../../prober/src/service/service.js';
import { parseFileSd, resolveSource, type DnsResolver } from '../../prober/src/service/discovery/sources.js';
import { formatShard, parseShard, shardFromArgs, shardOf } from '../../prober/src/service/shard.js';
import type { FleetTarget } from '../../prober/src/service/fleet.js';

const KNOWN = ['capacity-audit', 'overlimit-handoff'];
const dirs: string[] = [];
const closers: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of closers) await c();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(path.join(tmpdir(), 'kvcanary-fleet-'));
  dirs.push(d);
  return d;
}
function quietLogger() {
  const chunks: string[] = [];
  const logger = createLogger({ level: 'info', secrets: [], destination: new Writable({ write(c: Buffer, _e, cb) { chunks.push(c.toString()); cb(); } }) });
  return { logger, text: () => chunks.join('') };
}

const probe: ProbeFn = async (req) => ({
  runId: req.runId, target: req.target.name, baseUrl: req.target.baseUrl, model: 'm', startedAt: new Date().toISOString(),
  finishedAt: new Date().toISOString(), outcome: 'pass', up: true, capacity: {},
  scenarios: req.scenarios.map((name) => ({ name, outcome: 'pass', findings: [], requests: [], notes: [], tokens: { sent: 0, billed: 0 }, durationMs: 1 })),
});

describe('config: discover entries', () => {
  it('accepts file_sd, dns and dns_srv entries in place of base_url, inheriting the rest', () => {
    const c = parseConfig(`
schedule: { interval: 1m, timeout: 30s, jitter: 0s }
targets:
  - name: static
    base_url: http://127.0.0.1:1
  - name: glm
    discover: { file_sd: ./sd.json, refresh: 10s, path_prefix: /v1/ }
    scenarios: [capacity-audit]
    tenants: { a: { cache_salt: x }, b: { cache_salt: y } }
  - name: vllm
    discover: { dns: vllm-headless.default.svc.cluster.local:8000, scheme: https }
  - name: sg
    discover: { dns_srv: _http._tcp.sg.default.svc.cluster.local }
`, { knownScenarios: KNOWN, baseDir: '/etc/kvcanary' });
    expect(c.targets.map((t) => t.name)).toEqual(['static']);
    expect(c.discovery?.map((d) => d.template.name)).toEqual(['glm', 'vllm', 'sg']);
    const glm = c.discovery![0]!;
    expect(glm.spec).toEqual({ source: { kind: 'file_sd', file: '/etc/kvcanary/sd.json' }, refreshMs: 10_000, scheme: 'http', pathPrefix: '/v1', allow: [] });
    expect(glm.template.scenarios).toEqual(['capacity-audit']);
    expect(glm.template.tenants.map((t) => t.name)).toEqual(['a', 'b']);
    expect(c.discovery![1]!.spec).toMatchObject({ source: { kind: 'dns', host: 'vllm-headless.default.svc.cluster.local', port: 8000 }, scheme: 'https', refreshMs: 30_000 });
    expect(c.discovery![2]!.spec.source).toEqual({ kind: 'dns_srv', name: '_http._tcp.sg.default.svc.cluster.local' });
  });

  it('names every problem of a bad entry', () => {
    let err: ConfigError | undefined;
    try {
      parseConfig(`
targets:
  - name: a
    base_url: http://x:1
    discover: { file_sd: sd.json }
  - name: b
    discover: { file_sd: sd.json, dns: h:1 }
  - name: c
    discover: { dns: no-port, refresh: 1ms, scheme: ftp, colour: red }
  - name: d
`, { knownScenarios: KNOWN });
    } catch (e) { err = e as ConfigError; }
    const paths = err?.issues.map((i) => `${i.path}: ${i.message}`) ?? [];
    expect(paths).toEqual(expect.arrayContaining([
      expect.stringMatching(/^targets\[0\]\.base_url: give base_url or discover/),
      expect.stringMatching(/^targets\[1\]\.discover: expected exactly one source, got file_sd and dns/),
      expect.stringMatching(/^targets\[2\]\.discover\.dns: expected HOST:PORT/),
      expect.stringMatching(/^targets\[2\]\.discover\.refresh: /),
      expect.stringMatching(/^targets\[2\]\.discover\.scheme: /),
      expect.stringMatching(/^targets\[2\]\.discover\.colour: unknown key/),
      expect.stringMatching(/^targets\[3\]\.base_url: required/),
    ]));
  });
});

describe('discovery sources', () => {
  it('parses Prometheus file_sd JSON and YAML, deduplicating addresses and dropping __ labels', () => {
    const json = JSON.stringify([{ targets: ['10.0.0.1:8000', '10.0.0.2:8000'], labels: { zone: 'a', __meta_x: 'y' } }, { targets: ['10.0.0.1:8000', '[fd00::1]:9000'] }]);
    expect(parseFileSd(json)).toEqual([
      { hostPort: '10.0.0.1:8000', labels: { zone: 'a' } },
      { hostPort: '10.0.0.2:8000', labels: { zone: 'a' } },
      { hostPort: '[fd00::1]:9000', labels: {} },
    ]);
    expect(parseFileSd('- targets: [a.example:1]\n  labels: { pool: p }\n')).toEqual([{ hostPort: 'a.example:1', labels: { pool: 'p' } }]);
    expect(() => parseFileSd('[{"targets": ["no-port"]}]', 'sd.json')).toThrow(/sd\.json\[0\]\.targets\[0\]: expected "host:port"/);
    expect(() => parseFileSd('{"targets": []}', 'sd.json')).toThrow(/expected a list/);
  });

  it('resolves dns (every A and AAAA address) and dns_srv records', async () => {
    const dns: DnsResolver = {
      resolve4: async () => ['10.1.0.2', '10.1.0.1'],
      resolve6: async () => { throw Object.assign(new Error('no AAAA'), { code: 'ENODATA' }); },
      resolveSrv: async () => [{ name: 'p-0.svc.', port: 8000 }, { name: 'p-1.svc', port: 8001 }],
    };
    expect(await resolveSource({ kind: 'dns', host: 'h', port: 8000 }, dns)).toEqual([
      { hostPort: '10.1.0.1:8000', labels: {} }, { hostPort: '10.1.0.2:8000', labels: {} }]);
    expect(await resolveSource({ kind: 'dns_srv', name: '_x._tcp.h' }, dns)).toEqual([
      { hostPort: 'p-0.svc:8000', labels: {} }, { hostPort: 'p-1.svc:8001', labels: {} }]);
    const down: DnsResolver = { ...dns, resolve4: async () => { throw Object.assign(new Error('x'), { code: 'ETIMEOUT' }); } };
    await expect(resolveSource({ kind: 'dns', host: 'h', port: 1 }, down)).rejects.toThrow(/dns h: ETIMEOUT/);
  });
});

describe('shards', () => {
  it('parses --shard and the environment forms, with clear errors', () => {
    expect(parseShard('1/3')).toEqual({ index: 1, count: 3 });
    expect(() => parseShard('3/3')).toThrow(/INDEX must be 0-based and below COUNT \(3\)/);
    expect(() => parseShard('x')).toThrow(/--shard: expected INDEX\/COUNT/);
    expect(shardFromArgs(undefined, { KVCANARY_SHARD: '2/4' })).toEqual({ index: 2, count: 4 });
    expect(shardFromArgs(undefined, { KVCANARY_SHARD_INDEX: 'kvcanary-2', KVCANARY_SHARD_COUNT: '3' })).toEqual({ index: 2, count: 3 });
    expect(shardFromArgs(undefined, {})).toBeUndefined();
    expect(() => shardFromArgs(undefined, { KVCANARY_SHARD_COUNT: '3' })).toThrow(/set together/);
    expect(formatShard({ index: 0, count: 3 })).toBe('0/3');
  });

  it('gives every target to exactly one of three shards within ±10% of a third, and moves about 1/4 when a fourth joins', () => {
    const names = Array.from({ length: 1000 }, (_, i) => `glm/10.0.${Math.floor(i / 250)}.${i % 250}:8000`);
    const counts = [0, 0, 0];
    for (const n of names) counts[shardOf(n, 3)]!++;
    for (const c of counts) expect(Math.abs(c - 1000 / 3) / (1000 / 3)).toBeLessThanOrEqual(0.1);
    const moved = names.filter((n) => shardOf(n, 3) !== shardOf(n, 4));
    // Only targets the new shard wins move; none moves between the old shards.
    for (const n of moved) expect(shardOf(n, 4)).toBe(3);
    expect(moved.length / 1000).toBeGreaterThan(0.18);
    expect(moved.length / 1000).toBeLessThan(0.32);
  });
});

describe('three shards serving one file_sd list', () => {
  it('split the addresses exactly, follow additions and removals without a restart, and keep the last good list when the file breaks', async () => {
    const dir = tempDir();
    const sd = path.join(dir, 'replicas.json');
    const addrs = (n: number): string[] => Array.from({ length: n }, (_, i) => `127.0.0.1:${20000 + i}`);
    const writeSd = (list: string[], labels: Record<string, string> = { zone: 'z1' }): void => {
      writeFileSync(`${sd}.tmp`, JSON.stringify([{ targets: list, labels }]));
      renameSync(`${sd}.tmp`, sd);
    };
    writeSd(addrs(12));
    const yaml = `
listen: 127.0.0.1:0
store: { path: ${path.join(dir, 'store-{shard}.sqlite')} }
schedule: { interval: 1s, timeout: 900ms, jitter: 0s }
concurrency: { global: 8, per_target: 1 }
targets:
  - name: glm
    discover: { file_sd: ${sd}, refresh: 1s }
`;
    const logs = quietLogger();
    const services: Service[] = [];
    for (let i = 0; i < 3; i++) {
      const config = parseConfig(yaml.replace('{shard}', String(i)), { knownScenarios: KNOWN });
      const svc = await createService({ config, probe, logger: logs.logger, shard: { index: i, count: 3 } });
      services.push(svc);
      closers.push(() => svc.stop());
    }
    const union = async (): Promise<string[]> => {
      const lists = await Promise.all(services.map(async (s) => await (await fetch(`${s.url}api/targets`)).json() as FleetTarget[]));
      lists.forEach((l, i) => { for (const t of l) expect(t.shard).toBe(`${i}/3`); });
      return lists.flat().map((t) => t.name).sort();
    };
    const expected = (list: string[]): string[] => list.map((a) => `glm/${a}`).sort();

    expect(await union()).toEqual(expected(addrs(12)));
    for (const s of services) expect((await (await fetch(`${s.url}api/targets`)).json() as FleetTarget[]).length).toBeGreaterThan(0);

    // Add two, remove one: followed without a restart.
    const next = [...addrs(14)].filter((a) => a !== '127.0.0.1:20003');
    writeSd(next);
    await vi.waitFor(async () => expect(await union()).toEqual(expected(next)), { timeout: 5000, interval: 100 });
    const removed = 'glm/127.0.0.1:20003';
    const owner = services[shardOf(removed, 3)]!;
    await vi.waitFor(() => expect(owner.scheduler.states().map((l) => l.target)).not.toContain(removed), { timeout: 5000 });
    // The log says discovery removed it: nobody edited the config.
    const removal = logs.text().split('\n').find((l) => l.includes(removed) && l.includes('removed'));
    expect(removal).toMatch(/target removed by discovery/);
    expect(logs.text()).not.toContain('target removed from config');

    // Cycles run and report their outcome per target; the info metric carries the discovered label.
    await vi.waitFor(async () => {
      const l = await (await fetch(`${services[0]!.url}api/targets`)).json() as FleetTarget[];
      // The first cycle ran overlimit-handoff (pass); later ones only the cheap audit (partial): the target stands pass.
      expect(l.every((t) => t.verdict === 'pass' && (t.lastOutcome === 'pass' || t.lastOutcome === 'partial'))).toBe(true);
    }, { timeout: 8000, interval: 200 });
    const metrics = await (await fetch(`${services[0]!.url}metrics`)).text();
    expect(metrics).toContain('kvcanary_shard_info{shard="0/3"} 1');
    expect(metrics).toMatch(/kvcanary_target_info\{target="glm\/127\.0\.0\.1:\d+",source="glm",shard="0\/3",zone="z1"\} 1/);
    expect(metrics).toContain('kvcanary_discovered_targets{source="glm"} 13');
    expect(metrics).not.toMatch(/kvcanary_probe_runs_total\{[^}]*zone=/);

    // A broken file: every shard keeps its list, counts the error and shows it on the status page.
    writeFileSync(sd, '[{"targets": ["oops"');
    await vi.waitFor(async () => {
      const m = await (await fetch(`${services[1]!.url}metrics`)).text();
      expect(m).toMatch(/kvcanary_discovery_errors_total\{source="glm"\} [1-9]/);
    }, { timeout: 5000, interval: 100 });
    expect(await union()).toEqual(expected(next));
    const page = await (await fetch(services[1]!.url)).text();
    expect(page).toContain('shard 1/3');
    expect(page).toContain('FAILING');
    expect(logs.text()).toContain('keeping the last good list');

    // Fixed again: recovers.
    writeSd(addrs(3));
    await vi.waitFor(async () => expect(await union()).toEqual(expected(addrs(3))), { timeout: 5000, interval: 100 });
  }, 30_000);
});

describe('dns discovery against a real DNS server', () => {
  it('probes every A and AAAA address and SRV record, follows changes at refresh, and keeps the last good list through a SERVFAIL', async () => {
    const { startDnsServer } = await import('../helpers/dns-server.js');
    const { createResolver } = await import('../../prober/src/service/discovery/sources.js');
    const server = await startDnsServer({
      'glm-headless.ns.svc': { a: ['10.0.0.1', '10.0.0.2'], aaaa: ['fd00::7'] },
      '_http._tcp.sg.ns.svc': { srv: [{ port: 30000, target: 'sg-0.sg.ns.svc' }, { port: 30001, target: 'sg-1.sg.ns.svc' }] },
    });
    closers.push(() => server.close());
    const dir = tempDir();
    const config = parseConfig(`
listen: 127.0.0.1:0
store: { path: ${path.join(dir, 's.sqlite')} }
schedule: { interval: 1h, timeout: 1m, jitter: 30m }
targets:
  - name: glm
    discover: { dns: glm-headless.ns.svc:8000, refresh: 1s }
  - name: sg
    discover: { dns_srv: _http._tcp.sg.ns.svc, scheme: https, path_prefix: /v1 }
`, { knownScenarios: KNOWN });
    const svc = await createService({ config, probe, logger: quietLogger().logger, dns: createResolver([server.address]) });
    closers.push(() => svc.stop());
    const list = async () => (await (await fetch(`${svc.url}api/targets`)).json() as FleetTarget[]).map((t) => `${t.name} ${t.baseUrl}`).sort();
    expect(await list()).toEqual([
      'glm/10.0.0.1:8000 http://10.0.0.1:8000',
      'glm/10.0.0.2:8000 http://10.0.0.2:8000',
      'glm/[fd00::7]:8000 http://[fd00::7]:8000',
      'sg/sg-0.sg.ns.svc:30000 https://sg-0.sg.ns.svc:30000/v1',
      'sg/sg-1.sg.ns.svc:30001 https://sg-1.sg.ns.svc:30001/v1',
    ]);
    server.zone['glm-headless.ns.svc'] = { a: ['10.0.0.2', '10.0.0.3'] };
    await vi.waitFor(async () => expect((await list()).filter((l) => l.startsWith('glm/'))).toEqual([
      'glm/10.0.0.2:8000 http://10.0.0.2:8000', 'glm/10.0.0.3:8000 http://10.0.0.3:8000']), { timeout: 5000, interval: 200 });
    server.failing = true;
    await vi.waitFor(async () => expect(await (await fetch(`${svc.url}metrics`)).text()).toMatch(/kvcanary_discovery_errors_total\{source="glm"\} [1-9]/), { timeout: 15_000, interval: 200 });
    expect((await list()).filter((l) => l.startsWith('glm/'))).toHaveLength(2);
  }, 30_000);
});

describe('kvcanary serve --shard', () => {
  it('refuses a bad shard with exit 64 and a message naming the flag or variable', async () => {
    const { runCli } = await import('../helpers/cli.js');
    const bad = await runCli(['serve', '--shard', '3/3']);
    expect(bad.code).toBe(64);
    expect(bad.stderr).toContain('--shard: INDEX must be 0-based and below COUNT (3), got 3');
    const half = await runCli(['serve'], { env: { KVCANARY_SHARD_INDEX: 'kvcanary-1' } });
    expect(half.code).toBe(64);
    expect(half.stderr).toContain('KVCANARY_SHARD_INDEX and KVCANARY_SHARD_COUNT must be set together');
  }, 60_000);
});
