/**
 * Child processes of the benchmark: spawn them (each in a process group of its own, tracked, so an
 * interrupted benchmark takes its children and their children — npm, tsx — down with it), read the first
 * stdout line or all of stdout, and read a child's CPU time and RSS from /proc (Linux), so the prober is
 * measured in a process of its own.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

export const REPO_ROOT = new URL('..', import.meta.url).pathname;

export class BenchChildError extends Error {
  readonly code = 'KVC_BENCH_CHILD';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'BenchChildError';
  }
}

export interface ChildTracker {
  /** Spawns in the repo root, in a new process group, stdout piped; tracked until it exits. */
  spawn(command: string, args: readonly string[], opts?: { stderr?: 'inherit' | 'ignore' | 'pipe'; env?: NodeJS.ProcessEnv }): ChildProcess;
  /** Runs a TypeScript file of this repo under tsx. */
  spawnTs(file: string, args: readonly string[], opts?: { stderr?: 'inherit' | 'ignore' | 'pipe' }): ChildProcess;
  /** SIGTERM to every live child's process group. */
  killAll(): void;
}

export function createChildTracker(): ChildTracker {
  const live = new Set<ChildProcess>();
  const run = (command: string, args: readonly string[], opts: { stderr?: 'inherit' | 'ignore' | 'pipe'; env?: NodeJS.ProcessEnv } = {}): ChildProcess => {
    const options: SpawnOptions = { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', opts.stderr ?? 'inherit'], detached: true, ...(opts.env === undefined ? {} : { env: opts.env }) };
    const child = spawn(command, [...args], options);
    live.add(child);
    child.once('exit', () => live.delete(child));
    return child;
  };
  return {
    spawn: run,
    spawnTs: (file, args, opts) => run(process.execPath, ['--import', 'tsx', file, ...args], opts),
    killAll() {
      for (const child of live) {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, 'SIGTERM');
        } catch {
          // already gone
        }
      }
    },
  };
}

/** SIGTERM to a tracked child's whole process group (it and whatever it started). */
export function killGroup(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/** Resolves with the child's first stdout line (rejects if it exits first or `timeoutMs` passes). */
export function firstLine(child: ChildProcess, timeoutMs = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new BenchChildError(`child ${child.pid} printed nothing in ${timeoutMs} ms`)), timeoutMs);
    rl.once('line', (line) => {
      clearTimeout(timer);
      resolve(line);
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new BenchChildError(`child ${child.pid} exited (${code}) before printing`));
    });
  });
}

/** Resolves with the child's whole stdout once it exits 0. */
export function allStdout(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString('utf8')));
    child.once('error', reject);
    child.once('close', (code) => (code === 0 ? resolve(out) : reject(new BenchChildError(`child exited with ${code}`))));
  });
}

export function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });
}

/** A reader of user+system CPU seconds and RSS bytes of a process from /proc (undefined where unreadable). */
export function procReader(): (pid: number) => { cpuSeconds: number; rssBytes: number } | undefined {
  const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const ticks = Number(r.stdout?.trim()) || 100;
  return (pid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Fields after the parenthesised command name (which may hold spaces): utime and stime are 14 and 15.
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const utime = Number(rest[11]);
      const stime = Number(rest[12]);
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const rss = /^VmRSS:\s+(\d+) kB/m.exec(status);
      return { cpuSeconds: (utime + stime) / ticks, rssBytes: rss === null ? 0 : Number(rss[1]) * 1024 };
    } catch {
      return undefined;
    }
  };
}
