/**
 * Starts llama.cpp's llama-server (built by scripts/setup-test-env.sh into ~/.cache/kvcanary/llama.cpp, or
 * $KVCANARY_CACHE/llama.cpp) on a free port of 127.0.0.1 and waits for /health 200. A server that exits or
 * does not come up in time fails with the tail of its stderr, never a hang.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export const LLAMA_DIR = join(process.env['KVCANARY_CACHE'] ?? join(homedir(), '.cache', 'kvcanary'), 'llama.cpp');
export const LLAMA_SERVER = join(LLAMA_DIR, 'bin', 'llama-server');
export const TINY_MODEL = join(LLAMA_DIR, 'tiny.gguf');

export interface LlamaServer {
  url: string;
  /** The last lines of its output (stdout and stderr together, as llama-server logs to both). */
  tail(): string;
  stop(): Promise<void>;
}

const TAIL_CHARS = 4000;

export async function startLlamaServer(args: string[], opts: { readyTimeoutMs?: number } = {}): Promise<LlamaServer> {
  if (!existsSync(LLAMA_SERVER) || !existsSync(TINY_MODEL)) {
    throw new Error(`llama-server or its model is missing (${LLAMA_SERVER}, ${TINY_MODEL}): run scripts/setup-test-env.sh (npm run test:all does)`);
  }
  const child = spawn(LLAMA_SERVER, ['-m', TINY_MODEL, '--host', '127.0.0.1', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const keep = (c: Buffer): void => {
    log = (log + c.toString()).slice(-64 * 1024);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const tail = (): string => log.slice(-TAIL_CHARS);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
  try {
    let url: string | undefined;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`llama-server ${args.join(' ')} exited (${child.exitCode ?? child.signalCode}) before listening:\n${tail()}`);
      url ??= /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(log)?.[1];
      if (url !== undefined && (await healthy(url))) return { url, tail, stop: () => stop(child, exited) };
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`llama-server ${args.join(' ')} did not answer /health 200 within ${opts.readyTimeoutMs ?? 60_000} ms:\n${tail()}`);
  } catch (err) {
    await stop(child, exited);
    throw err;
  }
}

async function healthy(url: string): Promise<boolean> {
  try {
    const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
    await r.body?.cancel();
    return r.status === 200;
  } catch {
    return false;
  }
}

async function stop(child: ChildProcess, exited: Promise<number | null>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}
