/**
 * Starts llama.cpp's llama-server (built by scripts/setup-test-env.sh into ~/.cache/kvcanary/llama.cpp, or
 * $KVCANARY_CACHE/llama.cpp) on a free port of 127.0.0.1 and waits for /health 200. A server that exits or
 * does not come up in time fails with the tail of its stderr, never a hang. Either build (the pristine one, or
 * the fault-injection one with faults named in KVCANARY_LLAMA_FAULTS) and either model (the tiny random-weight
 * one, or the copier).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export const LLAMA_DIR = join(process.env['KVCANARY_CACHE'] ?? join(homedir(), '.cache', 'kvcanary'), 'llama.cpp');
export const LLAMA_SERVER = join(LLAMA_DIR, 'bin', 'llama-server');
export const TINY_MODEL = join(LLAMA_DIR, 'tiny.gguf');
/** The written copying model (vendor/llama.cpp/make-copier-model.mjs). */
export const COPIER_MODEL = join(LLAMA_DIR, 'copier.gguf');
/** The fault-injection build (vendor/llama.cpp/faults/): a fault is on only when named in KVCANARY_LLAMA_FAULTS. */
export const FAULTS_SERVER = join(LLAMA_DIR, 'faults', 'bin', 'llama-server');

export interface StartOptions {
  readyTimeoutMs?: number;
  /** Default: the pristine build. */
  binary?: string;
  /** Default: the tiny random-weight model. */
  model?: string;
  /** Faults to switch on (fault build only): KVCANARY_LLAMA_FAULTS. */
  faults?: string[];
}

export interface LlamaServer {
  url: string;
  /** The last lines of its output (stdout and stderr together, as llama-server logs to both). */
  tail(): string;
  /** How often each kvcanary fault logged that it fired (fault build only), from the whole output so far. */
  faultsFired(): Record<string, number>;
  stop(): Promise<void>;
}

const TAIL_CHARS = 4000;

export async function startLlamaServer(args: string[], opts: StartOptions = {}): Promise<LlamaServer> {
  const binary = opts.binary ?? LLAMA_SERVER;
  const model = opts.model ?? TINY_MODEL;
  if (!existsSync(binary) || !existsSync(model)) {
    throw new Error(`llama-server or its model is missing (${binary}, ${model}): run scripts/setup-test-env.sh (npm run test:all does)`);
  }
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env['KVCANARY_LLAMA_FAULTS'];
  if (opts.faults !== undefined && opts.faults.length > 0) env['KVCANARY_LLAMA_FAULTS'] = opts.faults.join(',');
  const child = spawn(binary, ['-m', model, '--host', '127.0.0.1', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let log = '';
  const fired: Record<string, number> = {};
  let partial = '';
  const keep = (c: Buffer): void => {
    const text = c.toString();
    log = (log + text).slice(-64 * 1024);
    // Count firings line by line over the whole output (the kept log is only its tail).
    const lines = (partial + text).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      const m = /kvcanary-fault (\S+) fired/.exec(line);
      if (m) fired[m[1]!] = (fired[m[1]!] ?? 0) + 1;
    }
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
      if (url !== undefined && (await healthy(url))) return { url, tail, faultsFired: () => ({ ...fired }), stop: () => stop(child, exited) };
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
