/**
 * `npm run bench:races`: per-run recall of the race faults, and false positives on their defended twins.
 *
 * Each cell starts one bundled engine (a preset, a scale, a free-list order, one race fault or its defended
 * twin) and runs `runs` probe runs of the scenario against it, each exactly what `kvcanary run --scenario
 * abort-race` does: a fresh marker registry per run, as a fresh `run` process has, over one installation
 * (key and run store) per cell, so a marker an earlier run planted is recognised and attributed to it (an
 * endpoint's host tier or cache may hand it to a later run's reader). A run counts as a
 * detection when it raised `cross-request-leak`. Recall is shown with its 95% Wilson interval; the twins'
 * false-positive rate with its exact one-sided 95% bound.
 *
 *   npx tsx bench/races.ts [--runs N] [--cells NAME,...] [--scenario NAME] [--fresh] [--out FILE]
 *
 * `--fresh`: a new engine and a new installation for every run — the first contact with an endpoint, where
 * no earlier run's marker can be in its host tier or cache, so every detection is of this run's own markers.
 *
 * Writes bench/races.json (or --out) and prints a table. Run it on a quiet machine (`nice -n 10` on a shared
 * one): the races depend on timing.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEngine, type StartEngineOptions } from '../engine-under-test/src/index.js';
import { runProbe } from '../prober/src/probe/probe.js';
import { createScanner } from '../prober/src/probe/scanner.js';
import type { TargetConfig } from '../prober/src/service/config.js';
import { createInstallationRegistry, persistPlantings } from '../prober/src/installation/registry.js';
import { openStore } from '../prober/src/service/store.js';
import { formatProportion, proportion, zeroEventUpperBound } from './proportion.js';

interface Cell {
  name: string;
  engine: StartEngineOptions;
  /** true: the fault is present (recall); false: a defended twin (false positives). */
  positive: boolean;
}

const FAULTS = ['late-write', 'offload-release-race'] as const;
const TWIN_DEFENSE = { 'late-write': 'deferred-release', 'offload-release-race': 'transfer-integrity' } as const;

function allCells(): Cell[] {
  const cells: Cell[] = [];
  for (const fault of FAULTS) {
    for (const preset of ['remediated', 'incident', 'disaggregated']) {
      for (const freeList of ['fifo', 'lifo'] as const) {
        cells.push({ name: `${preset}/64/${freeList}/${fault}`, engine: { preset, scale: 64, freeList, faults: [fault] }, positive: true });
      }
    }
    cells.push({ name: `remediated/128/fifo/${fault}`, engine: { preset: 'remediated', scale: 128, freeList: 'fifo', faults: [fault] }, positive: true });
    cells.push({
      name: `remediated/64/fifo/${fault}+${TWIN_DEFENSE[fault]}`,
      engine: { preset: 'remediated', scale: 64, freeList: 'fifo', faults: [fault], defenses: [TWIN_DEFENSE[fault]] },
      positive: false,
    });
  }
  return cells;
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const runs = Number(arg('runs') ?? 30);
const scenario = arg('scenario') ?? 'abort-race';
const wanted = arg('cells')?.split(',');
const cells = allCells().filter((c) => wanted === undefined || wanted.includes(c.name));
const fresh = process.argv.includes('--fresh');
const out = arg('out') ?? (fresh ? 'bench/races-fresh.json' : 'bench/races.json');

const target = (url: string): TargetConfig => ({
  name: 'bench',
  baseUrl: url,
  headers: {},
  tenants: [],
  scenarios: [],
  schedule: { intervalMs: 240_000, timeoutMs: 120_000, jitterMs: 0 },
  budget: { tokensPerHour: Number.MAX_SAFE_INTEGER },
});

const RETENTION_MS = 7 * 86_400_000;
const command = `npx tsx bench/races.ts ${process.argv.slice(2).join(' ')}`.trim();
const loadAtStart = loadavg()[0]!;
const rows = [];
/** One installation (key and run store) against one engine: as many runs as its caller makes. */
async function openInstallation(cell: Cell) {
  const engine = await startEngine({ ...cell.engine, log: () => {} });
  const home = mkdtempSync(join(tmpdir(), 'kvc-races-'));
  const store = openStore({ path: join(home, 'runs.sqlite'), retentionMs: RETENTION_MS });
  return {
    /** One run, as `kvcanary run --scenario` does: a fresh registry over the installation's key and store. */
    async run(i: number) {
      const registry = createInstallationRegistry({ store, since: Date.now() - RETENTION_MS, keyFile: join(home, 'marker.key') });
      const run = await runProbe(
        { registry, scanner: createScanner(registry), onMarkers: persistPlantings(store) },
        { target: target(engine.url), scenarios: [scenario], runId: `races-${i}`, signal: new AbortController().signal, tokenBudget: 1e12 },
      );
      store.recordRun(run);
      return run.scenarios[0]!;
    },
    async close() {
      await engine.close();
      store.close();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

for (const cell of cells) {
  let detected = 0;
  let earlier = 0;
  let passed = 0;
  const durations: number[] = [];
  const confidences: number[] = [];
  let installation = fresh ? undefined : await openInstallation(cell);
  try {
    for (let i = 0; i < runs; i++) {
      installation ??= await openInstallation(cell);
      const t0 = performance.now();
      const s = await installation.run(i);
      durations.push(performance.now() - t0);
      if (fresh) {
        await installation.close();
        installation = undefined;
      }
      const leaks = s.findings.filter((f) => f.kind === 'cross-request-leak');
      if (leaks.length > 0) detected++;
      if (leaks.length > 0 && leaks.every((f) => f.evidence.planted?.by !== 'this-run')) earlier++;
      if (s.outcome === 'pass') passed++;
      if (s.power !== undefined) confidences.push(s.power.confidence);
    }
  } finally {
    await installation?.close();
  }
  durations.sort((a, b) => a - b);
  const row = {
    cell: cell.name,
    positive: cell.positive,
    runs,
    detected,
    /** Runs whose every leak was of a marker an earlier run planted. */
    detectedOnlyEarlierMarkers: earlier,
    passed,
    recall: cell.positive ? proportion(detected, runs) : undefined,
    falsePositiveBound: cell.positive ? undefined : detected === 0 ? zeroEventUpperBound(runs) : proportion(detected, runs).high,
    medianRunMs: Math.round(durations[Math.floor(durations.length / 2)] ?? 0),
    minConfidence: confidences.length > 0 ? Math.min(...confidences) : undefined,
  };
  rows.push(row);
  console.log(
    `${cell.name.padEnd(52)} ${cell.positive ? `recall ${formatProportion(row.recall!)}` : `false positives ${detected}/${runs} (95% bound ${row.falsePositiveBound?.toFixed(3)})`}` +
      `  (${earlier} by earlier runs' markers only)  pass ${passed}/${runs}  median run ${(row.medianRunMs / 1000).toFixed(1)} s`,
  );
  writeFileSync(out, JSON.stringify({ command, scenario, freshEnginePerRun: fresh, runsPerCell: runs, measuredAt: new Date().toISOString(), loadAverage: { start: loadAtStart, end: loadavg()[0]! }, rows }, null, 2) + '\n');
}
