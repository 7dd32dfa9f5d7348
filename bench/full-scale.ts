/**
 * `npx tsx bench/full-scale.ts [--scale 1] [--attention skip] [--presets incident,remediated]
 * [--scenarios a,b] [--out bench/full-scale.json]`: what each scenario costs a full-scale endpoint, measured
 * rather than projected. Every scenario once against each preset (a fresh engine per run, full-scale.ts's
 * sibling full-scale-run.ts), written to the JSON after every run (rows of other scenarios and presets
 * already in the file are kept, so a cut run resumes), with the daily totals of a healthy target
 * (`remediated`) under serve's default cost tiers and with every scenario every cycle (schedule-cost.ts).
 *
 * `--compare --scale 16`: the same runs with real attention and with `--attention skip`, side by side, into
 * bench/attention-modes.json: the prober's requests and the engine's counters in the two modes.
 *
 * `--run-arg '--ballast-hold generation' --out bench/full-scale-ballast-generation.json`: an option measured
 * the same way.
 *
 * `--merge FILE` adds another run's rows (a preset measured by a second process); `--refresh` rewrites the
 * JSON (merged rows, daily totals of the current tiers) without measuring.
 *
 * The run's budget and limits are lifted (`--budget`, `--timeout`, `--deadline` below): this measures what a
 * whole scenario costs, not what the defaults let it spend.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { SCENARIO_NAMES } from '../prober/src/probe/scenarios/index.js';
import { createChildTracker } from './child.js';
import { measureRun, type MeasuredRun } from './full-scale-run.js';
import { dailyTotals, type FullScaleFigures } from './full-scale-figures.js';

export const RUN_ARGS = ['--budget', '1000000000000', '--timeout', '1h', '--deadline', '3h', '-q'] as const;

function parse(argv: string[]) {
  const { values: v } = parseArgs({
    args: argv, strict: true, options: {
      scale: { type: 'string' }, attention: { type: 'string' }, presets: { type: 'string' }, scenarios: { type: 'string' },
      out: { type: 'string' }, compare: { type: 'boolean', default: false }, 'run-arg': { type: 'string', multiple: true },
      merge: { type: 'string', multiple: true }, refresh: { type: 'boolean', default: false },
    },
  });
  const compare = v.compare === true;
  return {
    compare,
    scale: Number(v.scale ?? (compare ? 16 : 1)),
    attention: (v.attention ?? 'skip') as 'full' | 'skip',
    presets: (v.presets ?? 'incident,remediated').split(','),
    scenarios: v.scenarios === undefined ? [...SCENARIO_NAMES] : v.scenarios.split(','),
    out: v.out ?? (compare ? 'bench/attention-modes.json' : 'bench/full-scale.json'),
    /** Extra `kvcanary run` flags (an option measured against the defaults, e.g. --ballast-hold generation). */
    merge: v.merge ?? [],
    /** Write the JSON again (rows merged, daily totals of the current tiers) without running anything. */
    refresh: v.refresh === true,
    runArgs: [...RUN_ARGS, ...(v['run-arg'] ?? []).flatMap((a) => a.split(' '))],
    command: `npx tsx bench/full-scale.ts ${argv.join(' ')}`.trim(),
  };
}

const key = (r: { name: string; preset: string; mode: string }): string => `${r.preset}/${r.name}/${r.mode}`;

async function main(argv: string[]): Promise<void> {
  const o = parse(argv);
  const children = createChildTracker();
  process.once('SIGINT', () => { children.killAll(); process.exit(130); });
  process.once('SIGTERM', () => { children.killAll(); process.exit(143); });
  const read = (f: string): { runs?: MeasuredRun[]; startedAt?: string; loadAverage?: number[]; command?: string } => (existsSync(f) ? JSON.parse(readFileSync(f, 'utf8')) : {});
  const before = read(o.out);
  const prior = [...(before.runs ?? []), ...o.merge.flatMap((f) => read(f).runs ?? [])];
  const runs = new Map(prior.map((r) => [key(r), r]));
  if (o.refresh) {
    // Keep the measuring run's command and times: nothing is measured here.
    write({ ...o, command: before.command ?? o.command }, [...runs.values()], before.startedAt ?? new Date().toISOString(), before.loadAverage?.[0] ?? loadavg()[0]!, before.loadAverage?.[1]);
    return;
  }
  const modes: ('full' | 'skip')[] = o.compare ? ['full', 'skip'] : [o.attention];
  const started = new Date().toISOString();
  const loadStart = loadavg()[0]!;
  for (const preset of o.presets) {
    for (const scenario of o.scenarios) {
      for (const attention of modes) {
        process.stderr.write(`${preset} ${scenario} (scale 1/${o.scale}, attention ${attention}) ... `);
        const r = await measureRun(children, { preset, scenario, scale: o.scale, attention, runArgs: o.runArgs });
        process.stderr.write(`${r.outcome}${r.reason ? ` (${r.reason})` : ''}: sent ${r.sent}, computed ${r.computed}, billed ${r.billed}, ${r.seconds} s\n`);
        runs.set(key(r), r);
        write(o, [...runs.values()], started, loadStart);
      }
    }
  }
}

function write(o: ReturnType<typeof parse>, runs: MeasuredRun[], started: string, loadStart: number, loadEnd = loadavg()[0]!): void {
  const meta = { command: o.command, scale: o.scale, runArgs: o.runArgs.join(' '), startedAt: started, finishedAt: new Date().toISOString(), loadAverage: [loadStart, loadEnd] };
  if (o.compare) {
    writeFileSync(o.out, JSON.stringify({ ...meta, runs }, null, 2) + '\n');
    return;
  }
  const scenarios = runs.map((r) => ({ name: r.name, preset: r.preset, sent: r.sent, computed: r.computed, billed: r.billed, seconds: r.seconds, mode: r.mode }));
  const presets = [...new Set(runs.map((r) => r.preset))];
  const unmeasured = presets.flatMap((p) => SCENARIO_NAMES.filter((n) => !runs.some((r) => r.preset === p && r.name === n)).map((n) => `${p}/${n}`));
  const doc: FullScaleFigures = { ...meta, scenarios, daily: dailyTotals(scenarios), ...(unmeasured.length > 0 ? { unmeasured } : {}), runs };
  writeFileSync(o.out, JSON.stringify(doc, null, 2) + '\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2)).catch((err) => {
    process.stderr.write(`${(err as Error).stack ?? err}\n`);
    process.exit(1);
  });
}
