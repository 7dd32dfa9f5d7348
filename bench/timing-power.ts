/**
 * `npm run bench:timing [-- --cycles N] [--json FILE]`; `-- --absence`: the absence-of-reuse judgement's
 * stated detection limit, checked on a fast and a slow noisy front (bench/timing-absence.ts).
 *
 * The prefix-isolation timing test's power and false alarms, side by side in one run: on an engine whose
 * prefix cache ignores `cache_salt` (tenant B really reuses A's pages, so B's time to first token falls)
 * and on the same engine with `salted-prefix-cache` (nothing shared), for the default test (12 pairs over
 * 512-token prefixes, what runs when cached_tokens are reported) and the escalated one (24 pairs over
 * 2,048-token prefixes, what runs when they are not). Each row: cycles where the test fired, the median
 * effect (how much shorter B's median TTFT was on A's prefix) and the median p-value of the one-sided
 * paired permutation test. The side-channel finding also needs the effect to clear `timingMinEffect`.
 * Figures are counts and ratios from this one run; the machine is shared and noisy. With --json they are
 * also written to FILE (bench/timing.json is the stored run docs/measured.md quotes; a test checks the two agree).
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { startEngine } from '../engine-under-test/src/start.js';
import type { TargetConfig } from '../prober/src/service/config.js';
import { createMarkerRegistry } from '../prober/src/probe/marker-registry.js';
import { runProbe } from '../prober/src/probe/probe.js';
import { createScanner } from '../prober/src/probe/scanner.js';
import { median } from '../prober/src/probe/stats.js';
import type { ProbeTuning } from '../prober/src/probe/scenarios/context.js';
import { PREFIX_ISOLATION } from '../prober/src/probe/scenarios/prefix-isolation.js';
import type { TimingFigures } from './figures.js';
import { absenceBench } from './timing-absence.js';

interface Setting {
  name: string;
  tuning: ProbeTuning;
}

interface Row {
  engine: string;
  setting: string;
  cycles: number;
  fired: number;
  effects: number[];
  pValues: number[];
  ms: number;
}

const SETTINGS: readonly Setting[] = [
  { name: 'default: 12 pairs, 512-token prefixes', tuning: { timingPairs: 12, prefixTokens: 512 } },
  { name: 'escalated: 24 pairs, 2,048-token prefixes', tuning: { timingPairs: 24, prefixTokens: 2048 } },
];

const ENGINES = [
  { name: 'single + prefix-cache-ignores-salt (shared: should fire)', defenses: [] as string[] },
  { name: 'single + prefix-cache-ignores-salt + salted-prefix-cache (not shared: must not fire)', defenses: ['salted-prefix-cache'] },
];

/** "effect 48%" and "p = 2.0e-5" from the side-channel note. */
function parseSideChannel(notes: readonly string[]): { effect: number; p: number } | undefined {
  const line = notes.find((n) => n.includes('(side channel)'));
  const effect = line === undefined ? null : /effect (-?\d+)%/.exec(line);
  const p = line === undefined ? null : /p = ([\d.e+-]+)/.exec(line);
  if (effect === null || p === null) return undefined;
  return { effect: Number(effect[1]) / 100, p: Number(p[1]) };
}

