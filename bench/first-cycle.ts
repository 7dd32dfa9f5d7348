/**
 * `npm run bench:first-cycle`: how often a healthy endpoint's first `serve` cycle comes back inconclusive,
 * per scenario, on a loaded machine. Run it under `nice -n 10` (children inherit the niceness).
 *
 * Each round starts `--replicas` clean bundled engines (`kvcanary engine --preset remediated --scale N`, one
 * process each) and one `kvcanary serve` per replica (its own KVCANARY_HOME, its own empty store, the
 * default schedule, budget and concurrency: so the first cycle runs every scenario at once, with no cost
 * history), all side by side, plus `--hog N` CPU-spinning processes beside them if asked. It waits for each
 * serve's first cycle in /api/runs, stops everything and starts the next round. A replica's first cycle is
 * one sample: for each scenario, whether it was inconclusive, and why (its reason and first note).
 *
 *   nice -n 10 npx tsx bench/first-cycle.ts [--cycles 102] [--replicas 3] [--scale 64] [--hog 0] [--timeout 2m] [--out FILE] [--resume]
 *
 * Writes bench/first-cycle.json (or --out) after every round: per scenario the inconclusive count over the
 * cycles with a 95% Wilson interval (or the exact one-sided bound at zero), and every inconclusive with its
 * reason and notes; and the load average at start and end. It keeps every cycle's per-scenario outcomes
 * (`samples`), so `--resume` continues a stopped run up to --cycles.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { formatProportion, proportion, zeroEventUpperBound } from './proportion.js';

function arg(name: string, dflt: number): number;
function arg(name: string, dflt: string): string;
function arg(name: string, dflt: number | string): number | string {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return dflt;
  const raw = process.argv[i + 1] ?? '';
  if (typeof dflt === 'string') return raw;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name}: expected a whole number, got ${JSON.stringify(raw.slice(0, 20))}`);
  return n;
}

const CYCLES = arg('cycles', 102);
const REPLICAS = Math.max(1, arg('replicas', 3));
const SCALE = Math.max(1, arg('scale', 64));
const HOGS = arg('hog', 0);
const OUT = arg('out', 'bench/first-cycle.json');
/** The cycle's `schedule.timeout` (default: the config default, 2m). On a machine loaded far past its cores a cycle of
 * every scenario does not fit 2m: a longer timeout separates the prober's judgement from its own time limit. */
const TIMEOUT = arg('timeout', '');
if (TIMEOUT !== '' && !/^\d+[sm]$/.test(TIMEOUT)) throw new Error(`--timeout: expected a duration like 4m or 200s, got ${JSON.stringify(TIMEOUT.slice(0, 20))}`);
/** The default 5m, or longer than a longer --timeout (a cycle's timeout must stay below its interval). */
const TIMEOUT_S = TIMEOUT === '' ? 120 : TIMEOUT.endsWith('m') ? Number(TIMEOUT.slice(0, -1)) * 60 : Number(TIMEOUT.slice(0, -1));
const INTERVAL = `${Math.max(300, TIMEOUT_S + 60)}s`;
/** How long to wait for a first cycle: its timeout, the jitter and the processes' start, with room. */
const FIRST_CYCLE_WAIT_MS = (TIMEOUT_S + 180) * 1000;


interface ScenarioSample { outcome: string; reason?: string; notes: string[] }
interface CycleSample { round: number; replica: number; outcome: string; ms: number; scenarios: Record<string, ScenarioSample> }

/** Spawns a kvcanary child and resolves with its first stdout line that holds a URL. */
function spawnWithUrl(args: string[], env: NodeJS.ProcessEnv, children: ChildProcess[]): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ['bin/kvcanary.js', ...args], { env, stdio: ['ignore', 'pipe', 'ignore'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error(`${args[0]}: no URL within 180s`)), 180_000);
    lines.on('line', (line) => {
      const m = /(http:\/\/127\.0\.0\.1:\d+)/.exec(line);
      if (m === null) return;
      clearTimeout(timer);
      lines.removeAllListeners('line');
      child.stdout!.resume();
      resolve({ child, url: m[1]! });
    });
    child.on('error', reject);
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`${args[0]} exited ${code} before printing its URL`)); });
  });
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.once('exit', () => { clearTimeout(kill); resolve(); });
    child.kill('SIGTERM');
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface ApiRun { outcome: string; startedAt: string; finishedAt: string; scenarios: { name: string; outcome: string; reason?: string; notes: string[] }[] }

