/**
 * Child process of `npm run bench:scale`: one `serve` replica (createService with the real probe, store and
 * metrics) over the URLs in FILE, every target due within a second with the default scenarios (all), run
 * until every target has finished one cycle. Prints one JSON line: targets, cycles, wall seconds,
 * this process's CPU seconds, and RSS (sampled every 250 ms, and after the run with every target loaded).
 *
 *   node --import tsx bench/scale-prober.ts --urls FILE [--concurrency 16] [--scenario NAME]...
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { parseConfig } from '../prober/src/service/config.js';
import { createService } from '../prober/src/service/service.js';
import { createInstallationRegistry, persistPlantings } from '../prober/src/service/installation.js';
import { createProbe } from '../prober/src/probe/probe.js';
import { createScanner } from '../prober/src/probe/scanner.js';
import { SCENARIO_NAMES } from '../prober/src/probe/scenarios/index.js';

const { values } = parseArgs({ options: { urls: { type: 'string' }, concurrency: { type: 'string', default: '16' }, scenario: { type: 'string', multiple: true } }, strict: true });
const urls = (JSON.parse(readFileSync(values.urls!, 'utf8')) as { urls: string[] }).urls;
const cycles = 1; // every target once: the interval is 1h
const dir = mkdtempSync(join(tmpdir(), 'kvcanary-scale-'));
const yaml = `listen: 127.0.0.1:0
store: { path: ${join(dir, 'store.sqlite')}, retention: 1h }
log: { level: error }
schedule: { interval: 1h, timeout: 30m, jitter: 1s }
budget: { tokens_per_hour: 1000000000 }
concurrency: { global: ${Number(values.concurrency)}, per_target: 2 }
${values.scenario === undefined ? '' : `scenarios: [${values.scenario.join(', ')}]\n`}targets:
${urls.map((u, i) => `  - { name: t${i}, base_url: "${u}" }`).join('\n')}
`;
const config = parseConfig(yaml, { knownScenarios: SCENARIO_NAMES });
const done = new Map<string, number>();
let finished = 0;
let resolveAll: () => void = () => undefined;
const all = new Promise<void>((r) => { resolveAll = r; });
const rss: number[] = [];
const sampler = setInterval(() => rss.push(process.memoryUsage.rss()), 250);
const cpu0 = process.cpuUsage();
const t0 = performance.now();
let outcomes: Record<string, number> = {};
const service = await createService({
  config,
  logger: pino({ level: 'error' }),
  // As `serve` builds it: markers under an installation key (here a fresh one in the bench's folder).
  createProbe: ({ store }) => {
    const registry = createInstallationRegistry({ store, since: Date.now(), keyFile: join(dir, 'marker.key') });
    return createProbe({ registry, scanner: createScanner(registry), onMarkers: persistPlantings(store) });
  },
  onRun: (run) => {
    outcomes = { ...outcomes, [run.outcome]: (outcomes[run.outcome] ?? 0) + 1 };
    const n = (done.get(run.target) ?? 0) + 1;
    done.set(run.target, n);
    if (n === cycles && ++finished === urls.length) resolveAll();
  },
});
await all;
const wall = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
clearInterval(sampler);
global.gc?.();
await new Promise((r) => setTimeout(r, 500));
const loadedRss = process.memoryUsage.rss();
await service.stop();
rmSync(dir, { recursive: true, force: true });
const mib = (b: number): number => Math.round((b / 2 ** 20) * 10) / 10;
process.stdout.write(JSON.stringify({
  targets: urls.length, cycles: urls.length * cycles, outcomes, wallSeconds: Math.round(wall * 10) / 10,
  cpuSeconds: Math.round(((cpu.user + cpu.system) / 1e6) * 100) / 100,
  rssMaxMiB: mib(Math.max(...rss, loadedRss)), rssMeanMiB: mib(rss.reduce((a, b) => a + b, 0) / Math.max(1, rss.length)), rssAfterMiB: mib(loadedRss),
}) + '\n');
process.exit(0);
