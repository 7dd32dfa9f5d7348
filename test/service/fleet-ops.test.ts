/**
 * Living with kvcanary for months: `kvcanary init` (an example that passes check-config), silences
 * (`silences:` and `kvcanary ack`: recorded, shown, not failing, not paging), `api_key_file:` rotation
 * without a restart, and `report --store A --store B` over several shards' stores.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { parseConfig, type TargetConfig } from '../../prober/src/service/config.js';
import { createLogger } from '../../prober/src/service/logger.js';
import { makeFinding } from '../../prober/src/probe/findings.js';
import type { ProbeFn } from '../../prober/src/probe/probe-fn.js';
import type { ProbeRun } from '../../prober/src/probe/result.js';
import { createService } from '../../prober/src/service/service.js';
import { openStore } from '../../prober/src/service/store.js';
import { createKeyFiles } from '../../prober/src/service/key-files.js';
import { matchSilence } from '../../prober/src/service/silences.js';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import { runProbe } from '../../prober/src/probe/probe.js';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';
import { echoNoiseServer } from '../helpers/fake-endpoints.js';
import { runCli } from '../helpers/cli.js';

const dirs: string[] = [];
const closers: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of closers) await c();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(path.join(tmpdir(), 'kvcanary-ops-'));
  dirs.push(d);
  return d;
}
function quietLogger() {
  const chunks: string[] = [];
  const logger = createLogger({ level: 'info', secrets: [], destination: new Writable({ write(c: Buffer, _e, cb) { chunks.push(c.toString()); cb(); } }) });
  return { logger, text: () => chunks.join('') };
}

describe('kvcanary init', () => {
  it('writes a commented example that check-config accepts, also with its fleet and silences examples switched on', async () => {
    const d = tempDir();
    const file = path.join(d, 'kvcanary.yaml');
    const w = await runCli(['init', file]);
    expect(w.code).toBe(0);
    const check = await runCli(['check-config', file]);
    expect(check.code, check.stderr).toBe(0);
    expect(check.stdout).toMatch(/less often: .*overlimit-handoff every 6h/);
    expect((await runCli(['init', file])).code).toBe(64);

    const text = readFileSync(file, 'utf8');
    const on = text.split('\n').map((l) => {
      const m = /^(\s*)# ((?:- name: glm|  discover:|    file_sd:|    refresh:|    scheme:|    path_prefix:|silences:|  - target:|    kind:|    expires:|    reason:).*)$/.exec(l);
      return m === null ? l : `${m[1]}${m[2]}`;
    }).join('\n');
    expect(on).not.toBe(text);
    writeFileSync(file, on);
    const check2 = await runCli(['check-config', file]);
    expect(check2.code, check2.stderr).toBe(0);
    expect(check2.stdout).toMatch(/glm\/\*: discovered by file_sd/);
  }, 90_000);
});

describe('silences', () => {
  const leakProbe: ProbeFn = async (req) => ({
    runId: req.runId, target: req.target.name, baseUrl: req.target.baseUrl, model: 'm', startedAt: new Date().toISOString(),
    finishedAt: new Date().toISOString(), outcome: 'fail', up: true, capacity: {},
    scenarios: req.scenarios.map((name) => ({
      name, outcome: name === 'overlimit-handoff' ? 'fail' as const : 'pass' as const, requests: [], notes: [], tokens: { sent: 0, billed: 0 }, durationMs: 1,
      findings: name === 'overlimit-handoff' ? [makeFinding('cross-request-leak', name, { match: 'kvcanary-xxxxxxxxxxxxxxxxxxxxxxxxxx' }, 1e-30)] : [],
    })),
  });

  it('an acked finding is recorded and shown as acknowledged, fails no run and does not count toward paging; report lists the silence', async () => {
    const d = tempDir();
    const storePath = path.join(d, 'kvcanary.sqlite');
    openStore({ path: storePath, retentionMs: 86_400_000 }).close();
    const bad = await runCli(['ack', '--store', storePath, '--target', 'replica-a', '--kind', 'leak', '--expires', '200d']);
    expect(bad.code).toBe(64);
    expect(bad.stderr).toMatch(/--kind: unknown finding kind/);
    expect(bad.stderr).toMatch(/--expires: at most 90 days/);
    expect(bad.stderr).toMatch(/--reason: required/);
    const ack = await runCli(['ack', '--store', storePath, '--target', 'replica-*', '--kind', 'cross-request-leak', '--expires', '7d', '--reason', 'known, fix rolling out (TICKET-1)']);
    expect(ack.code, ack.stderr).toBe(0);

    const config = parseConfig(`
listen: 127.0.0.1:0
store: { path: ${storePath} }
schedule: { interval: 1h, timeout: 1m, jitter: 0s }
scenarios: [capacity-audit, overlimit-handoff]
targets:
  - { name: replica-a, base_url: "http://127.0.0.1:1" }
  - { name: other, base_url: "http://127.0.0.1:2" }
`, { knownScenarios: SCENARIO_NAMES });
    const runs: ProbeRun[] = [];
    const svc = await createService({ config, probe: leakProbe, logger: quietLogger().logger, onRun: (r) => { runs.push(r); } });
    closers.push(() => svc.stop());
    await vi.waitFor(() => expect(runs).toHaveLength(2), { timeout: 5000 });
    const byTarget = Object.fromEntries(runs.map((r) => [r.target, r]));
    // Silenced, the finding fails no run; but overlimit-handoff stopped at it, so the run established nothing
    // more than it had before the finding: inconclusive, never a pass (docs/verdicts.md).
    expect(byTarget['replica-a']!.outcome).toBe('inconclusive');
    expect(byTarget['other']!.outcome).toBe('fail');
    const metrics = await (await fetch(`${svc.url}metrics`)).text();
    expect(metrics).toContain('kvcanary_findings_acknowledged_total{target="replica-a",scenario="overlimit-handoff",kind="cross-request-leak",severity="critical"} 1');
    // Not counted where alerts look (finding series are created by their first finding).
    expect(metrics).not.toContain('kvcanary_findings_total{target="replica-a"');
    expect(metrics).toContain('kvcanary_findings_total{target="other",scenario="overlimit-handoff",kind="cross-request-leak",severity="critical"} 1');
    const page = await (await fetch(svc.url)).text();
    expect(page).toContain('ACKNOWLEDGED');
    expect(page).toContain('TICKET-1');
    await svc.stop();

    const report = await runCli(['report', '--store', storePath, '--json']);
    const doc = JSON.parse(report.stdout) as { findings: { target: string; acknowledged?: string }[]; silences: { target: string; reason: string }[] };
    expect(doc.findings.find((f) => f.target === 'replica-a')?.acknowledged).toMatch(/TICKET-1/);
    expect(doc.findings.find((f) => f.target === 'other')?.acknowledged).toBeUndefined();
    expect(doc.silences).toEqual([expect.objectContaining({ target: 'replica-*', reason: 'known, fix rolling out (TICKET-1)' })]);
    const text = await runCli(['report', '--store', storePath]);
    expect(text.stdout).toMatch(/silences \(1\):\n\s+active/);
  }, 90_000);

  it('config silences validate every field and stop matching when they expire', () => {
    expect(() => parseConfig(`
targets: [{ name: a, base_url: "http://x:1" }]
silences:
  - { target: a, kind: nope, expires: soon }
`, { knownScenarios: SCENARIO_NAMES })).toThrow(/silences\[0\]\.kind: unknown finding kind[\s\S]*silences\[0\]\.reason: required[\s\S]*silences\[0\]\.expires: expected an ISO date/);
    const c = parseConfig(`
targets: [{ name: a, base_url: "http://x:1" }]
silences:
  - { target: a, kind: "*", expires: "2020-01-01T00:00:00Z", reason: old }
`, { knownScenarios: SCENARIO_NAMES });
    expect(c.silences?.[0]).toMatchObject({ target: 'a', kind: '*', expiresAt: '2020-01-01T00:00:00.000Z', createdBy: 'config' });
    const leak = makeFinding('cross-request-leak', 'overlimit-handoff', {});
    expect(matchSilence(c.silences!, 'a', leak, Date.now())).toBeUndefined();
    expect(matchSilence(c.silences!, 'a', leak, Date.parse('2019-12-31T00:00:00Z'))).toBe(c.silences![0]);
    expect(matchSilence(c.silences!, 'b', leak, Date.parse('2019-12-31T00:00:00Z'))).toBeUndefined();
  });
});

describe('api_key_file', () => {
  it('is re-read when it changes: the next probe sends the new key, with no restart', async () => {
    const seen: string[] = [];
    const server = await echoNoiseServer();
    closers.push(() => server.close());
    server.server.prependListener('request', (req) => { seen.push(String(req.headers.authorization ?? '')); });
    const d = tempDir();
    const keyFile = path.join(d, 'key');
    writeFileSync(keyFile, 'sk-first-key\n');
    const config = parseConfig(`targets: [{ name: a, base_url: "${server.url}", api_key_file: ./key }]\n`, { knownScenarios: SCENARIO_NAMES, baseDir: d });
    const target: TargetConfig = config.targets[0]!;
    expect(target.apiKeyFile).toBe(keyFile);
    const keys = createKeyFiles();
    const registry = createMarkerRegistry();
    const probeOnce = () => runProbe({ registry, scanner: createScanner(registry), readKeyFile: (f) => keys.read(f) },
      { target, scenarios: ['capacity-audit'], runId: `r${seen.length}`, signal: new AbortController().signal, tokenBudget: 1e6 });
    await probeOnce();
    expect(seen.length).toBeGreaterThan(0);
    expect(new Set(seen)).toEqual(new Set(['Bearer sk-first-key']));
    const before = seen.length;
    writeFileSync(keyFile, 'sk-rotated-key-longer\n');
    await probeOnce();
    expect(new Set(seen.slice(before))).toEqual(new Set(['Bearer sk-rotated-key-longer']));
    expect(keys.seen().sort()).toEqual(['sk-first-key', 'sk-rotated-key-longer']);
    expect(() => parseConfig(`targets: [{ name: a, base_url: "http://x:1", api_key_file: ./missing }]\n`, { knownScenarios: SCENARIO_NAMES, baseDir: d }))
      .toThrow(/targets\[0\]\.api_key_file: cannot read .*missing.*ENOENT/);
  }, 30_000);
});

describe('report over several shards\' stores', () => {
  it('merges runs and findings newest first and says which store holds each finding', async () => {
    const d = tempDir();
    const paths = [path.join(d, 'shard-0.sqlite'), path.join(d, 'shard-1.sqlite')];
    paths.forEach((p, i) => {
      const store = openStore({ path: p, retentionMs: 86_400_000 });
      const at = new Date(Date.now() - (i + 1) * 60_000).toISOString();
      store.recordRun({
        runId: `run-${i}`, target: `glm/10.0.0.${i}:8000`, baseUrl: `http://10.0.0.${i}:8000`, model: 'm', startedAt: at, finishedAt: at,
        outcome: i === 0 ? 'fail' : 'pass', up: true, capacity: {},
        scenarios: [{ name: 'overlimit-handoff', outcome: i === 0 ? 'fail' : 'pass', requests: [], notes: [], tokens: { sent: 1, billed: 1 }, durationMs: 1,
          findings: i === 0 ? [makeFinding('rejection-not-enforced', 'overlimit-handoff', { facts: { status: 200 } })] : [] }],
      });
      store.close();
    });
    const r = await runCli(['report', '--store', paths[0]!, '--store', paths[1]!, '--json']);
    expect(r.code).toBe(1);
    const doc = JSON.parse(r.stdout) as { store: string[]; runs: { runId: string }[]; findings: { store: string; target: string }[] };
    expect(doc.store).toEqual(paths);
    expect(doc.runs.map((x) => x.runId)).toEqual(['run-0', 'run-1']);
    expect(doc.findings).toEqual([expect.objectContaining({ store: paths[0], target: 'glm/10.0.0.0:8000' })]);
    // A config whose store path holds {shard} reports every shard's store found there.
    const config = path.join(d, 'kvcanary.yaml');
    writeFileSync(config, `store:\n  path: ./shard-{shard}.sqlite\ntargets: [{ name: a, base_url: "http://x:1" }]\n`);
    const viaConfig = await runCli(['report', '--config', config, '--json']);
    expect((JSON.parse(viaConfig.stdout) as { store: string[] }).store).toEqual(paths);
  }, 90_000);
});
