/**
 * `npm run bench` options. Every figure in the report carries the command that reproduces it, built from
 * these options by `reproduce()`, so a reader can rerun one row without rerunning the rest.
 */
import { parseArgs } from 'node:util';

/**
 * Capacities are divided by this by default: a cycle's cost is roughly proportional to the capacities
 * (prompts are sized from them), and at 1/128 the default run fits in 15 minutes on two cores.
 */
export const DEFAULT_SCALE = 128;

export const SECTIONS = ['components', 'overhead', 'matrix', 'load', 'false-positives', 'cost', 'copy-fidelity'] as const;
export type Section = (typeof SECTIONS)[number];

export interface BenchOptions {
  full: boolean;
  scale: number;
  /** Cycles per (cell, scenario) in the matrix. */
  cycles: number;
  /** Cycles per (cell, policy, load level). */
  loadCycles: number;
  /** Probe pairs per false-positive target. */
  pairs: number;
  /** Cycles per planter size in the cost search. */
  searchCycles: number;
  /** Cycles per copy-fidelity row. */
  fidelityCycles: number;
  /** Keep the other sections of an existing report.json in --out and replace only those run. */
  merge: boolean;
  /** Seconds of steady-state measurement of `serve`. */
  overheadWindowS: number;
  only: Section[];
  cells: string[];
  scenarios: string[];
  /** Series (each with its own engine) in flight at once in this process. */
  jobs: number;
  /** Where REPORT.md and report.json go; undefined for a partial run (Markdown to stdout). */
  out?: string;
}

export class BenchUsageError extends Error {
  readonly code = 'KVC_BENCH_USAGE';
  constructor(message: string) {
    super(message);
    this.name = 'BenchUsageError';
  }
}

export const BENCH_USAGE = `usage: npm run bench -- [options]

  --full               longer run: every scenario on defense cells too, more cells (single node, the
                       disaggregated base, lifo, page-tags, hardened + each fault), 100 cycles a cell and
                       no early stop, load sweeps of every fault at 4 levels, 10,000 false-positive pairs,
                       the whole planter-size curve at 200 cycles a size, 120 s of serve
  --scale N            engine capacities divided by N (default 128; coarser is faster)
  --cycles N           cycles per matrix cell and scenario (default 50, at least 50 for the report's claims)
  --load-cycles N      cycles per load level (default 30)
  --pairs N            false-positive probe pairs per target (default 1000; --full 10000)
  --search-cycles N    cycles per planter size (default 100)
  --overhead-window S  seconds of steady-state serve measurement (default 30)
  --fidelity-cycles N  cycles per copy-fidelity row (default 30)
  --merge              with --out: keep the sections of the report.json already there and replace only
                       those this run measures (e.g. --only copy-fidelity --out bench --merge)
  --only SECTION       repeatable: ${SECTIONS.join(', ')}
  --cell ID            repeatable: only these engine cells (ids as in the report, e.g. incident+page-tags)
  --scenario NAME      repeatable: only these scenarios
  --jobs N             series (each on its own engine) in flight at once (default 4; the timing-sensitive
                       sections always run alone)
  --out DIR            write REPORT.md and report.json to DIR (default: bench/ for a whole run; a partial
                       run prints its Markdown to stdout unless --out is given)

Progress goes to stderr.`;

function positiveInt(flag: string, v: string | undefined, fallback: number, min = 1): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new BenchUsageError(`${flag}: expected an integer >= ${min}, got '${v}'`);
  return n;
}

export function parseBenchArgs(argv: string[], defaultOut: string): BenchOptions {
  let v;
  try {
    v = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        full: { type: 'boolean', default: false },
        scale: { type: 'string' },
        cycles: { type: 'string' },
        'load-cycles': { type: 'string' },
        pairs: { type: 'string' },
        'search-cycles': { type: 'string' },
        'overhead-window': { type: 'string' },
        'fidelity-cycles': { type: 'string' },
        merge: { type: 'boolean', default: false },
        only: { type: 'string', multiple: true },
        cell: { type: 'string', multiple: true },
        scenario: { type: 'string', multiple: true },
        jobs: { type: 'string' },
        out: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }).values;
  } catch (err) {
    throw new BenchUsageError((err as Error).message);
  }
  if (v.help) throw new BenchUsageError('');
  const only = (v.only ?? []) as string[];
  for (const s of only) if (!(SECTIONS as readonly string[]).includes(s)) throw new BenchUsageError(`--only: unknown section '${s}' (expected one of ${SECTIONS.join(', ')})`);
  const full = v.full;
  if (v.merge && v.out === undefined) throw new BenchUsageError('--merge: needs --out DIR (the report.json to merge into)');
  const partial = only.length > 0 || (v.cell ?? []).length > 0 || (v.scenario ?? []).length > 0;
  return {
    full,
    scale: positiveInt('--scale', v.scale, DEFAULT_SCALE),
    cycles: positiveInt('--cycles', v.cycles, full ? 100 : 50),
    loadCycles: positiveInt('--load-cycles', v['load-cycles'], full ? 100 : 30),
    pairs: positiveInt('--pairs', v.pairs, full ? 10_000 : 1000),
    searchCycles: positiveInt('--search-cycles', v['search-cycles'], full ? 200 : 100),
    overheadWindowS: positiveInt('--overhead-window', v['overhead-window'], full ? 120 : 30, 5),
    fidelityCycles: positiveInt('--fidelity-cycles', v['fidelity-cycles'], 30),
    merge: v.merge,
    only: only as Section[],
    cells: v.cell ?? [],
    scenarios: v.scenario ?? [],
    jobs: positiveInt('--jobs', v.jobs, 4),
    ...(v.out !== undefined ? { out: v.out } : partial ? {} : { out: defaultOut }),
  };
}

export function runsSection(opts: BenchOptions, s: Section): boolean {
  return opts.only.length === 0 || opts.only.includes(s);
}

/** The command that reproduces one figure: the section (and cell/scenario) plus every non-default option. */
export function reproduce(opts: BenchOptions, section: Section, narrow: { cell?: string; scenario?: string } = {}): string {
  const args = ['npm run bench --', `--only ${section}`];
  for (const c of narrow.cell !== undefined ? [narrow.cell] : opts.cells) args.push(`--cell ${c}`);
  for (const s of narrow.scenario !== undefined ? [narrow.scenario] : opts.scenarios) args.push(`--scenario ${s}`);
  if (opts.full) args.push('--full');
  if (opts.jobs !== 4 && section !== 'overhead' && section !== 'components' && section !== 'load') args.push(`--jobs ${opts.jobs}`);
  if (opts.scale !== DEFAULT_SCALE) args.push(`--scale ${opts.scale}`);
  const def = (full: number, normal: number): number => (opts.full ? full : normal);
  if (section === 'matrix' && opts.cycles !== def(100, 50)) args.push(`--cycles ${opts.cycles}`);
  if (section === 'load' && opts.loadCycles !== def(100, 30)) args.push(`--load-cycles ${opts.loadCycles}`);
  if (section === 'false-positives' && opts.pairs !== def(10_000, 1000)) args.push(`--pairs ${opts.pairs}`);
  if (section === 'cost' && opts.searchCycles !== def(200, 100)) args.push(`--search-cycles ${opts.searchCycles}`);
  if (section === 'copy-fidelity' && opts.fidelityCycles !== 30) args.push(`--fidelity-cycles ${opts.fidelityCycles}`);
  if (section === 'overhead' && opts.overheadWindowS !== def(120, 30)) args.push(`--overhead-window ${opts.overheadWindowS}`);
  return args.join(' ');
}
