/**
 * `npm run bench:race-calibration`: is the race power abort-race states true? Per-run recall of the race
 * faults when they fire on only a fraction of their eligible events (`kvcanary engine --fault-rate`).
 *
 * A row is one configuration of the bundled engine (preset, scale, free list, transfer latency), one race fault
 * and one rate. Each of its runs is a first contact: a new engine (its fault generator seeded anew: seed = the
 * run's index) and a new installation (`KVCANARY_HOME`), then `kvcanary run --target URL --json -q` as a child
 * process, exactly as a user types it, with `--scenario abort-race` unless `--default-runs` is given (see
 * SCENARIO_NOTE). A run is caught when it raised `cross-request-leak`. Recall is shown with its 95% Wilson
 * interval (two-sided; the lower bound is what a stated confidence is checked against).
 *
 * `statedConfidence` and `detectableRate` are what abort-race states when it passes (race-power.ts); every row
 * at a rate >= detectableRate must have a Wilson lower bound >= statedConfidence
 * (test/prober/race-calibration.test.ts holds the code to it).
 *
 *   npx tsx bench/race-calibration.ts [--runs N] [--parallel K] [--first-seed N] [--scale N] [--rows ID,...] [--default-runs] [--out FILE] [--resume]
 *
 * `--restate` rewrites only the rows' stated fields (statedConfidence, detectableRate, meetsStatedConfidence)
 * from the current statement, after race-power.ts was set from a finished run; the runs are left as measured.
 *
 * Writes bench/race-calibration.json (or --out) after every run (a row in progress has `complete: false`), so
 * partial results survive; `--resume` keeps the rows and runs already in the file and runs the rest (a resumed
 * row's runs continue its seeds). Rows run from the highest rate down (see `order`). Run it
 * under `nice -n 10` on a shared machine: the races depend on timing, and the load is recorded.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEngine, type StartEngineOptions } from '../engine-under-test/src/index.js';
import {
  ABORT_RACE_CONFIDENCE,
  ABORT_RACE_DETECTABLE_RATE,
  ABORT_RACE_MEASURED_FAULTS,
  CONCURRENT_INTERLEAVE_CONFIDENCE,
  CONCURRENT_INTERLEAVE_DETECTABLE_RATE,
  CONCURRENT_INTERLEAVE_MEASURED_FAULTS,
} from '../prober/src/probe/scenarios/race-power.js';
import { formatProportion, proportion } from './proportion.js';

export const SCENARIO_NOTE =
  'runs are `kvcanary run --scenario abort-race`: abort-race is the scenario whose power statement is calibrated here, ' +
  'and a default run adds scenarios that can only catch more (its recall is at least this), at 2-3x the time per run';

export const INTERLEAVE_SCENARIO_NOTE =
  'runs are `kvcanary run --scenario concurrent-interleave`: the scenario whose power statement is calibrated here, ' +
  'against the race fault it targets (a prefix-cache entry restored into pages another request owns, llama.cpp #27148)';

type Scenario = 'abort-race' | 'concurrent-interleave';

/** What a calibrated scenario states when it passes (race-power.ts), and where its rows are written. */
export interface Calibration {
  scenario: Scenario;
  out: string;
  /** The race faults its rows give a rate: a claim at a rate needs each on both free lists. */
  faults: readonly string[];
  detectableRate: number;
  confidence: number;
  measuredFaults: readonly string[];
  note: string;
  /** The scenario's note that counts the windows it exercised. */
  windowsNote: RegExp;
  rows: (scale: number) => RowSpec[];
}

export function calibration(scenario: string): Calibration {
  if (scenario === 'abort-race') {
    return {
      scenario, out: 'bench/race-calibration.json', faults: ['late-write', 'offload-release-race'],
      detectableRate: ABORT_RACE_DETECTABLE_RATE, confidence: ABORT_RACE_CONFIDENCE, measuredFaults: ABORT_RACE_MEASURED_FAULTS,
      note: SCENARIO_NOTE, windowsNote: /race window\(s\) exercised/, rows: rowSpecs,
    };
  }
  if (scenario === 'concurrent-interleave') {
    return {
      scenario, out: 'bench/race-calibration-interleave.json', faults: ['prompt-cache-restore-race'],
      detectableRate: CONCURRENT_INTERLEAVE_DETECTABLE_RATE, confidence: CONCURRENT_INTERLEAVE_CONFIDENCE, measuredFaults: CONCURRENT_INTERLEAVE_MEASURED_FAULTS,
      note: INTERLEAVE_SCENARIO_NOTE, windowsNote: /window\(s\) in \d+ wave\(s\)/, rows: interleaveRowSpecs,
    };
  }
  throw new Error(`--scenario: expected abort-race or concurrent-interleave, got ${JSON.stringify(scenario.slice(0, 40))}`);
}