async function firstCycle(serveUrl: string): Promise<ApiRun> {
  const until = Date.now() + FIRST_CYCLE_WAIT_MS;
  while (Date.now() < until) {
    await sleep(2000);
    try {
      const res = await fetch(`${serveUrl}/api/runs?limit=1`);
      const body = await res.json() as { runs: ApiRun[] };
      if (body.runs.length > 0) return body.runs[0]!;
    } catch { /* not up yet */ }
  }
  throw new Error(`no first cycle within ${FIRST_CYCLE_WAIT_MS / 1000}s`);
}

function configYaml(url: string, store: string): string {
  return `listen: 127.0.0.1:0
store: { path: ${JSON.stringify(store)} }
log: { level: warn }
schedule: { interval: ${INTERVAL}, jitter: 1s${TIMEOUT === '' ? '' : `, timeout: ${TIMEOUT}`} }
targets:
  - name: replica
    base_url: ${url}
`;
}

async function round(index: number): Promise<CycleSample[]> {
  const dirs: string[] = [];
  const children: ChildProcess[] = [];
  try {
    const engines = await Promise.all(Array.from({ length: REPLICAS }, () =>
      spawnWithUrl(['engine', '--preset', 'remediated', '--scale', String(SCALE)], process.env, children)));
    const serves = await Promise.all(engines.map(async (e) => {
      const home = mkdtempSync(join(tmpdir(), 'kvcanary-first-cycle-'));
      dirs.push(home);
      const cfg = join(home, 'kvcanary.yaml');
      writeFileSync(cfg, configYaml(e.url, join(home, 'store.sqlite')));
      return spawnWithUrl(['serve', '--config', cfg], { ...process.env, KVCANARY_HOME: home }, children);
    }));
    const runs = await Promise.all(serves.map((s) => firstCycle(s.url)));
    return runs.map((r, replica) => ({
      round: index, replica, outcome: r.outcome, ms: Date.parse(r.finishedAt) - Date.parse(r.startedAt),
      scenarios: Object.fromEntries(r.scenarios.map((s) => [s.name, {
        outcome: s.outcome, ...(s.reason === undefined ? {} : { reason: s.reason }), notes: s.outcome === 'inconclusive' ? s.notes.slice(0, 12) : [],
      }])),
    }));
  } finally {
    await Promise.all(children.reverse().map(stop));
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}

function startHogs(n: number): ChildProcess[] {
  return Array.from({ length: n }, () => spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
}

function summarize(samples: readonly CycleSample[]): object {
  const names = [...new Set(samples.flatMap((s) => Object.keys(s.scenarios)))];
  const scenarios = names.map((name) => {
    const ran = samples.filter((s) => s.scenarios[name] !== undefined);
    const inc = ran.filter((s) => s.scenarios[name]!.outcome === 'inconclusive');
    const outcomes: Record<string, number> = {};
    for (const s of ran) outcomes[s.scenarios[name]!.outcome] = (outcomes[s.scenarios[name]!.outcome] ?? 0) + 1;
    const reasons: Record<string, number> = {};
    for (const s of inc) { const r = s.scenarios[name]!.reason ?? '(none)'; reasons[r] = (reasons[r] ?? 0) + 1; }
    return {
      scenario: name, cycles: ran.length, inconclusive: inc.length, outcomes, reasons,
      rate: proportion(inc.length, ran.length), ...(inc.length === 0 ? { upper95: zeroEventUpperBound(ran.length) } : {}),
    };
  });
  const anyInc = samples.filter((s) => Object.values(s.scenarios).some((x) => x.outcome === 'inconclusive'));
  return { scenarios, cyclesWithAnyInconclusive: proportion(anyInc.length, samples.length) };
}

/** `--resume`: the samples, harness errors and start of the file's run, to continue it. */
function previousRun(): { samples: CycleSample[]; failedRounds: { round: number; error: string }[]; startedAt: string; load0: number } | undefined {
  if (!process.argv.includes('--resume') || !existsSync(OUT)) return undefined;
  const doc = JSON.parse(readFileSync(OUT, 'utf8')) as { samples?: CycleSample[]; harnessErrors?: { round: number; error: string }[]; startedAt: string; loadAverage: { start: number } };
  if (doc.samples === undefined) throw new Error(`--resume: ${OUT} has no per-cycle samples (written before --resume existed)`);
  return { samples: doc.samples, failedRounds: doc.harnessErrors ?? [], startedAt: doc.startedAt, load0: doc.loadAverage.start };
}

async function main(): Promise<void> {
  const prior = previousRun();
  const started = prior?.startedAt ?? new Date().toISOString();
  const load0 = prior?.load0 ?? loadavg()[0]!;
  const hogs = startHogs(HOGS);
  const samples: CycleSample[] = prior?.samples ?? [];
  const failedRounds: { round: number; error: string }[] = prior?.failedRounds ?? [];
  const write = (): void => {
    writeFileSync(OUT, JSON.stringify({
      command: `nice -n 10 npx tsx bench/first-cycle.ts --cycles ${CYCLES} --replicas ${REPLICAS} --scale ${SCALE} --hog ${HOGS}${TIMEOUT === '' ? '' : ` --timeout ${TIMEOUT}`}`,
      preset: 'remediated', scale: SCALE, replicas: REPLICAS, hogs: HOGS, cpus: cpus().length, cycleTimeout: TIMEOUT === '' ? '2m (default)' : TIMEOUT,
      startedAt: started, finishedAt: new Date().toISOString(), loadAverage: { start: load0, end: loadavg()[0] },
      cycles: samples.length, harnessErrors: failedRounds, ...summarize(samples),
      inconclusives: samples.flatMap((s) => Object.entries(s.scenarios).filter(([, x]) => x.outcome === 'inconclusive')
        .map(([scenario, x]) => ({ round: s.round, replica: s.replica, scenario, reason: x.reason ?? null, notes: x.notes }))),
      cycleOutcomes: samples.map((s) => ({ round: s.round, replica: s.replica, outcome: s.outcome, ms: Math.round(s.ms) })),
      samples,
    }, null, 2) + '\n');
  };
  try {
    const firstRound = Math.max(-1, ...samples.map((x) => x.round), ...failedRounds.map((x) => x.round)) + 1;
    for (let i = firstRound; samples.length < CYCLES; i++) {
      let got: CycleSample[];
      try {
        got = await round(i);
      } catch (err) {
        // The harness's own trouble (a child too slow to start on a loaded machine), not a cycle: counted, not sampled.
        failedRounds.push({ round: i, error: err instanceof Error ? err.message : String(err) });
        process.stderr.write(`round ${i}: harness error, not sampled: ${failedRounds[failedRounds.length - 1]!.error}\n`);
        if (failedRounds.length > 10) throw err;
        continue;
      }
      samples.push(...got);
      write();
      const inc = got.flatMap((s) => Object.entries(s.scenarios).filter(([, x]) => x.outcome === 'inconclusive').map(([n, x]) => `${n}(${x.reason ?? '-'})`));
      process.stderr.write(`round ${i}: ${got.map((s) => `${s.outcome} ${(s.ms / 1000).toFixed(0)}s`).join(', ')}${inc.length > 0 ? ` · inconclusive: ${inc.join(' ')}` : ''} · load ${loadavg()[0]!.toFixed(2)}\n`);
    }
  } finally {
    for (const h of hogs) h.kill('SIGKILL');
  }
  write();
  const summary = summarize(samples) as { scenarios: { scenario: string; cycles: number; inconclusive: number; rate: Parameters<typeof formatProportion>[0] }[] };
  for (const s of summary.scenarios) process.stdout.write(`${s.scenario.padEnd(24)} inconclusive ${s.inconclusive}/${s.cycles}  ${formatProportion(s.rate)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:first-cycle: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exitCode = 1;
});
