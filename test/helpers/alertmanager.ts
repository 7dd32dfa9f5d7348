/**
 * A real Alertmanager for tests: Debian's `prometheus-alertmanager` on a free loopback port, clustering
 * off, with its own temp config and storage. Also `amtool check-config`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const INSTALL_HINT = "Install Debian's `prometheus-alertmanager` package (apt-get install prometheus-alertmanager), which provides the server and `amtool`; `npm run test:all` does it.";

export function findAlertmanagerTool(name: 'prometheus-alertmanager' | 'amtool'): string {
  const envName = name === 'amtool' ? 'AMTOOL_BIN' : 'ALERTMANAGER_BIN';
  const candidates = [process.env[envName], `/usr/bin/${name}`, ...(name === 'prometheus-alertmanager' ? ['/usr/bin/alertmanager'] : [])]
    .filter((c): c is string => c !== undefined && c !== '');
  for (const c of candidates) {
    try { accessSync(c, fsConstants.X_OK); return c; } catch { /* next */ }
  }
  throw new Error(`${name} not found (looked for ${candidates.join(', ')}). ${INSTALL_HINT}`);
}

export async function runAmtool(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const bin = findAlertmanagerTool('amtool');
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d: string) => { stderr += d; });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a !== null ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

export interface AlertmanagerHandle {
  url: string;
  /** host:port, for Prometheus's alerting config. */
  hostPort: string;
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function exitOf(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    child.once('exit', () => { clearTimeout(t); resolve(true); });
  });
}

/** Starts Alertmanager with `configYaml`; resolves once `/-/ready` answers 200. */
export async function startAlertmanager(configYaml: string, readyTimeoutMs = 30_000): Promise<AlertmanagerHandle> {
  const bin = findAlertmanagerTool('prometheus-alertmanager');
  const dir = await mkdtemp(join(tmpdir(), 'kvcanary-alertmanager-'));
  const configPath = join(dir, 'alertmanager.yml');
  await writeFile(configPath, configYaml);
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    let output = '';
    const child = spawn(bin, [
      `--config.file=${configPath}`, `--storage.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`, '--cluster.listen-address=', '--log.level=warn',
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout?.setEncoding('utf8').on('data', (d: string) => { output = (output + d).slice(-4000); });
    child.stderr?.setEncoding('utf8').on('data', (d: string) => { output = (output + d).slice(-4000); });
    const url = `http://127.0.0.1:${port}`;
    const killOnExit = () => { child.kill('SIGKILL'); };
    process.once('exit', killOnExit);
    const deadline = Date.now() + readyTimeoutMs;
    let ready = false;
    while (Date.now() < deadline && child.exitCode === null && child.signalCode === null) {
      try {
        if ((await fetch(`${url}/-/ready`)).status === 200) { ready = true; break; }
      } catch { /* not yet */ }
      await sleep(100);
    }
    const stop = async (): Promise<void> => {
      process.removeListener('exit', killOnExit);
      child.kill('SIGTERM');
      if (!(await exitOf(child, 10_000))) { child.kill('SIGKILL'); await exitOf(child, 5000); }
    };
    if (ready) {
      let stopped: Promise<void> | undefined;
      return { url, hostPort: `127.0.0.1:${port}`, stop: () => (stopped ??= stop().then(() => rm(dir, { recursive: true, force: true }))) };
    }
    await stop();
    if (!/address already in use/i.test(output) || attempt === 3) {
      await rm(dir, { recursive: true, force: true });
      throw new Error(`alertmanager did not become ready on ${url}. Its output:\n${output}`);
    }
  }
}
