/**
 * One `serve` replica run as production runs it: `node bin/kvcanary.js serve --config FILE`, which runs the
 * compiled build in dist/ (bench/scale.ts builds it first and checks the launcher takes it). Against the
 * URLs of bench/scale-endpoints.ts, every target due within a second, until each has finished one cycle.
 *
 * Measured from outside the process: CPU (user+system) and RSS from /proc, RSS every 250 ms; CPU counts
 * from the moment serve prints its URL (config read, store open, every target's loop and metrics set up)
 * to the moment /api/targets shows a last outcome for every target. /metrics is scraped every 30 s, as the
 * ServiceMonitor in deploy/k8s does, since a scrape is part of what a replica holds; the last scrape, a
 * second after the last cycle, also gives V8's own view (heap used and total, external memory).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import type { ImageRuntime } from '../deploy/image-runtime.js';
import { exited, firstLine, killGroup, procReader, type ChildTracker } from './child.js';

export interface ServeScale {
  targets: number;
  cycles: number;
  outcomes: Record<string, number>;
  wallSeconds: number;
  cpuSeconds: number;
  rssMaxMiB: number;
  rssMeanMiB: number;
  rssAfterMiB: number;
  /** V8's heap and external memory after the run, from the last scrape's nodejs_* series. */
  heapUsedMiB: number;
  heapTotalMiB: number;
  externalMiB: number;
  metricsBytes: number;
}

export interface ServeScaleOptions {
  urls: readonly string[];
  /** The config's `scenarios:`; all of them when undefined. */
  scenarios?: readonly string[];
  concurrency: number;
  /** A scratch folder of this run: config, store, installation home. */
  dir: string;
  /** How the container image runs Node (its ENV and the node flags of its ENTRYPOINT); Node's defaults when undefined. */
  runtime?: ImageRuntime;
  scrapeEveryMs?: number;
  timeoutMs?: number;
}

const SCRAPE_EVERY_MS = 30_000;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const mib = (b: number): number => Math.round((b / 2 ** 20) * 10) / 10;

function configYaml(o: ServeScaleOptions): string {
  return [
    'listen: 127.0.0.1:0',
    `store: { path: ${join(o.dir, 'store.sqlite')}, retention: 1h }`,
    'log: { level: error }',
    'schedule: { interval: 1h, timeout: 30m, jitter: 1s }',
    'budget: { tokens_per_hour: 1000000000 }',
    `concurrency: { global: ${o.concurrency}, per_target: 2 }`,
    ...(o.scenarios === undefined ? [] : [`scenarios: [${o.scenarios.join(', ')}]`]),
    'targets:',
    ...o.urls.map((u, i) => `  - { name: t${i}, base_url: "${u}" }`),
  ].join('\n') + '\n';
}

function sampleOf(text: string, name: string): number {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  if (m === null) throw new Error(`the serve process's /metrics has no ${name}`);
  return Number(m[1]);
}

