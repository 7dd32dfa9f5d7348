/**
 * Section 5, what the prober itself costs.
 *
 * - `serve` at steady state with 50 targets: a few bundled engines (in a child process of their own) behind
 *   50 target names, every scenario, the scheduler's default concurrency, in a `kvcanary serve` child. After
 *   a warm-up (every target probed once), CPU seconds (user+system, /proc) and completed cycles are read at
 *   the start and end of a window: CPU per cycle is their ratio, both counted in the same window. RSS is
 *   sampled every second through the window (mean, max, and its growth from start to end).
 * - Peak RSS growth while sending a beyond-context prompt to an endpoint advertising 1,048,576 tokens (and
 *   4x that, to show how it scales), by the prober's streamed path and, side by side, by a client that
 *   materialises the prompt: each in a fresh child (prompt-rss.ts), three times, the median reported (a
 *   single send's peak depends on when the garbage collector happens to run).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { echoNoiseServer } from '../test/helpers/fake-endpoints.js';
import type { ChildProcess } from 'node:child_process';
import { allStdout, exited, firstLine, killGroup, procReader, type ChildTracker } from './child.js';

export interface ServeOverheadOptions {
  children: ChildTracker;
  targets: number;
  scale: number;
  presets: readonly string[];
  /** @default 30s */
  intervalS?: number;
  windowMs: number;
  /** Give up waiting for the warm-up after this. @default 60_000 */
  warmupMaxMs?: number;
  progress: (line: string) => void;
}

export interface ServeOverhead {
  targets: number;
  scale: number;
  /** Completed cycles when the window opened (the warm-up waits for one per target, at most warmupMaxMs). */
  cyclesBeforeWindow: number;
  engines: Array<{ preset: string; standIn: boolean }>;
  scenariosPerCycle: number;
  intervalS: number;
  windowSeconds: number;
  cycles: number;
  scenarioRuns: number;
  skipped: number;
  cpuSeconds: number;
  cpuSecondsPerCycle: number | null;
  cpuSecondsPerScenarioRun: number | null;
  /** CPU seconds per wall second in the window (1.0 = one core busy). */
  cpuUtilisation: number;
  rss: { meanBytes: number; maxBytes: number; startBytes: number; endBytes: number };
  findingsPrinted: number;
}

export interface PromptRss {
  mode: 'prober' | 'materialized';
  contextTokens: number;
  promptTokens: number;
  promptBytes: number;
  requestBytes: number;
  status?: number;
  baselineRssBytes: number;
  peakRssBytes: number;
  /** Median over the runs. */
  peakGrowthBytes: number;
  growthPerPromptByte: number;
  /** Peak growth of each run (fresh child each), in bytes. */
  runsGrowthBytes: number[];
  peakSource: string;
}

export interface OverheadResult {
  serve?: ServeOverhead;
  serveError?: string;
  prompt: PromptRss[];
}

interface MetricTotals {
  cycles: number;
  runs: number;
  skipped: number;
}

export function sumMetric(text: string, name: string): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== '{' && rest[0] !== ' ') continue;
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(v)) total += v;
  }
  return total;
}

