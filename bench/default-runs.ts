/**
 * `npm run bench:default-runs`: what one default `kvcanary run` decides, run after run, exactly as a user
 * types it (`kvcanary run --target URL --json -q`, a child process each, one installation home per
 * configuration so later runs attribute earlier runs' markers as a real installation does).
 *
 * Per configuration of the bundled engine (1/64 scale): how often a run exited 1 with `cross-request-leak`
 * (recall, on the race faults), how often it raised `prefix-timing-side-channel` (every configuration here
 * has a salted prefix cache or none, so any timing finding is a false alarm), every exit code, and how long
 * a run took. Proportions with 95% Wilson intervals; zero counts with their exact one-sided 95% bound.
 *
 *   npx tsx bench/default-runs.ts [--runs N] [--configs NAME,...] [--out FILE]
 *
 * Writes bench/default-runs.json (or --out) after every configuration and prints a table.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEngine, type StartEngineOptions } from '../engine-under-test/src/index.js';
import { runKvcanary } from './cli-run.js';
import { formatProportion, proportion, zeroEventUpperBound } from './proportion.js';

interface Config {
  name: string;
  engine: StartEngineOptions;
  /** The fault a run must catch (cross-request-leak), if any. */
  race: boolean;
}

const CONFIGS: Config[] = [
  { name: 'remediated', engine: { preset: 'remediated', scale: 64 }, race: false },
  { name: 'hardened', engine: { preset: 'hardened', scale: 64 }, race: false },
  { name: 'remediated+late-write', engine: { preset: 'remediated', scale: 64, faults: ['late-write'] }, race: true },
  { name: 'remediated+offload-release-race', engine: { preset: 'remediated', scale: 64, faults: ['offload-release-race'] }, race: true },
];

interface RunRecord {
  exit: number | null;
  ms: number;
  kinds: string[];
  outcomes: Record<string, string>;
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

async function runCli(url: string, home: string): Promise<RunRecord> {
  const run = await runKvcanary<{ findings?: { kind: string }[]; scenarios?: { name: string; outcome: string }[] }>(url, home);
  if (run.doc === undefined) return { exit: run.exit, ms: run.ms, kinds: ['(no JSON on stdout)'], outcomes: {} };
  return {
    exit: run.exit,
    ms: run.ms,
    kinds: [...new Set((run.doc.findings ?? []).map((f) => f.kind))],
    outcomes: Object.fromEntries((run.doc.scenarios ?? []).map((s) => [s.name, s.outcome])),
  };
}

const runs = Number(arg('runs') ?? 10);
const wanted = arg('configs')?.split(',');
const out = arg('out') ?? 'bench/default-runs.json';
const command = `npx tsx bench/default-runs.ts ${process.argv.slice(2).join(' ')}`.trim();
const loadAtStart = loadavg()[0]!;
const rows = [];
for (const config of CONFIGS.filter((c) => wanted === undefined || wanted.includes(c.name))) {
  const engine = await startEngine({ ...config.engine, log: () => {} });
  const home = mkdtempSync(join(tmpdir(), 'kvc-default-runs-'));
  const records: RunRecord[] = [];
  try {
    for (let i = 0; i < runs; i++) records.push(await runCli(engine.url, home));
  } finally {
    await engine.close();
    rmSync(home, { recursive: true, force: true });
  }
  const leak = records.filter((r) => r.exit === 1 && r.kinds.includes('cross-request-leak')).length;
  const timing = records.filter((r) => r.kinds.includes('prefix-timing-side-channel')).length;
  const exits: Record<string, number> = {};
  for (const r of records) exits[String(r.exit)] = (exits[String(r.exit)] ?? 0) + 1;
  const ms = records.map((r) => r.ms).sort((a, b) => a - b);
  const row = {
    config: config.name,
    race: config.race,
    runs,
    leakExit1: leak,
    recall: config.race ? proportion(leak, runs) : undefined,
    timingAlarms: timing,
    timingAlarmBound: timing === 0 ? zeroEventUpperBound(runs) : proportion(timing, runs).high,
    exits,
    medianRunS: Math.round((ms[Math.floor(ms.length / 2)] ?? 0) / 100) / 10,
    maxRunS: Math.round((ms.at(-1) ?? 0) / 100) / 10,
    records,
  };
  rows.push(row);
  console.log(
    `${config.name.padEnd(34)} ${config.race ? `exit 1 with cross-request-leak ${formatProportion(row.recall!)}` : `exit codes ${JSON.stringify(exits)}`}` +
      `  timing alarms ${timing}/${runs}  median ${row.medianRunS} s, max ${row.maxRunS} s`,
  );
  writeFileSync(out, JSON.stringify({ command, runsPerConfig: runs, scale: 64, measuredAt: new Date().toISOString(), loadAverage: { start: loadAtStart, end: loadavg()[0]! }, rows }, null, 2) + '\n');
}