export async function measureServe(children: ChildTracker, o: ServeScaleOptions): Promise<ServeScale> {
  const configFile = join(o.dir, 'serve.yaml');
  writeFileSync(configFile, configYaml(o));
  const serve: ChildProcess = children.spawn(process.execPath, [...(o.runtime?.nodeArgs ?? []), 'bin/kvcanary.js', 'serve', '--config', configFile], {
    stderr: 'pipe', env: { ...process.env, NODE_OPTIONS: '', ...o.runtime?.env, KVCANARY_HOME: join(o.dir, 'home') },
  });
  const stderr: string[] = [];
  serve.stderr!.on('data', (d: Buffer) => {
    stderr.push(d.toString('utf8'));
    if (stderr.length > 20) stderr.shift();
  });
  const fail = (what: string): Error => new Error(`${what}; serve's stderr: ${stderr.join('').slice(-800)}`);
  const usage = procReader();
  const rss: number[] = [];
  let sampler: NodeJS.Timeout | undefined;
  let scraper: NodeJS.Timeout | undefined;
  try {
    const first = await firstLine(serve, 120_000).catch((err: Error) => { throw fail(err.message); });
    const base = /(http:\/\/\S+?)\/?\s/.exec(`${first} `)?.[1];
    if (base === undefined) throw fail(`serve printed no URL: ${first}`);
    const pid = serve.pid!;
    const u0 = usage(pid);
    if (u0 === undefined) throw fail('could not read the serve process in /proc');
    const t0 = performance.now();
    sampler = setInterval(() => {
      const u = usage(pid);
      if (u !== undefined) rss.push(u.rssBytes);
    }, 250);
    const scrape = async (): Promise<string> => (await fetch(`${base}/metrics`)).text();
    scraper = setInterval(() => void scrape().catch(() => undefined), o.scrapeEveryMs ?? SCRAPE_EVERY_MS);

    const deadline = t0 + (o.timeoutMs ?? 3_600_000);
    let outcomes: Array<string | null> = [];
    for (;;) {
      await sleep(1000);
      if (serve.exitCode !== null) throw fail(`serve exited (${serve.exitCode}) before every target finished a cycle`);
      outcomes = ((await (await fetch(`${base}/api/targets`)).json()) as Array<{ lastOutcome: string | null }>).map((t) => t.lastOutcome);
      if (outcomes.length === o.urls.length && outcomes.every((x) => x !== null)) break;
      if (performance.now() > deadline) throw fail(`${outcomes.filter((x) => x !== null).length} of ${o.urls.length} targets finished a cycle in ${(o.timeoutMs ?? 3_600_000) / 1000} s`);
    }
    const wall = (performance.now() - t0) / 1000;
    const u1 = usage(pid);
    if (u1 === undefined) throw fail('could not read the serve process in /proc');
    clearInterval(scraper);
    await sleep(1000);
    const metrics = await scrape();
    const after = usage(pid)?.rssBytes ?? 0;
    clearInterval(sampler);
    const counts: Record<string, number> = {};
    for (const x of outcomes) counts[x!] = (counts[x!] ?? 0) + 1;
    return {
      targets: o.urls.length, cycles: o.urls.length, outcomes: counts, wallSeconds: Math.round(wall * 10) / 10,
      cpuSeconds: Math.round((u1.cpuSeconds - u0.cpuSeconds) * 100) / 100,
      rssMaxMiB: mib(Math.max(...rss, after)), rssMeanMiB: mib(rss.reduce((a, b) => a + b, 0) / Math.max(1, rss.length)), rssAfterMiB: mib(after),
      heapUsedMiB: mib(sampleOf(metrics, 'nodejs_heap_size_used_bytes')), heapTotalMiB: mib(sampleOf(metrics, 'nodejs_heap_size_total_bytes')),
      externalMiB: mib(sampleOf(metrics, 'nodejs_external_memory_bytes')), metricsBytes: Buffer.byteLength(metrics),
    };
  } finally {
    clearInterval(sampler);
    clearInterval(scraper);
    if (serve.exitCode === null) {
      const stopped = exited(serve);
      killGroup(serve);
      await Promise.race([stopped, sleep(20_000)]);
      if (serve.exitCode === null) killGroup(serve, 'SIGKILL');
    }
  }
}

/** Starts `targets` fake endpoints (bench/scale-endpoints.ts), measures one serve against them, stops them. */
export async function measureAgainstFakes(children: ChildTracker, o: Omit<ServeScaleOptions, 'urls'> & { targets: number }): Promise<ServeScale> {
  const { targets, ...rest } = o;
  const endpoints = children.spawnTs('bench/scale-endpoints.ts', ['--count', String(targets)]);
  try {
    const { urls } = JSON.parse(await firstLine(endpoints)) as { urls: string[] };
    return await measureServe(children, { ...rest, urls });
  } finally {
    killGroup(endpoints);
    await exited(endpoints);
  }
}