interface RowSpec {
  id: string;
  fault: 'late-write' | 'offload-release-race' | 'prompt-cache-restore-race';
  preset: string;
  freeList: 'fifo' | 'lifo';
  scale: number;
  rate: number;
  /** Disaggregated presets only: a KV transfer batch's latency (absent on one node: no transfers). */
  transferLatencyMs?: number;
  /** The scenario's workload was tuned on this configuration (its preset at scale 64, 4 ms transfers where there are transfers). */
  tuned: boolean;
}

export function rowSpecs(scale = 64): RowSpec[] {
  const rows: RowSpec[] = [];
  for (const fault of ['late-write', 'offload-release-race'] as const) {
    for (const freeList of ['fifo', 'lifo'] as const) {
      for (const rate of [0.05, 0.1, 0.2, 0.5]) {
        rows.push({ id: `${fault}/${freeList}/${rate}`, fault, preset: 'remediated', freeList, scale, rate, transferLatencyMs: 4, tuned: true });
      }
    }
  }
  // Never tuned on: transfers four times slower (16 ms a batch).
  for (const fault of ['late-write', 'offload-release-race'] as const) {
    for (const rate of [0.1, 0.2, 0.5]) {
      rows.push({ id: `${fault}/fifo/${rate}/16ms`, fault, preset: 'remediated', freeList: 'fifo', scale, rate, transferLatencyMs: 16, tuned: false });
    }
  }
  return rows;
}

/**
 * concurrent-interleave against `prompt-cache-restore-race` on the prefix-cache preset (`single`), FIFO and
 * LIFO free lists; never tuned on: half the scale (a pool and context twice as large, so the waves fill it
 * half as much), and a quarter of it with a FIFO list.
 */
export function interleaveRowSpecs(scale = 64): RowSpec[] {
  const fault = 'prompt-cache-restore-race';
  const rows: RowSpec[] = [];
  for (const freeList of ['fifo', 'lifo'] as const) {
    for (const rate of [0.05, 0.1, 0.2, 0.5]) {
      rows.push({ id: `${fault}/${freeList}/${rate}`, fault, preset: 'single', freeList, scale, rate, tuned: true });
    }
  }
  const untuned = Math.max(1, Math.floor(scale / 2));
  for (const freeList of ['fifo', 'lifo'] as const) {
    for (const rate of [0.1, 0.2, 0.5]) {
      rows.push({ id: `${fault}/${freeList}/${rate}/scale${untuned}`, fault, preset: 'single', freeList, scale: untuned, rate, tuned: false });
    }
  }
  // A quarter of the scale (a pool four times as large), FIFO: the order in which freed pages come back last.
  const quarter = Math.max(1, Math.floor(scale / 4));
  for (const rate of [0.1, 0.2, 0.5]) {
    rows.push({ id: `${fault}/fifo/${rate}/scale${quarter}`, fault, preset: 'single', freeList: 'fifo', scale: quarter, rate, tuned: false });
  }
  return rows;
}

interface RunRecord {
  seed: number;
  exit: number | null;
  ms: number;
  caught: boolean;
  outcome: string | undefined;
  reason: string | undefined;
  power: { trials: number; detectableRate: number; confidence: number } | undefined;
  windows: string | undefined;
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

interface ScenarioDoc {
  name: string;
  outcome: string;
  reason?: string;
  power?: { trials: number; detectableRate: number; confidence: number };
  notes?: string[];
}

async function oneRun(cal: Calibration, spec: RowSpec, seed: number, defaultRuns: boolean): Promise<RunRecord> {
  const options: StartEngineOptions = {
    preset: spec.preset,
    scale: spec.scale,
    freeList: spec.freeList,
    faults: [spec.fault],
    faultRates: { [spec.fault]: spec.rate },
    faultSeed: seed,
    transferLatencyMs: spec.transferLatencyMs,
    log: () => {},
  };
  const engine = await startEngine(options);
  const home = mkdtempSync(join(tmpdir(), 'kvc-race-cal-'));
  const t0 = performance.now();
  try {
    const args = ['bin/kvcanary.js', 'run', '--target', engine.url, '--json', '-q', ...(defaultRuns ? [] : ['--scenario', cal.scenario])];
    const { exit, stdout } = await new Promise<{ exit: number | null; stdout: string }>((resolve, reject) => {
      const child = spawn(process.execPath, args, { env: { ...process.env, KVCANARY_HOME: home }, stdio: ['ignore', 'pipe', 'ignore'] });
      let text = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (text += d));
      child.on('error', reject);
      child.on('close', (code) => resolve({ exit: code, stdout: text }));
    });
    const ms = performance.now() - t0;
    let doc: { findings?: { kind: string }[]; scenarios?: ScenarioDoc[] } = {};
    try {
      doc = JSON.parse(stdout) as typeof doc;
    } catch {
      // no JSON: recorded as not caught, with its exit code
    }
    const race = doc.scenarios?.find((s) => s.name === cal.scenario);
    return {
      seed,
      exit,
      ms: Math.round(ms),
      caught: (doc.findings ?? []).some((f) => f.kind === 'cross-request-leak'),
      outcome: race?.outcome,
      reason: race?.reason,
      power: race?.power,
      windows: race?.notes?.find((n) => cal.windowsNote.test(n)),
    };
  } finally {
    await engine.close();
    rmSync(home, { recursive: true, force: true });
  }
}