async function totals(metricsUrl: string): Promise<MetricTotals | undefined> {
  try {
    const text = await (await fetch(metricsUrl)).text();
    return { cycles: sumMetric(text, 'kvcanary_probe_cycles_total'), runs: sumMetric(text, 'kvcanary_probe_runs_total'), skipped: sumMetric(text, 'kvcanary_runs_skipped_total') };
  } catch {
    return undefined;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function runServeOverhead(opts: ServeOverheadOptions): Promise<ServeOverhead> {
  const dir = mkdtempSync(join(tmpdir(), 'kvcanary-bench-'));
  const fleet = opts.children.spawnTs('bench/fleet.ts', ['--scale', String(opts.scale), ...opts.presets.flatMap((p) => ['--preset', p])]);
  const fleetStopped = exited(fleet);
  let serve: ChildProcess | undefined;
  try {
    const { engines } = JSON.parse(await firstLine(fleet)) as { engines: Array<{ preset: string; url: string; standIn: boolean }> };
    const intervalS = opts.intervalS ?? 30;
    const names = Array.from({ length: opts.targets }, (_, i) => `t${String(i).padStart(2, '0')}`);
    const yaml = [
      `listen: 127.0.0.1:0`,
      `store: { path: ${join(dir, 'serve.sqlite')}, retention: 1h }`,
      `log: { level: warn }`,
      `schedule: { interval: ${intervalS}s, timeout: ${intervalS - 5}s, jitter: 10s, scenarios: every_cycle }`, // the overhead of every scenario every cycle, not of the cost tiers
      `budget: { tokens_per_hour: 100000000000 }`,
      `targets:`,
      ...names.map((n, i) => `  - { name: ${n}, base_url: "${engines[i % engines.length]!.url}" }`),
    ].join('\n');
    const configFile = join(dir, 'serve.yaml');
    writeFileSync(configFile, yaml + '\n');
    serve = opts.children.spawn(process.execPath, ['bin/kvcanary.js', 'serve', '--config', configFile], { stderr: 'pipe' });
    const stderrTail: string[] = [];
    serve.stderr!.on('data', (d: Buffer) => {
      stderrTail.push(d.toString('utf8'));
      if (stderrTail.length > 20) stderrTail.shift();
    });
    const first = await firstLine(serve, 60_000).catch((err: Error) => {
      throw new Error(`${err.message}; stderr: ${stderrTail.join('').slice(-500)}`);
    });
    let findingsPrinted = 0;
    serve.stdout!.on('data', (d: Buffer) => (findingsPrinted += (d.toString('utf8').match(/^FINDING /gm) ?? []).length));
    const url = /(http:\/\/\S+)/.exec(first)?.[1];
    if (url === undefined) throw new Error(`serve printed no URL: ${first}`);
    const metricsUrl = `${url.replace(/\/$/, '')}/metrics`;
    const pid = serve.pid!;
    const usage = procReader();

    const warmUntil = performance.now() + (opts.warmupMaxMs ?? 60_000);
    for (;;) {
      const t = await totals(metricsUrl);
      if ((t?.cycles ?? 0) >= opts.targets || performance.now() > warmUntil) break;
      await sleep(1000);
    }
    opts.progress(`[overhead] serve warmed up; measuring ${opts.windowMs / 1000} s`);
    const t0 = await totals(metricsUrl);
    const u0 = usage(pid);
    const w0 = performance.now();
    const rss: number[] = [];
    while (performance.now() - w0 < opts.windowMs) {
      await sleep(1000);
      const u = usage(pid);
      if (u !== undefined) rss.push(u.rssBytes);
    }
    const t1 = await totals(metricsUrl);
    const u1 = usage(pid);
    const seconds = (performance.now() - w0) / 1000;
    if (t0 === undefined || t1 === undefined || u0 === undefined || u1 === undefined) throw new Error('could not read the serve process (metrics or /proc)');
    const cycles = t1.cycles - t0.cycles;
    const runs = t1.runs - t0.runs;
    const cpu = u1.cpuSeconds - u0.cpuSeconds;
    return {
      targets: opts.targets,
      scale: opts.scale,
      cyclesBeforeWindow: t0.cycles,
      engines: engines.map((e) => ({ preset: e.preset, standIn: e.standIn })),
      scenariosPerCycle: cycles > 0 ? runs / cycles : 0,
      intervalS,
      windowSeconds: seconds,
      cycles,
      scenarioRuns: runs,
      skipped: t1.skipped - t0.skipped,
      cpuSeconds: cpu,
      cpuSecondsPerCycle: cycles > 0 ? cpu / cycles : null,
      cpuSecondsPerScenarioRun: runs > 0 ? cpu / runs : null,
      cpuUtilisation: cpu / seconds,
      rss: { meanBytes: rss.reduce((a, b) => a + b, 0) / Math.max(1, rss.length), maxBytes: Math.max(...rss), startBytes: u0.rssBytes, endBytes: u1.rssBytes },
      findingsPrinted,
    };
  } finally {
    if (serve !== undefined && serve.exitCode === null) {
      const stopped = exited(serve);
      killGroup(serve);
      await Promise.race([stopped, sleep(15_000)]);
      if (serve.exitCode === null) killGroup(serve, 'SIGKILL');
    }
    killGroup(fleet);
    await Promise.race([fleetStopped, sleep(10_000)]);
    if (fleet.exitCode === null) killGroup(fleet, 'SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Each (context, mode) `runs` times in a fresh child; the median growth is the figure, every run is kept. */
export async function runPromptRss(children: ChildTracker, contexts: readonly number[], runs: number, progress: (line: string) => void): Promise<PromptRss[]> {
  const out: PromptRss[] = [];
  for (const context of contexts) {
    const server = await echoNoiseServer({ context });
    try {
      for (const mode of ['prober', 'materialized'] as const) {
        const docs: PromptRss[] = [];
        for (let i = 0; i < runs; i++) docs.push(JSON.parse(await allStdout(children.spawnTs('bench/prompt-rss.ts', ['--target', server.url, '--mode', mode]))) as PromptRss);
        const growth = docs.map((d) => d.peakGrowthBytes);
        const median = [...growth].sort((a, b) => a - b)[growth.length >> 1]!;
        const doc = { ...docs[0]!, peakGrowthBytes: median, growthPerPromptByte: median / docs[0]!.promptBytes, runsGrowthBytes: growth };
        out.push(doc);
        progress(`[overhead] ${mode}: ${doc.promptTokens} tokens (${(doc.promptBytes / 2 ** 20).toFixed(1)} MiB): peak RSS +${growth.map((g) => (g / 2 ** 20).toFixed(1)).join(', ')} MiB`);
      }
    } finally {
      await server.close();
    }
  }
  return out;
}
