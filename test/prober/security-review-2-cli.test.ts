/**
 * The second security review's defects as an operator meets them: the CLI as a process, its exit code, what it
 * prints and what it leaves on disk. Each test failed before its fix (units: security-review-2-units.test.ts).
 */
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdtempSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/index.js';
import { openStore } from '../../prober/src/service/store.js';
import { BIN, runCli } from '../helpers/cli.js';

const KEY = 'sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c';
const dir = mkdtempSync(path.join(tmpdir(), 'kvc-review2-cli-'));
let n = 0;
const fresh = (prefix: string): string => mkdtempSync(path.join(dir, `${prefix}-`));
const ESC_OR_BIDI = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e]/;

function expectNoEcho(r: { code: number | null; stderr: string; stdout: string }): void {
  expect(r.code).toBe(64);
  expect(r.stderr + r.stdout).not.toContain(KEY.slice(0, 16));
  expect(r.stderr).not.toMatch(ESC_OR_BIDI);
}

let engine: RunningEngine;
beforeAll(async () => {
  // Pool below context: a `pool-below-context` warning from capacity-audit, in a second.
  engine = await startEngine({ preset: 'hardened', scale: 128, port: 0, log: () => {} });
});
afterAll(async () => {
  await engine.close();
});

const capacityRun = (home: string, extra: string[] = []) =>
  // KVC_RUN_EDGE_KEY: the key of the config target `edge` below, which a run at its URL probes as.
  runCli(['run', '--target', engine.url, '--scenario', 'capacity-audit', '-q', ...extra], { env: { KVCANARY_HOME: home, KVC_RUN_EDGE_KEY: 'sk-edge-test-0123456789' } });

describe('defect 1: a run is named by its endpoint, so a silence is about one endpoint', { timeout: 300_000 }, () => {
  it('ack --target cli --kind * no longer hides what every run finds', async () => {
    const home = fresh('home');
    expect((await capacityRun(home)).code).toBe(1);
    const store = path.join(home, 'runs.sqlite');
    expect((await runCli(['ack', '--store', store, '--target', 'cli', '--kind', '*', '--expires', '2h', '--reason', 'CI box'])).code).toBe(0);
    const r = await capacityRun(home);
    expect(r.code).toBe(1);
  });

  it('a silence for the endpoint (HOST:PORT) applies to it, and a run is recorded under that name', async () => {
    const home = fresh('home');
    const hostPort = new URL(engine.url).host;
    expect((await capacityRun(home)).code).toBe(1);
    const store = path.join(home, 'runs.sqlite');
    expect((await runCli(['ack', '--store', store, '--target', hostPort, '--kind', 'pool-below-context', '--expires', '2h', '--reason', 'resize pending'])).code).toBe(0);
    // Acknowledged: no longer 1. (The cheap capacity check alone never makes a pass: 2, partial.)
    expect((await capacityRun(home)).code).toBe(2);
    const s = openStore({ path: store, retentionMs: Number.MAX_SAFE_INTEGER, readonly: true });
    try {
      expect(new Set(s.recentRuns({ limit: 10 }).map((x) => x.target))).toEqual(new Set([hostPort]));
    } finally {
      s.close();
    }
  });

  it('with --config, the run takes the name of the config target at its URL (silences shared with serve)', async () => {
    const home = fresh('home');
    const cfg = path.join(home, 'kvcanary.yaml');
    writeFileSync(cfg, `targets: [{ name: edge, base_url: "${engine.url}/v1", api_key_env: KVC_RUN_EDGE_KEY }]\nstore: { path: ./serve.sqlite }\n`);
    const store = path.join(home, 'runs.sqlite');
    expect((await capacityRun(home, ['--config', cfg])).code).toBe(1);
    expect((await runCli(['ack', '--store', store, '--target', 'edge', '--kind', '*', '--expires', '1h', '--reason', 'known'])).code).toBe(0);
    expect((await capacityRun(home, ['--config', cfg])).code).toBe(2);  // acknowledged; capacity alone is partial
    // Without --config the run is named HOST:PORT: the silence of `edge` is not about that name.
    expect((await capacityRun(home)).code).toBe(1);
  });
});

