/**
 * `npm run bench`: measures detection power, false positives, cost and overhead in one run and writes
 * bench/REPORT.md and bench/report.json (see BENCH_USAGE in options.ts; progress goes to stderr).
 *
 * Sections run one after another, the timing-sensitive ones (component benchmarks, serve overhead, the
 * load sweep) alone. The others keep `--jobs` series in flight at once in this process (pool.ts): their
 * figures are counts, and a cycle against the bundled engine spends most of its wall time waiting.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join, relative } from 'node:path';
import { SCENARIO_NAMES } from '../prober/src/probe/scenarios/index.js';
import { ALL_CELLS, LOAD_CELLS, LOAD_LEVELS, LOAD_LEVELS_QUICK, matrixCells as defaultCells, NEGATIVE_CELLS, type EngineCell } from './cells.js';
import { createChildTracker, REPO_ROOT } from './child.js';
import { runComponent } from './components.js';
import { COST_CELL, COST_FALLBACK, PLANTER_FRACTIONS, PLANTER_FRACTIONS_QUICK, runCost } from './cost.js';
import { runCopyFidelity } from './copy-fidelity.js';
import { runMatrix } from './detection.js';
import { runFalsePositives } from './false-positives.js';
import { runLoadSection } from './load.js';
import { BENCH_USAGE, BenchUsageError, parseBenchArgs, reproduce, runsSection, type BenchOptions } from './options.js';
import { runPromptRss, runServeOverhead, type OverheadResult } from './overhead.js';
import { renderMarkdown, type BenchReport, type SectionRun } from './report.js';

const progress = (line: string): void => {
  process.stderr.write(`${line}\n`);
};

async function section<T>(name: string, command: string, fn: () => Promise<T>): Promise<SectionRun<T>> {
  const t0 = performance.now();
  progress(`== ${name}: ${command}`);
  try {
    const result = await fn();
    return { command, seconds: (performance.now() - t0) / 1000, result };
  } catch (err) {
    progress(`== ${name} failed: ${(err as Error).stack ?? String(err)}`);
    return { command, seconds: (performance.now() - t0) / 1000, error: (err as Error).message };
  }
}

function pickCells(all: readonly EngineCell[], wanted: readonly string[]): EngineCell[] {
  if (wanted.length === 0) return [...all];
  const unknown = wanted.filter((w) => !all.some((c) => c.id === w));
  if (unknown.length > 0) throw new BenchUsageError(`--cell: unknown cell ${unknown.join(', ')} (known: ${all.map((c) => c.id).join(', ')})`);
  return all.filter((c) => wanted.includes(c.id));
}

/** prefix-isolation cycles per negative engine: issue 7 asks for no timing false alarm over at least 200 runs (two engines). */
const TIMING_RUNS_PER_ENGINE = 100;

