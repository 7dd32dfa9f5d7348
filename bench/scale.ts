/**
 * `npm run bench:scale`: one prober replica against 50, 200 and 1,000 fast fake endpoints of the bench's
 * own (bench/scale-endpoints.ts, a child process), each target due at once, until every target has finished
 * one cycle. The replica is `serve` as production runs it (bench/scale-serve.ts): `node bin/kvcanary.js
 * serve`, on the compiled build in dist/ (built here first when missing or older than the sources), in a
 * process of its own, measured from /proc. Two scenario sets: the cheap tier a fleet runs every cycle
 * (capacity-audit + overlimit-rejection) at every size, and every scenario (the default set) at the sizes
 * given by --full (default 50). Also how three shards split 1,000 target names (rendezvous hashing).
 * Writes bench/SCALE.md and bench/scale.json.
 *
 * Every run uses the container image's NODE_OPTIONS (V8 heap sizing, deploy/Dockerfile); the sizes given by
 * --node-defaults (default 1000) run the cheap tier once more without them, Node sizing the heap for this
 * host, to show what the setting does.
 *
 * Each row is measured --repeat times (default 3): the run with the highest RSS max stands for it (the goals
 * are judged on the worst run), CPU per target-cycle is the median.
 *
 *   nice -n 10 npm run bench:scale [-- --sizes 50,200,1000] [--full 50] [--node-defaults 1000] [--repeat 3]
 *   npx tsx bench/render-figures.ts    # then: docs/fleet.md's sizing table from bench/scale.json
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { tmpdir, totalmem } from 'node:os';
import { createChildTracker, REPO_ROOT } from './child.js';
import { measureAgainstFakes, type ServeScale } from './scale-serve.js';
import { compiledCli } from '../bin/compiled-build.js';
import { describeRuntime, imageRuntime } from '../deploy/image-runtime.js';
import { shardOf } from '../prober/src/service/shard.js';

const { values } = parseArgs({ options: { sizes: { type: 'string', default: '50,200,1000' }, full: { type: 'string', default: '50' }, 'node-defaults': { type: 'string', default: '1000' }, repeat: { type: 'string', default: '3' } }, strict: true });
const list = (v: string): number[] => (v === '' ? [] : v.split(',').map(Number));
const sizes = list(values.sizes);
const full = list(values.full);
const nodeDefaults = list(values['node-defaults']);
const repeat = Number(values.repeat);
if (!Number.isInteger(repeat) || repeat < 1) throw new Error(`bench:scale: --repeat must be a whole number >= 1, got ${values.repeat}`);
const CHEAP = ['capacity-audit', 'overlimit-rejection'];

/** A row: the run of `repeat` with the highest RSS max (goals are judged on the worst), CPU their median. */
interface Row extends ServeScale { set: string; heap: 'image' | 'Node defaults'; cpuPerTargetCycle: number; rssMaxMiBEach: number[]; cpuPerTargetCycleEach: number[] }

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

// What production runs: the compiled build. The launcher takes it only when fresh, so check as it does.
if (compiledCli() === undefined) {
  process.stderr.write('bench:scale: dist/ missing or older than the sources: npm run build\n');
  const built = spawnSync(process.execPath, ['scripts/build.mjs'], { cwd: REPO_ROOT, stdio: 'inherit' });
  if (built.status !== 0 || compiledCli() === undefined) throw new Error('bench:scale: npm run build did not leave a fresh dist/; the replica would run under tsx');
}

// And as the image runs Node (V8 flags and heap sizing, malloc tunables: deploy/Dockerfile).
const runtime = imageRuntime();
const runtimeText = describeRuntime(runtime);

const children = createChildTracker();
process.once('SIGINT', () => { children.killAll(); process.exit(130); });
const dir = mkdtempSync(join(tmpdir(), 'kvcanary-bench-scale-'));

async function measureOnce(targets: number, scenarios: string[] | undefined, heap: Row['heap'], attempt: number): Promise<ServeScale> {
  const run = join(dir, `${targets}-${scenarios === undefined ? 'all' : 'cheap'}-${heap === 'image' ? 'image' : 'node'}-${attempt}`);
  mkdirSync(run);
  const out = await measureAgainstFakes(children, { targets, concurrency: 16, dir: run, ...(heap === 'image' ? { runtime } : {}), ...(scenarios === undefined ? {} : { scenarios }) });
  process.stderr.write(`${JSON.stringify({ scenarios: scenarios ?? 'all', heap, attempt, ...out })}\n`);
  return out;
}

async function measure(set: string, targets: number, scenarios: string[] | undefined, heap: Row['heap'] = 'image'): Promise<Row> {
  const runs: ServeScale[] = [];
  for (let attempt = 1; attempt <= repeat; attempt++) runs.push(await measureOnce(targets, scenarios, heap, attempt));
  const perCycle = runs.map((r) => Math.round((r.cpuSeconds / r.cycles) * 1000) / 1000);
  const worst = runs.reduce((a, b) => (b.rssMaxMiB > a.rssMaxMiB ? b : a));
  return { set, heap, ...worst, cpuPerTargetCycle: Math.round(median(perCycle) * 1000) / 1000, rssMaxMiBEach: runs.map((r) => r.rssMaxMiB), cpuPerTargetCycleEach: perCycle };
}