describe('defect 2: ack and run refuse an SQLite file that is not a kvcanary store, and change nothing', { timeout: 300_000 }, () => {
  it.each([['ack'], ['run']])('%s --store OTHER.sqlite', async (cmd) => {
    const file = path.join(fresh('foreign'), 'app.sqlite');
    const db = new Database(file);
    db.exec('CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES (\'ada\')');
    db.close();
    chmodSync(file, 0o644);
    const before = readFileSync(file);
    const r = cmd === 'ack'
      ? await runCli(['ack', '--store', file, '--target', 'x', '--kind', '*', '--expires', '1h', '--reason', 'r'])
      : await runCli(['run', '--target', 'http://127.0.0.1:1', '--store', file, '-q'], { env: { KVCANARY_HOME: fresh('home') } });
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/not a kvcanary evidence store/);
    expect(readFileSync(file).equals(before)).toBe(true);
    expect(statSync(file).mode & 0o777).toBe(0o644);
    expect(existsSync(`${file}-wal`)).toBe(false);
  });
});

describe('defect 8: --junit is checked before the run and never overwrites kvcanary\'s files or follows links', { timeout: 300_000 }, () => {
  const junitRun = (home: string, junit: string, extra: string[] = []) =>
    runCli(['run', '--target', 'http://127.0.0.1:1', '--junit', junit, ...extra], { env: { KVCANARY_HOME: home } });

  it('the store, marker.key, a symlink, a FIFO, a folder, a missing folder: 64 before anything is sent', async () => {
    const home = fresh('home');
    expect((await junitRun(home, path.join(home, 'first.xml'))).code).toBe(2);  // creates the store and the key
    const key = readFileSync(path.join(home, 'marker.key'));
    const storeBytes = readFileSync(path.join(home, 'runs.sqlite'));
    const victim = path.join(home, 'victim.txt');
    writeFileSync(victim, 'precious');
    symlinkSync(victim, path.join(home, 'link.xml'));
    symlinkSync(path.join(home, 'nowhere.xml'), path.join(home, 'dangling.xml'));
    spawnSync('mkfifo', [path.join(home, 'fifo.xml')]);
    for (const junit of [path.join(home, 'runs.sqlite'), path.join(home, 'marker.key'), path.join(home, 'link.xml'), path.join(home, 'dangling.xml'),
      path.join(home, 'fifo.xml'), home, path.join(home, 'no-such-dir', 'j.xml'), victim]) {
      const r = await junitRun(home, junit);
      expect(r.code, junit).toBe(64);
      expect(r.stderr, junit).toMatch(/--junit/);
      expect(r.stderr, junit).not.toMatch(/introspection/);  // refused before the run started
    }
    expect(readFileSync(path.join(home, 'marker.key')).equals(key)).toBe(true);
    expect(readFileSync(path.join(home, 'runs.sqlite')).equals(storeBytes)).toBe(true);
    expect(readFileSync(victim, 'utf8')).toBe('precious');
    expect(existsSync(path.join(home, 'nowhere.xml'))).toBe(false);
    // A report from an earlier run is replaced, as CI expects.
    expect((await junitRun(home, path.join(home, 'first.xml'))).code).toBe(2);
    expect(readFileSync(path.join(home, 'first.xml'), 'utf8')).toMatch(/^<\?xml/);
  });
});

describe('defect 10: ack --expires and --reason at the CLI', { timeout: 300_000 }, () => {
  it.each([['2020-01-01'], ['0d'], ['1ms'], ['2026-02-30'], ['2027-01-01T10:00:00']])('--expires %s is refused (64), nothing stored', async (expires) => {
    const home = fresh('home');
    const store = path.join(home, 's.sqlite');
    openStore({ path: store, retentionMs: 1000 }).close();
    const r = await runCli(['ack', '--store', store, '--target', 'x', '--kind', '*', '--expires', expires, '--reason', 'r']);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/--expires/);
  });

  it('a --reason with CR/LF cannot forge a line in the run summary', async () => {
    const home = fresh('home');
    const store = path.join(home, 'runs.sqlite');
    await capacityRun(home);
    const r = await runCli(['ack', '--store', store, '--target', new URL(engine.url).host, '--kind', '*', '--expires', '1h', '--reason', 'ok\nFAKE: PASS']);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/--reason/);
  });
});

