/**
 * `kvcanary serve` as a newcomer meets it (no config: the embedded demo against two bundled engines), and
 * `check-config` / `report` as an operator uses them.
 */
import { scratchHome } from '../helpers/cli.js';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, runCli } from '../helpers/cli.js';

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'kvcanary-cli-'));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('kvcanary serve with no config (the embedded demo)', () => {
  it('prints the URL first, findings for the incident engine and none for the remediated one, and exits 0 on SIGINT', async () => {
    const cwd = tempDir();
    const child = spawn(process.execPath, [BIN, 'serve', '--listen', '127.0.0.1:0'], { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KVCANARY_HOME: scratchHome() } });
    child.stderr.resume();
    let out = '';
    const sawFinding = new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no finding within 60 s:\n${out}`)), 60_000);
      child.stdout.on('data', (c: Buffer) => {
        out += c.toString();
        if (/FINDING cross-request-leak target=engine-incident/.test(out)) {
          clearTimeout(t);
          resolve();
        }
      });
    });
    await sawFinding;
    const first = out.split('\n')[0]!;
    expect(first).toMatch(/http:\/\/127\.0\.0\.1:\d+\//);
    const url = /http:\/\/127\.0\.0\.1:\d+\//.exec(first)![0];
    const health = await fetch(`${url}healthz`);
    expect(health.status).toBe(200);
    const page = await (await fetch(url)).text();
    expect(page).toContain('engine-incident');
    const code = await new Promise<number | null>((resolve) => {
      child.once('exit', (c) => resolve(c));
      child.kill('SIGINT');
    });
    expect(code).toBe(0);
    expect(out).not.toMatch(/FINDING \S+ target=engine-remediated/);
  }, 90_000);
});

describe('kvcanary check-config', () => {
  it('accepts a valid config (exit 0) and names every problem of a bad one (exit 64)', async () => {
    const d = tempDir();
    const good = join(d, 'good.yaml');
    writeFileSync(good, 'targets:\n  - name: a\n    base_url: http://127.0.0.1:8000\n');
    const ok = await runCli(['check-config', good]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('valid, 1 target');

    const bad = join(d, 'bad.yaml');
    writeFileSync(bad, 'schedule: { interval: 1m, timeout: 2m }\ntargets:\n  - name: a\n    base_url: ftp://x\n    colour: red\n');
    const r = await runCli(['check-config', bad]);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/schedule\.timeout/);
    expect(r.stderr).toMatch(/targets\[0\]\.base_url/);
    expect(r.stderr).toMatch(/targets\[0\]\.colour/);

    expect((await runCli(['check-config'])).code).toBe(64);
    expect((await runCli(['check-config', join(d, 'missing.yaml')])).code).toBe(64);
  });
});

describe('kvcanary report', () => {
  it('says clearly when there is no store, and rejects bad flags', async () => {
    const d = tempDir();
    const r = await runCli(['report', '--store', join(d, 'none.sqlite')]);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/no evidence store/);
    expect((await runCli(['report', '--since', 'yesterday'])).code).toBe(64);
  });
});