function summarise(cal: Calibration, spec: RowSpec, records: RunRecord[], runs: number) {
  const caught = records.filter((r) => r.caught).length;
  const recall = proportion(caught, records.length);
  const ms = records.map((r) => r.ms).sort((a, b) => a - b);
  const passes = records.filter((r) => r.outcome === 'pass');
  return {
    fault: spec.fault,
    preset: spec.preset,
    freeList: spec.freeList,
    scale: spec.scale,
    rate: spec.rate,
    transferLatencyMs: spec.transferLatencyMs,
    tuned: spec.tuned,
    runs: records.length,
    caught,
    statedConfidence: cal.confidence,
    detectableRate: cal.detectableRate,
    complete: records.length >= runs,
    recall,
    /** Rows at rates >= detectableRate: the Wilson lower bound reaches the stated confidence. */
    meetsStatedConfidence: spec.rate >= cal.detectableRate ? (recall.low ?? 0) >= cal.confidence : null,
    /** What the runs that passed stated (the scenario's own power line). */
    passedRuns: passes.length,
    passedRunsConfidence: passes.length > 0 ? Math.min(...passes.map((r) => r.power?.confidence ?? 0)) : null,
    medianRunS: Math.round((ms[Math.floor(ms.length / 2)] ?? 0) / 100) / 10,
    records,
  };
}

interface FinishedRow {
  fault: string;
  freeList: string;
  rate: number;
  complete: boolean;
  runs: number;
  caught: number;
}

/**
 * What the finished rows support, per measured rate r: the smallest Wilson lower bound over the finished rows
 * at rates >= r, when each of `faults` has a finished row at a rate >= r on both free lists (else nothing is
 * claimed at r).
 */
export function supportedClaims(rows: readonly FinishedRow[], faults: readonly string[] = ['late-write', 'offload-release-race']): { rate: number; confidence: number; rows: number }[] {
  const finished = rows.filter((r) => r.complete);
  const rates = [...new Set(finished.map((r) => r.rate))].sort((a, b) => a - b);
  const claims = [];
  for (const rate of rates) {
    const at = finished.filter((r) => r.rate >= rate);
    const covered = faults.every((f) => ['fifo', 'lifo'].every((l) => at.some((r) => r.fault === f && r.freeList === l)));
    if (!covered) continue;
    const low = Math.min(...at.map((r) => proportion(r.caught, r.runs).low ?? 0));
    claims.push({ rate, confidence: Math.floor(low * 100) / 100, rows: at.length });
  }
  return claims;
}

/** `--restate`: the stated fields of every row from the current statement (race-power.ts); the runs stay as measured. */
function restate(cal: Calibration, out: string): void {
  const doc = JSON.parse(readFileSync(out, 'utf8')) as { measuredFaults?: readonly string[]; rows: (FinishedRow & { statedConfidence: number; detectableRate: number; meetsStatedConfidence: boolean | null; recall: { low: number | null } })[] };
  doc.measuredFaults = cal.measuredFaults;
  for (const row of doc.rows) {
    row.statedConfidence = cal.confidence;
    row.detectableRate = cal.detectableRate;
    row.meetsStatedConfidence = row.rate >= cal.detectableRate ? (row.recall.low ?? 0) >= cal.confidence : null;
  }
  writeFileSync(out, JSON.stringify(doc, null, 2) + '\n');
}