const rows: Row[] = [];
for (const n of sizes) rows.push(await measure('cheap tier (capacity-audit, overlimit-rejection)', n, CHEAP));
for (const n of full) rows.push(await measure('every scenario (default)', n, undefined));
for (const n of nodeDefaults) rows.push(await measure('cheap tier (capacity-audit, overlimit-rejection)', n, CHEAP, 'Node defaults'));

const names = Array.from({ length: 1000 }, (_, i) => `glm/10.${Math.floor(i / 250)}.${i % 250}.1:8000`);
const split = [0, 0, 0];
for (const n of names) split[shardOf(n, 3)]!++;
const dev = Math.max(...split.map((c) => Math.abs(c - 1000 / 3) / (1000 / 3))) * 100;
const moved = names.filter((n) => shardOf(n, 3) !== shardOf(n, 4)).length;

const md = [
  '# Scale: one prober replica, many targets',
  '',
  'Measured by `nice -n 10 npm run bench:scale` (bench/scale.ts, bench/scale-serve.ts): one `serve` replica run',
  'as production runs it, `serve --config FILE` on the compiled build in dist/, run the way the container image',
  `runs Node (\`${runtimeText}\`, deploy/Dockerfile), real probe, store and metrics`,
  '(concurrency.global 16, per_target 2), against N fast fake endpoints',
  '(bench/scale-endpoints.ts, a separate process), every target due within a second, until each finished one',
  'cycle. Read from /proc: CPU is the serve process\'s user+system time from when it printed its URL (targets',
  'loaded) until every target had an outcome; RSS sampled every 250 ms, and once more a second after the run.',
  `Each row was measured ${repeat} time${repeat === 1 ? '' : 's'} (a fresh serve and fresh endpoints each time): its figures are those of the run with`,
  'the highest RSS max (the sizing goals are judged on the worst), its CPU s per target-cycle the median of them all;',
  'every run\'s RSS max and CPU s per target-cycle are in the last two columns.',
  '/metrics is scraped every 30 s, as the ServiceMonitor in deploy/k8s does; heap and external memory are V8\'s',
  'own figures from the last scrape (nodejs_heap_size_used_bytes, nodejs_heap_size_total_bytes,',
  'nodejs_external_memory_bytes).',
  `Host: ${process.platform}, Node ${process.version}, ${Math.round(totalmem() / 2 ** 30)} GiB of memory, ${new Date().toISOString().slice(0, 10)}, on a shared 2-core machine.`,
  '',
  'The fakes expose no KV pool (capacity-audit is not applicable) and no prefix cache, and reject over-limit',
  'prompts with vLLM\'s 400; the outcomes are what the scenarios conclude about such an endpoint. The figures',
  'are the prober\'s own cost per target, not a verdict on anything real.',
  '',
  '"V8 heap" is "image" for the image\'s Node flags and environment, "Node defaults" for none (Node sizes the',
  'heap from this host\'s memory, as it would in a container without a memory limit).',
  '',
  '| scenarios | targets | V8 heap | cycles | outcomes | wall s | CPU s | CPU s per target-cycle | RSS max MiB | RSS mean MiB | RSS after MiB | heap used / total MiB after | external MiB after | /metrics KiB | RSS max MiB, each run | CPU s per target-cycle, each run |',
  '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ...rows.map((r) => `| ${r.set} | ${r.targets} | ${r.heap} | ${r.cycles} | ${Object.entries(r.outcomes).map(([k, v]) => `${k} ${v}`).join(', ')} | ${r.wallSeconds} | ${r.cpuSeconds} | **${r.cpuPerTargetCycle}** | ${r.rssMaxMiB} | ${r.rssMeanMiB} | ${r.rssAfterMiB} | ${r.heapUsedMiB} / ${r.heapTotalMiB} | ${r.externalMiB} | ${Math.round(r.metricsBytes / 1024)} | ${r.rssMaxMiBEach.join(', ')} | ${r.cpuPerTargetCycleEach.join(', ')} |`),
  '',
  `Three shards over 1,000 target names (rendezvous hashing): ${split.join(' / ')} (at most ${dev.toFixed(1)}% from a third); going to four shards moves ${moved} of them (${(moved / 10).toFixed(1)}%).`,
  '',
].join('\n');
writeFileSync(join(REPO_ROOT, 'bench', 'SCALE.md'), md);
writeFileSync(join(REPO_ROOT, 'bench', 'scale.json'), JSON.stringify({ runtime: `${runtimeText}; serve on the compiled build (dist/)`, rows, shards: { split, movedToFour: moved } }, null, 2) + '\n');
rmSync(dir, { recursive: true, force: true });
process.stdout.write(md);