describe('defect 11 and leftover: init', { timeout: 300_000 }, () => {
  it('never follows a dangling symlink, never writes through one with --force, a missing folder is 64', async () => {
    const d = fresh('init');
    const target = path.join(d, 'created-by-link.yaml');
    symlinkSync(target, path.join(d, 'dangling.yaml'));
    let r = await runCli(['init', path.join(d, 'dangling.yaml')]);
    expect(r.code).toBe(64);
    expect(existsSync(target)).toBe(false);
    const victim = path.join(d, 'victim');
    writeFileSync(victim, 'precious');
    symlinkSync(victim, path.join(d, 'link.yaml'));
    r = await runCli(['init', '--force', path.join(d, 'link.yaml')]);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/symbolic link/);
    expect(readFileSync(victim, 'utf8')).toBe('precious');
    expect(lstatSync(path.join(d, 'link.yaml')).isSymbolicLink()).toBe(true);
    r = await runCli(['init', path.join(d, 'missing', 'kvcanary.yaml')]);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/folder does not exist/);
    // A plain file is still written, and --force replaces a regular file.
    expect((await runCli(['init', path.join(d, 'k.yaml')])).code).toBe(0);
    expect((await runCli(['init', '--force', path.join(d, 'k.yaml')])).code).toBe(0);
    expect((await runCli(['check-config', path.join(d, 'k.yaml')])).code).toBe(0);
  });
});

describe('defect 12: a reader that goes away does not change the exit code', { timeout: 300_000 }, () => {
  it('run … 2>&1 | head -1 on an inconclusive run exits 2, not 1', () => {
    const home = fresh('home');
    const r = spawnSync('bash', ['-c', `"${process.execPath}" "${BIN}" run --target http://127.0.0.1:1 2>&1 | head -1 >/dev/null; exit \${PIPESTATUS[0]}`],
      { env: { ...process.env, KVCANARY_HOME: home }, timeout: 60_000 });
    expect(r.status).toBe(2);
  });
});

describe('defect 13: check-config refuses what is not a regular file, and reads at most its cap', { timeout: 300_000 }, () => {
  it('a FIFO answers at once (64) instead of hanging; /dev/zero is refused before it is read', async () => {
    const fifo = path.join(fresh('fifo'), 'config.yaml');
    spawnSync('mkfifo', [fifo]);
    const r = await runCli(['check-config', fifo], { timeoutMs: 20_000 });
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/not a regular file \(a FIFO\)/);
    const z = await runCli(['check-config', '/dev/zero'], { timeoutMs: 20_000 });
    expect(z.code).toBe(64);
    expect(z.stderr).toMatch(/not a regular file \(a device\)/);
  });
});

