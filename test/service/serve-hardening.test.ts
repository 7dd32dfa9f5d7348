/**
 * `kvcanary serve` under an operator's expectations: SIGTERM stops it within the shutdown grace even with a
 * probe hanging in flight (the cut cycle recorded inconclusive, committed, exit 0); a secret header value the
 * target echoes reaches neither the log (even at debug) nor the store; the status server refuses a foreign
 * Host (DNS rebinding); /metrics carries kvcanary_build_info and the process metrics.
 */
import { scratchHome } from '../helpers/cli.js';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { listen, type FakeServer } from '../helpers/fake-endpoints.js';
import { BIN, runCli } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-serve-h-'));
const SECRET = 'hdr-0a1b2c3d4e5f6a7b8c9d0e1f';

function get(url: string, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request({ host: u.hostname, port: u.port, path: u.pathname, headers: { host } }, (res) => { res.resume(); resolve(res.statusCode ?? 0); });
    req.on('error', reject);
    req.end();
  });
}

describe('serve: shutdown, secrets, Host', () => {
  let target: FakeServer;
  afterAll(async () => { await target?.close(); });

  it('SIGTERM with a probe hanging in flight: exits 0 after the grace, the cut cycle stored inconclusive; secrets stay out', async () => {
    let sawCompletion: () => void = () => {};
    const completion = new Promise<void>((resolve) => { sawCompletion = resolve; });
    target = await listen((req, res) => {
      const echoed = String(req.headers['x-auth'] ?? '');
      if (req.url === '/v1/models') {
        // A model id that echoes the secret header: it would reach debug progress lines, the store and the page.
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: [{ id: `m-${echoed}`, max_model_len: 4096 }] }));
        return;
      }
      if (req.method === 'POST' && req.url?.includes('completions')) { sawCompletion(); return; }  // hang
      res.writeHead(404).end();
    });
    const store = path.join(dir, 'kvc.sqlite');
    const cfg = path.join(dir, 'serve.yaml');
    writeFileSync(cfg, `listen: 127.0.0.1:0
store: { path: ${store} }
log: { level: debug }
shutdown_grace: 1s
allowed_hosts: [canary.internal]
schedule: { interval: 20m, timeout: 10m, jitter: 0s }
targets:
  - name: hang
    base_url: ${target.url}
    headers: { X-Auth: ${SECRET} }
    scenarios: [overlimit-handoff]
`);
    const child = spawn(process.execPath, [BIN, 'serve', '--config', cfg], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KVCANARY_HOME: scratchHome() } });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => { out += c.toString(); });
    child.stderr.on('data', (c: Buffer) => { err += c.toString(); });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    try {
      await completion;
      const url = /http:\/\/127\.0\.0\.1:\d+\//.exec(out)![0];
      const port = new URL(url).port;
      // DNS rebinding: a foreign Host is refused; the listen address, localhost and allowed_hosts are served.
      expect(await get(url, `evil.example:${port}`)).toBe(421);
      expect(await get(`${url}api/runs`, `rebind.attacker.test:${port}`)).toBe(421);
      expect(await get(url, `127.0.0.1:${port}`)).toBe(200);
      expect(await get(url, `localhost:${port}`)).toBe(200);
      expect(await get(url, 'canary.internal')).toBe(200);
      const metrics = await (await fetch(`${url}metrics`)).text();
      expect(metrics).toMatch(/kvcanary_build_info\{version="[^"]+",node="v\d+/);
      expect(metrics).toContain('process_resident_memory_bytes');
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
    expect(err).not.toContain(SECRET);
    expect(out).not.toContain(SECRET);
    const report = await runCli(['report', '--store', store, '--json']);
    expect(report.stdout).not.toContain(SECRET);
    const doc = JSON.parse(report.stdout) as { runs: Array<{ outcome: string; scenarios: Array<{ outcome: string; reason?: string; notes: string[] }> }> };
    expect(doc.runs).toHaveLength(1);
    expect(doc.runs[0]!.outcome).toBe('inconclusive');
    expect(doc.runs[0]!.scenarios[0]!.reason).toBe('deadline');
    expect(doc.runs[0]!.scenarios[0]!.notes.join(' ')).toMatch(/shutdown/);
  }, 60_000);
});
