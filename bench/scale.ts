/**
 * `npm run bench:scale`: one prober replica against 50, 200 and 1,000 fast fake endpoints of the bench's
 * own (bench/scale-endpoints.ts, a child process), each target due at once, until every target has finished
 * one cycle. The prober runs in a child of its own (bench/scale-prober.ts) and measures its own CPU and RSS.
 * Two scenario sets: the cheap tier a fleet runs every cycle (capacity-audit + overlimit-rejection) at every
 * size, and every scenario (the default set) at the sizes given by --full (default 50). Also how three
 * shards split 1,000 target names (rendezvous hashing). Writes bench/SCALE.md and bench/scale.json.
 *
 *   nice -n 10 npm run bench:scale [-- --sizes 50,200,1000] [--full 50]
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createChildTracker, allStdout, firstLine, killGroup, exited, REPO_ROOT } from './child.js';
import { shardOf } from '../prober/src/service/shard.js';

const { values } = parseArgs({ options: { sizes: { type: 'string', default: '50,200,1000' }, full: { type: 'string', default: '50' } }, strict: true });
const sizes = values.sizes.split(',').map(Number);
const full = values.full === '' ? [] : values.full.split(',').map(Number);
const CHEAP = ['capacity-audit', 'overlimit-rejection'];

interface Row { set: string; targets: number; cycles: number; outcomes: Record<string, number>; wallSeconds: number; cpuSeconds: number; cpuPerTargetCycle: number; rssMaxMiB: number; rssMeanMiB: number; rssAfterMiB: number }

const children = createChildTracker();
process.once('SIGINT', () => { children.killAll(); process.exit(130); });
const dir = mkdtempSync(join(tmpdir(), 'kvcanary-bench-scale-'));

async function measure(set: string, targets: number, scenarios: string[] | undefined): Promise<Row> {
  const endpoints = children.spawnTs('bench/scale-endpoints.ts', ['--count', String(targets)]);
  const urlsFile = join(dir, `urls-${targets}.json`);
  writeFileSync(urlsFile, await firstLine(endpoints));
  try {
    const prober = children.spawnTs('bench/scale-prober.ts', ['--urls', urlsFile, ...(scenarios ?? []).flatMap((s) => ['--scenario', s])]);
    const out = JSON.parse((await allStdout(prober)).trim().split('\n').pop()!) as Omit<Row, 'set' | 'cpuPerTargetCycle'>;
    const row: Row = { set, ...out, cpuPerTargetCycle: Math.round((out.cpuSeconds / out.cycles) * 1000) / 1000 };
    process.stderr.write(`${JSON.stringify(row)}\n`);
    return row;
  } finally {
    killGroup(endpoints);
    await exited(endpoints);
  }
}

const rows: Row[] = [];
for (const n of sizes) rows.push(await measure('cheap tier (capacity-audit, overlimit-rejection)', n, CHEAP));
for (const n of full) rows.push(await measure('every scenario (default)', n, undefined));

const names = Array.from({ length: 1000 }, (_, i) => `glm/10.${Math.floor(i / 250)}.${i % 250}.1:8000`);
const split = [0, 0, 0];
for (const n of names) split[shardOf(n, 3)]!++;
const dev = Math.max(...split.map((c) => Math.abs(c - 1000 / 3) / (1000 / 3))) * 100;
const moved = names.filter((n) => shardOf(n, 3) !== shardOf(n, 4)).length;

const md = [
  '# Scale: one prober replica, many targets',
  '',
  'Measured by `nice -n 10 npm run bench:scale` (bench/scale.ts): one `serve` replica (real probe, store and',
  'metrics; concurrency.global 16, per_target 2) against N fast fake endpoints (bench/scale-endpoints.ts, a',
  'separate process), every target due within a second, until each finished one cycle. CPU is the prober',
  'process\'s user+system time; RSS sampled every 250 ms and once more after the run with every target loaded.',
  `Host: ${process.platform}, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}, on a shared 2-core machine.`,
  '',
  'Every outcome is inconclusive by design of the fakes: they expose no KV pool (so capacity-audit cannot',
  'compare) and no prefix cache. The figures are the prober\'s own cost per target, not a verdict.',
  '',
  '| scenarios | targets | cycles | outcomes | wall s | CPU s | CPU s per target-cycle | RSS max MiB | RSS mean MiB | RSS after MiB |',
  '|---|---|---|---|---|---|---|---|---|---|',
  ...rows.map((r) => `| ${r.set} | ${r.targets} | ${r.cycles} | ${Object.entries(r.outcomes).map(([k, v]) => `${k} ${v}`).join(', ')} | ${r.wallSeconds} | ${r.cpuSeconds} | **${r.cpuPerTargetCycle}** | ${r.rssMaxMiB} | ${r.rssMeanMiB} | ${r.rssAfterMiB} |`),
  '',
  `Three shards over 1,000 target names (rendezvous hashing): ${split.join(' / ')} (at most ${dev.toFixed(1)}% from a third); going to four shards moves ${moved} of them (${(moved / 10).toFixed(1)}%).`,
  '',
].join('\n');
writeFileSync(join(REPO_ROOT, 'bench', 'SCALE.md'), md);
writeFileSync(join(REPO_ROOT, 'bench', 'scale.json'), JSON.stringify({ rows, shards: { split, movedToFour: moved } }, null, 2) + '\n');
process.stdout.write(md);