describe('leftovers: no key echoed, no control character printed', { timeout: 300_000 }, () => {
  it.each([
    [['ack', '--store', '/nonexistent', '--target', 'x', '--kind', KEY, '--expires', '1h', '--reason', 'r']],
    [['ack', '--store', '/nonexistent', '--target', 'x', '--kind', '*', '--expires', KEY, '--reason', 'r']],
    [['serve', '--shard', KEY]],
    [['engine', '--preset', KEY]],
    [['engine', '--scale', KEY]],
  ])('%j', async (args) => {
    expectNoEcho(await runCli(args, { env: { KVCANARY_HOME: fresh('home') } }));
  });

  it.each([[{ KVCANARY_SHARD: KEY }], [{ KVCANARY_SHARD_INDEX: KEY, KVCANARY_SHARD_COUNT: '3' }], [{ KVCANARY_SHARD_INDEX: '1', KVCANARY_SHARD_COUNT: KEY }]])('serve with %j', async (env) => {
    expectNoEcho(await runCli(['serve', '--listen', '127.0.0.1:0'], { env: { KVCANARY_HOME: fresh('home'), ...env } }));
  });

  it('check-config: header and tenant names with ESC/CR/LF, a key as a header name, a key as api_key_file', async () => {
    const file = path.join(fresh('cfg'), `c${n++}.yaml`);
    writeFileSync(file, [
      'targets:',
      '  - name: t',
      '    base_url: http://127.0.0.1:1',
      `    headers: { "X-\\e]0;pwned\\a${KEY}": v }`,
      `    tenants: { "a\\r\\nFAKE: PASS": { cache_salt: s } }`,
      `  - name: u`,
      '    base_url: http://127.0.0.1:1',
      `    api_key_file: "${KEY}"`,
      `    discover_typo: 1`,
    ].join('\n').replaceAll('\\e', '\\x1b').replaceAll('\\a', '\\x07'));
    const r = await runCli(['check-config', file]);
    expectNoEcho(r);
    expect(r.stderr).toMatch(/headers/);
    expect(r.stderr).toMatch(/tenants/);
  });

  it('check-config needs api_key_file named, not present (like api_key_env)', async () => {
    const file = path.join(fresh('cfg'), 'c.yaml');
    writeFileSync(file, 'targets: [{ name: t, base_url: "http://127.0.0.1:1", api_key_file: /run/secrets/not-mounted-here }]\n');
    const r = await runCli(['check-config', file]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  });

  it('a SIGHUP reload of a config with ESC in a header name and a key in api_key_file logs neither', async () => {
    const d = fresh('hup');
    const file = path.join(d, 'c.yaml');
    writeFileSync(file, `store: { path: ${d}/s.sqlite }\nlisten: 127.0.0.1:0\ntargets: [{ name: t, base_url: "http://127.0.0.1:1", scenarios: [capacity-audit] }]\n`);
    const child = spawn(process.execPath, [BIN, 'serve', '--config', file], { env: { ...process.env, KVCANARY_HOME: d }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    try {
      await waitFor(() => /serving|listening/i.test(out), 30_000);
      writeFileSync(file, `store: { path: ${d}/s.sqlite }\nlisten: 127.0.0.1:0\ntargets: [{ name: t, base_url: "http://127.0.0.1:1", api_key_file: "/x/${KEY}", headers: { "X-\u001b[2J": v } }]\n`);
      child.kill('SIGHUP');
      await waitFor(() => /config reload failed/.test(out), 30_000);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('close', r));
    }
    expect(out).not.toContain(KEY.slice(0, 16));
    expect(out).not.toContain('\u001b[2J');
    expect(out).not.toContain('\\u001b[2J');
  });

  it('--json (run and report) carries U+202E and C1 controls only as \\u escapes', async () => {
    const home = fresh('home');
    const store = path.join(home, 'runs.sqlite');
    const s = openStore({ path: store, retentionMs: Number.MAX_SAFE_INTEGER });
    s.recordRun({
      runId: 'run-rlo', target: 't', baseUrl: 'http://h:1', model: 'gpt\u202etxt.exe\u009b', startedAt: new Date(Date.now() - 1000).toISOString(), finishedAt: new Date().toISOString(),
      outcome: 'inconclusive', up: true, capacity: {},
      scenarios: [{ name: 'capacity-audit', outcome: 'inconclusive', findings: [], requests: [], notes: ['note \u202eevil\u0085'], tokens: { sent: 0, billed: 0 }, durationMs: 1 }],
    });
    s.close();
    const r = await runCli(['report', '--store', store, '--json']);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toMatch(/[\u007f-\u009f\u202a-\u202e]/);
    expect(r.stdout).toContain('\\u202e');
    expect(JSON.stringify(JSON.parse(r.stdout))).toContain('\u202e');  // the same value, escaped
  });
});

async function waitFor(cond: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 100));
  }
}