async function main(): Promise<void> {
  const cal = calibration(arg('scenario') ?? 'abort-race');
  if (process.argv.includes('--restate')) {
    restate(cal, arg('out') ?? cal.out);
    return;
  }
  const runs = Number(arg('runs') ?? 30);
  const parallel = Number(arg('parallel') ?? 2);
  const defaultRuns = process.argv.includes('--default-runs');
  /** Run i's fault seed is firstSeed + i: a second process on the same row takes other seeds. */
  const firstSeed = Number(arg('first-seed') ?? 1);
  const wanted = arg('rows')?.split(',');
  const out = arg('out') ?? cal.out;
  const specs = cal.rows(Number(arg('scale') ?? 64)).filter((r) => wanted === undefined || wanted.includes(r.id));
  const command = `npx tsx bench/race-calibration.ts ${process.argv.slice(2).join(' ')}`.trim();
  type Row = ReturnType<typeof summarise> & { id: string };
  const done = new Map<string, Row>();
  const records = new Map<string, RunRecord[]>(specs.map((s) => [s.id, []]));
  let startedAt = new Date().toISOString();
  /** Rows already in the file that `--rows` did not select: kept as they are, never dropped by a rewrite. */
  const kept: Row[] = [];
  if (process.argv.includes('--resume') && existsSync(out)) {
    const earlier = JSON.parse(readFileSync(out, 'utf8')) as { startedAt: string; rows: Row[] };
    startedAt = earlier.startedAt;
    for (const row of earlier.rows) {
      if (!specs.some((s) => s.id === row.id)) kept.push(row);
      else if (row.complete) done.set(row.id, row);
      else if (records.has(row.id)) records.set(row.id, row.records);
    }
  }
  const loadAtStart = loadavg()[0]!;
  const write = (): void => {
    const rows = specs
      .filter((s) => done.has(s.id) || (records.get(s.id)?.length ?? 0) > 0)
      .map((s) => done.get(s.id) ?? { id: s.id, ...summarise(cal, s, records.get(s.id)!, runs) })
      .concat(kept);
    const doc = {
      command,
      scenario: defaultRuns ? 'default run (every default scenario)' : cal.scenario,
      scenarioNote: defaultRuns ? undefined : cal.note,
      confidenceCheck: 'Wilson score 95% interval (two-sided): a row at a rate >= detectableRate meets the statement when its lower bound >= statedConfidence',
      runsPerRow: runs,
      plannedRows: specs.map((s) => s.id),
      measuredFaults: cal.measuredFaults,
      parallel,
      startedAt,
      measuredAt: new Date().toISOString(),
      loadAverage: { start: loadAtStart, end: loadavg()[0]! },
      rows,
    };
    writeFileSync(out, JSON.stringify(doc, null, 2) + '\n');
  };
  // Rates from high to low (the tuned configurations first within a rate): a bench cut short keeps every
  // configuration at the rates it reached, and the statement rests on the lowest rate all of them reached.
  const order = (s: RowSpec): number => -s.rate * 10 + (s.tuned ? 0 : 1);
  const queue: { spec: RowSpec; i: number }[] = [];
  for (const spec of [...specs].sort((a, b) => order(a) - order(b))) {
    if (done.has(spec.id)) continue;
    for (let i = records.get(spec.id)!.length; i < runs; i++) queue.push({ spec, i });
  }
  const worker = async (): Promise<void> => {
    for (let job = queue.shift(); job !== undefined; job = queue.shift()) {
      const r = await oneRun(cal, job.spec, firstSeed + job.i, defaultRuns);
      const list = records.get(job.spec.id)!;
      list.push(r);
      write();
      if (list.length === runs) {
        const row = summarise(cal, job.spec, list, runs);
        done.set(job.spec.id, { id: job.spec.id, ...row });
        console.log(
          `${job.spec.id.padEnd(34)} caught ${formatProportion(row.recall)} (${row.caught}/${row.runs})  passed ${row.passedRuns}  median run ${row.medianRunS} s` +
            (row.meetsStatedConfidence === null ? '' : row.meetsStatedConfidence ? '  meets stated' : '  BELOW stated'),
        );
        write();
      }
    }
  };
  await Promise.all(Array.from({ length: parallel }, () => worker()));
  write();
  for (const c of supportedClaims([...done.values()], cal.faults)) console.log(`supported: rate >= ${c.rate}: caught in >= ${c.confidence} of runs (${c.rows} finished rows)`);
}

if (process.argv[1]?.endsWith('race-calibration.ts')) await main();