async function measure(engine: (typeof ENGINES)[number], setting: Setting, cycles: number): Promise<Row> {
  const e = await startEngine({ preset: 'single', scale: 128, faults: ['prefix-cache-ignores-salt'], defenses: engine.defenses, port: 0, log: () => {} });
  const row: Row = { engine: engine.name, setting: setting.name, cycles: 0, fired: 0, effects: [], pValues: [], ms: 0 };
  const target: TargetConfig = {
    name: 'timing',
    baseUrl: e.url,
    headers: {},
    // Two tenants the operator declared apart by cache_salt: sharing across them is a leak (critical), where the
    // prober's own synthetic salt identities would only show the engine ignores cache_salt (cache-salt-ignored, info).
    tenants: [
      { name: 'tenant-a', cacheSalt: 'bench-tenant-a' },
      { name: 'tenant-b', cacheSalt: 'bench-tenant-b' },
    ],
    scenarios: [],
    schedule: { intervalMs: 120_000, timeoutMs: 60_000, jitterMs: 0 },
    budget: { tokensPerHour: Number.MAX_SAFE_INTEGER },
  };
  const registry = createMarkerRegistry();
  const deps = { registry, scanner: createScanner(registry), tuning: setting.tuning, requestTimeoutMs: 60_000 };
  try {
    for (let i = 0; i < cycles; i++) {
      const t0 = performance.now();
      const run = await runProbe(deps, { target, scenarios: [PREFIX_ISOLATION], runId: `timing-${i}`, signal: new AbortController().signal, tokenBudget: 1e12 });
      const result = run.scenarios[0]!;
      const side = parseSideChannel(result.notes);
      row.cycles++;
      row.ms += performance.now() - t0;
      if (result.findings.some((f) => f.kind === 'prefix-timing-side-channel')) row.fired++;
      if (side !== undefined) {
        row.effects.push(side.effect);
        row.pValues.push(side.p);
      }
    }
  } finally {
    await e.close();
  }
  return row;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { cycles: { type: 'string' }, json: { type: 'string' }, absence: { type: 'boolean' }, runs: { type: 'string' }, 'slow-runs': { type: 'string' } } });
  if (values.absence === true) {
    // The absence-of-reuse judgement's stated detection limit, checked (bench/timing-absence.ts).
    const runs = Number(values.runs ?? 20);
    const slowRuns = Number(values['slow-runs'] ?? 10);
    if (![runs, slowRuns].every((n) => Number.isInteger(n) && n >= 1)) {
      process.stderr.write('bench:timing: --runs and --slow-runs must be positive integers\n');
      process.exit(64);
    }
    await absenceBench({ runs, slowRuns, ...(values.json !== undefined ? { json: values.json } : {}) });
    return;
  }
  const cycles = values.cycles === undefined ? 10 : Number(values.cycles);
  if (!Number.isInteger(cycles) || cycles < 1) {
    process.stderr.write(`bench:timing: --cycles must be a positive integer, got '${values.cycles}'\n`);
    process.exit(64);
  }
  const rows: Row[] = [];
  for (const setting of SETTINGS) {
    for (const engine of ENGINES) {
      const row = await measure(engine, setting, cycles);
      process.stderr.write(`${setting.name} × ${engine.name}: fired ${row.fired}/${row.cycles}\n`);
      rows.push(row);
    }
  }
  const pct = (x: number): string => (Number.isNaN(x) ? '–' : `${Math.round(x * 100)}%`);
  const out = [
    `prefix-isolation timing test, scale 1/128, ${cycles} cycles per row (alpha 0.001 a run)`,
    '',
    '| setting | engine | fired | median effect | median p | s per cycle |',
    '|---|---|---|---|---|---|',
    ...rows.map((r) => `| ${r.setting} | ${r.engine} | ${r.fired}/${r.cycles} | ${pct(median(r.effects))} | ${median(r.pValues).toPrecision(2)} | ${(r.ms / r.cycles / 1000).toFixed(1)} |`),
  ];
  process.stdout.write(out.join('\n') + '\n');
  if (values.json !== undefined) {
    const figures: TimingFigures = {
      command: `npm run bench:timing -- --cycles ${cycles} --json ${values.json}`,
      generatedAt: new Date().toISOString(),
      scale: 128,
      cycles,
      rows: rows.map((r) => ({
        setting: r.setting,
        engine: r.engine,
        shared: !r.engine.includes('salted-prefix-cache'),
        cycles: r.cycles,
        fired: r.fired,
        medianEffect: r.effects.length > 0 ? median(r.effects) : null,
        medianP: r.pValues.length > 0 ? median(r.pValues) : null,
        secondsPerCycle: r.ms / r.cycles / 1000,
      })),
    };
    writeFileSync(values.json, JSON.stringify(figures, null, 1) + '\n');
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