export async function main(argv: string[]): Promise<number> {
  let opts: BenchOptions;
  try {
    opts = parseBenchArgs(argv, join(REPO_ROOT, 'bench'));
  } catch (err) {
    if (err instanceof BenchUsageError) {
      process.stderr.write(`${err.message === '' ? '' : `bench: ${err.message}\n\n`}${BENCH_USAGE}\n`);
      return err.message === '' ? 0 : 64;
    }
    throw err;
  }
  const scenarios = opts.scenarios.length > 0 ? opts.scenarios : [...SCENARIO_NAMES];
  const unknownScenario = scenarios.filter((s) => !SCENARIO_NAMES.includes(s));
  if (unknownScenario.length > 0) {
    process.stderr.write(`bench: --scenario: unknown scenario ${unknownScenario.join(', ')} (known: ${SCENARIO_NAMES.join(', ')})\n`);
    return 64;
  }
  let matrixCells: EngineCell[];
  try {
    matrixCells = opts.cells.length > 0 ? pickCells(ALL_CELLS, opts.cells) : defaultCells(opts.full);
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\n`);
    return 64;
  }

  const children = createChildTracker();
  const interrupted = (signal: NodeJS.Signals): void => {
    progress(`bench: ${signal}, stopping child processes`);
    children.killAll();
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.once('SIGINT', interrupted);
  process.once('SIGTERM', interrupted);
  const started = performance.now();
  const loadStart = loadavg();
  const report: BenchReport = {
    version: 1,
    generatedAt: new Date().toISOString(),
    command: ['npm run bench', ...(argv.length > 0 ? ['--', ...argv] : [])].join(' '),
    options: { ...opts, ...(opts.out !== undefined ? { out: relative(REPO_ROOT, opts.out) || '.' } : {}) },
    machine: { cpus: availableParallelism(), node: process.version, platform: `${process.platform}-${process.arch}`, loadAverageStart: loadStart, loadAverageEnd: [] },
    seconds: 0,
    sections: {},
  };
  const wantedLoad = opts.cells.length > 0 ? LOAD_CELLS.filter((c) => opts.cells.includes(c.engine.id)) : opts.full ? LOAD_CELLS : LOAD_CELLS.slice(0, 1);
  const wantedScenarioLoad = wantedLoad.filter((c) => scenarios.includes(c.scenario));

  if (runsSection(opts, 'components')) {
    const scanner = await section('bench:scanner', `npm run bench:scanner --${opts.full ? '' : ' --quick'} --json FILE`, () => runComponent(children, 'bench:scanner', opts.full ? [] : ['--quick']));
    const engine = await section('bench:engine', 'npm run bench:engine -- --json FILE', () => runComponent(children, 'bench:engine'));
    report.sections.components = { scanner, engine };
  }
  if (runsSection(opts, 'overhead')) {
    report.sections.overhead = await section('overhead', reproduce(opts, 'overhead'), async (): Promise<OverheadResult> => {
      const out: OverheadResult = { prompt: [] };
      try {
        out.serve = await runServeOverhead({ children, targets: 50, scale: Math.max(opts.scale * 2, 256), presets: ['incident', 'remediated'], windowMs: opts.overheadWindowS * 1000, progress });
      } catch (err) {
        out.serveError = (err as Error).message;
        progress(`[overhead] serve failed: ${out.serveError}`);
      }
      out.prompt = await runPromptRss(children, [1_048_576, 4_194_304], 3, progress);
      return out;
    });
  }
  if (runsSection(opts, 'matrix')) {
    report.sections.matrix = await section('detection matrix', reproduce(opts, 'matrix'), () =>
      runMatrix({
        cells: matrixCells,
        scenarios,
        allScenarios: opts.full,
        ...(opts.full ? {} : { stopIfAllInconclusive: 10 }),
        cycles: opts.cycles,
        scale: opts.scale,
        jobs: opts.jobs,
        progress,
      }),
    );
  }
  if (runsSection(opts, 'load')) {
    report.sections.load = await section('load', reproduce(opts, 'load'), () =>
      runLoadSection({ cells: wantedScenarioLoad, levels: opts.full ? LOAD_LEVELS : LOAD_LEVELS_QUICK, cycles: opts.loadCycles, scale: opts.scale, progress }),
    );
  }
  if (runsSection(opts, 'false-positives')) {
    report.sections.falsePositives = await section('false positives', reproduce(opts, 'false-positives'), () =>
      runFalsePositives({
        cells: NEGATIVE_CELLS,
        fallback: COST_FALLBACK,
        scenarios,
        pairs: opts.pairs,
        scale: opts.scale,
        jobs: opts.jobs,
        ...(report.sections.matrix?.result !== undefined ? { prior: report.sections.matrix.result } : {}),
        minCycles: { 'prefix-isolation': TIMING_RUNS_PER_ENGINE },
        progress,
      }),
    );
  }
  if (runsSection(opts, 'cost')) {
    report.sections.cost = await section('cost', reproduce(opts, 'cost'), () =>
      runCost({
        cell: COST_CELL,
        fallback: COST_FALLBACK,
        scenarios,
        searchCycles: opts.searchCycles,
        fractions: opts.full ? PLANTER_FRACTIONS : PLANTER_FRACTIONS_QUICK,
        projectionCycles: opts.full ? 10 : 5,
        scale: opts.scale,
        jobs: opts.jobs,
        progress,
      }),
    );
  }
  if (runsSection(opts, 'copy-fidelity')) {
    report.sections.copyFidelity = await section('copy fidelity', reproduce(opts, 'copy-fidelity'), () =>
      runCopyFidelity({ cycles: opts.fidelityCycles, scale: opts.scale, jobs: opts.jobs, progress }),
    );
  }

  report.machine.loadAverageEnd = loadavg();
  report.seconds = (performance.now() - started) / 1000;
  const ran = report.sections;
  const written = opts.merge && opts.out !== undefined ? mergeInto(join(opts.out, 'report.json'), report) : report;
  const markdown = renderMarkdown(written);
  if (opts.out !== undefined) {
    mkdirSync(opts.out, { recursive: true });
    writeFileSync(join(opts.out, 'report.json'), JSON.stringify(written, null, 1) + '\n');
    writeFileSync(join(opts.out, 'REPORT.md'), markdown);
    progress(`wrote ${join(opts.out, 'REPORT.md')} and report.json (${report.seconds.toFixed(0)} s)`);
  } else {
    process.stdout.write(markdown);
  }
  const s = ran;
  const runs: Array<SectionRun<unknown> | undefined> = [s.components?.scanner, s.components?.engine, s.overhead, s.matrix, s.load, s.falsePositives, s.cost, s.copyFidelity];
  return runs.some((r) => r?.error !== undefined) ? 1 : 0;
}

/**
 * --merge: the report already in --out keeps its header (command, options, machine, seconds) and every
 * section this run did not measure; the sections measured now replace theirs, each with its own command.
 * A matrix run narrowed to some cells replaces those cells only (the others keep the old run's series).
 */
export function mergeInto(path: string, fresh: BenchReport): BenchReport {
  if (!existsSync(path)) return fresh;
  return mergeReports(JSON.parse(readFileSync(path, 'utf8')) as BenchReport, fresh);
}

export function mergeReports(old: BenchReport, fresh: BenchReport): BenchReport {
  const sections = { ...old.sections, ...fresh.sections };
  const before = old.sections.matrix?.result;
  const now = fresh.sections.matrix;
  if (before !== undefined && now?.result !== undefined && now.result.cycles === before.cycles && now.result.scale === before.scale) {
    const replaced = new Set(now.result.cells.map((c) => c.cell.id));
    const cells = [...before.cells.filter((c) => !replaced.has(c.cell.id)), ...now.result.cells];
    sections.matrix = {
      command: `${old.sections.matrix!.command}; ${now.command}`,
      seconds: old.sections.matrix!.seconds + now.seconds,
      result: { ...before, cells },
    };
  }
  return { ...old, sections };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await main(process.argv.slice(2));
}
