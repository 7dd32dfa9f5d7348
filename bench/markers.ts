/**
 * `npm run bench:markers [-- --runs N --cycles N --out FILE]` → bench/markers.json
 *
 * Markers that attribute themselves, measured:
 * 1. Per-run marker recall on an engine earlier runs probed. N consecutive overlimit-handoff runs against one
 *    incident engine (1/128 scale), each with a fresh registry as a new `kvcanary run` process has: under
 *    the installation key with a shared store (what `run` does now), side by side with a fresh random key
 *    per run (what a fresh registry without the installation could see: this run's markers only). A run
 *    recalls when it raises `cross-request-leak`; every such finding is checked against what the runs
 *    actually sent: its planting run must be this run or an earlier one, and its planting request one that
 *    run sent with that role and tenant.
 * 2. Store growth per cycle (every scenario, one target) at 1/128 and 1/64, by table (SQLite dbstat, bytes
 *    of pages incl. indexes), projected to full scale, and the 7-day retention's steady-state size at one
 *    cycle every 5 minutes. Side by side: the bytes the same cycles' markers took in the per-marker table
 *    this replaces (its schema, the markers re-derived and inserted into a scratch database).
 * Figures are from this one run on a shared, noisy machine; durations are wall time.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { startEngine } from '../engine-under-test/src/start.js';
import type { TargetConfig } from '../prober/src/service/config.js';
import { createMarkerRegistry, type MarkerRegistry } from '../prober/src/probe/marker-registry.js';
import { createMarkerCodec } from '../prober/src/probe/markers.js';
import { runProbe } from '../prober/src/probe/probe.js';
import type { ProbeRun } from '../prober/src/probe/result.js';
import { createScanner, type Scanner } from '../prober/src/probe/scanner.js';
import { recordingScanner } from './recording-scanner.js';
import { SCENARIO_NAMES } from '../prober/src/probe/scenarios/index.js';
import { loadMarkerKey } from '../prober/src/installation/marker-key.js';
import { createInstallationRegistry, persistPlantings } from '../prober/src/installation/registry.js';
import { openStore, type Store } from '../prober/src/service/store.js';
import { proportion } from './proportion.js';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '100' },
    cycles: { type: 'string', default: '4' },
    out: { type: 'string', default: 'bench/markers.json' },
  },
});
const RUNS = Number(args.runs);
const CYCLES = Number(args.cycles);
const RETENTION_MS = 7 * 86_400_000;
const INTERVAL_MS = 5 * 60_000;
const DAY = 86_400_000;

function target(url: string, name: string): TargetConfig {
  return {
    name, baseUrl: url, headers: {}, tenants: [], scenarios: [],
    schedule: { intervalMs: 120_000, timeoutMs: 60_000, jitterMs: 0 }, budget: { tokensPerHour: Number.MAX_SAFE_INTEGER },
  };
}

interface Sent { role: string; tenant: string }

async function probeOnce(url: string, registry: MarkerRegistry, store: Store | undefined, runId: string, scenarios: string[], scanner: Scanner = createScanner(registry)): Promise<ProbeRun> {
  const run = await runProbe(
    { registry, scanner, ...(store !== undefined ? { onMarkers: persistPlantings(store) } : {}) },
    { target: target(url, 'bench-markers'), scenarios, runId, signal: new AbortController().signal, tokenBudget: 1e12 },
  );
  store?.recordRun(run);
  return run;
}

interface RecallRow {
  setting: string;
  runs: number;
  recalled: number;
  recall: number;
  recallCi95: [number, number];
  /** Runs whose leak came (at least once) from an earlier run's planting. */
  attributedToEarlierRun: number;
  /** Leak findings whose planting run and request were checked against what was sent. */
  leakFindings: number;
  attributionCorrect: number;
  /** Runs without a leak: the scenario's notes and what the over-limit prompts got back, to say why. */
  misses: Array<{ run: number; notes: string[]; overlimitText: string[] }>;
  wallSeconds: number;
}

async function recall(installation: boolean, dir: string): Promise<RecallRow> {
  const engine = await startEngine({ preset: 'incident', scale: 128, port: 0, log: () => {} });
  const store = installation ? openStore({ path: path.join(dir, `recall-${Date.now()}.sqlite`), retentionMs: RETENTION_MS }) : undefined;
  const keyFile = path.join(dir, 'marker.key');
  const sent = new Map<string, Map<string, Sent>>();
  const row: RecallRow = {
    setting: installation ? 'installation key + shared store (kvcanary run now)' : 'fresh random key per run (a registry of this run only)',
    runs: 0, recalled: 0, recall: 0, recallCi95: [0, 0], attributedToEarlierRun: 0, leakFindings: 0, attributionCorrect: 0, misses: [], wallSeconds: 0,
  };
  const t0 = performance.now();
  try {
    for (let i = 0; i < RUNS; i++) {
      const runId = `bench-markers-${installation ? 'key' : 'fresh'}-${i}`;
      // A new process per run: a fresh registry each time.
      const registry = store !== undefined ? createInstallationRegistry({ store, since: Date.now() - RETENTION_MS, keyFile }) : createMarkerRegistry();
      const scanner = recordingScanner(createScanner(registry), 200);
      const run = await probeOnce(engine.url, registry, store, runId, ['overlimit-handoff'], scanner);
      const overlimitText = scanner.take().filter((r) => r.role === 'overlimit').map((r) => r.text);
      const requests = new Map<string, Sent>();
      for (const s of run.scenarios) for (const r of s.requests) requests.set(r.requestId, { role: r.role, tenant: r.tenant });
      sent.set(runId, requests);
      const leaks = run.scenarios.flatMap((s) => s.findings).filter((f) => f.kind === 'cross-request-leak');
      row.runs++;
      if (leaks.length > 0) row.recalled++;
      else if (installation) row.misses.push({ run: i, notes: run.scenarios.flatMap((s) => s.notes), overlimitText });
      if (leaks.some((f) => f.evidence.planted?.by === 'earlier-run')) row.attributedToEarlierRun++;
      for (const f of leaks) {
        row.leakFindings++;
        const p = f.evidence.planted;
        const req = p?.runId === undefined || p.requestId === undefined ? undefined : sent.get(p.runId)?.get(p.requestId);
        const by = p?.runId === runId ? 'this-run' : 'earlier-run';
        if (p !== undefined && req !== undefined && req.role === p.role && req.tenant === p.tenant && p.by === by) row.attributionCorrect++;
      }
    }
  } finally {
    store?.close();
    await engine.close();
  }
  row.recall = row.recalled / row.runs;
  const ci = proportion(row.recalled, row.runs);
  row.recallCi95 = [round(ci.low ?? 0, 4), round(ci.high ?? 1, 4)];
  row.wallSeconds = round((performance.now() - t0) / 1000, 1);
  return row;
}

interface GrowthRow {
  scale: string;
  cycles: number;
  requestsPerCycle: number;
  plantingRowsPerCycle: number;
  markersPerCycle: number;
  /** Bytes per cycle by table (pages incl. their indexes), from the store after all cycles. */
  bytesPerCycle: Record<string, number>;
  /** Of those, the tables retention prunes (requests, plantings). */
  prunedBytesPerCycle: number;
  /** Runs, scenario outcomes, findings: kept. */
  keptBytesPerCycle: number;
  /** The same cycles' markers in the per-marker table this replaced (one row per marker + its index). */
  oldMarkerTableBytesPerCycle: number;
  wallSeconds: number;
}

const TABLE_OF: Record<string, string> = {
  sqlite_autoindex_runs_1: 'runs', runs_target_started: 'runs', runs_started: 'runs', sqlite_autoindex_scenario_runs_1: 'scenario_runs',
  requests_at: 'requests', requests_run: 'requests', plantings_planted: 'plantings', findings_at: 'findings', findings_run: 'findings',
};

function tableBytes(db: Database.Database): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of db.prepare('SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name').all() as { name: string; bytes: number }[]) {
    const t = TABLE_OF[r.name] ?? r.name;
    out[t] = (out[t] ?? 0) + r.bytes;
  }
  return out;
}

async function growth(scale: number, dir: string): Promise<GrowthRow> {
  const engine = await startEngine({ preset: 'incident', scale, port: 0, log: () => {} });
  const file = path.join(dir, `growth-${scale}.sqlite`);
  const store = openStore({ path: file, retentionMs: RETENTION_MS });
  const keyFile = path.join(dir, 'marker.key');
  const t0 = performance.now();
  let requests = 0;
  const before = (() => { const db = new Database(file, { readonly: true }); const b = tableBytes(db); db.close(); return b; })();
  try {
    for (let i = 0; i < CYCLES; i++) {
      const registry = createInstallationRegistry({ store, since: Date.now() - RETENTION_MS, keyFile });
      const run = await probeOnce(engine.url, registry, store, `bench-growth-${scale}-${i}`, [...SCENARIO_NAMES]);
      requests += run.scenarios.reduce((n, s) => n + s.requests.length, 0);
    }
  } finally {
    store.close();
    await engine.close();
  }
  const db = new Database(file, { readonly: true });
  const after = tableBytes(db);
  const plantings = db.prepare('SELECT count(*) AS n, coalesce(sum(marker_count), 0) AS markers FROM plantings').get() as { n: number; markers: number };
  const all = db.prepare('SELECT request_no, run_id, request_id, role, tenant, planted_at, marker_count FROM plantings').all() as
    { request_no: string; run_id: string; request_id: string; role: string; tenant: string; planted_at: string; marker_count: number }[];
  db.close();
  // The per-marker table of schema 2, filled with the same markers (re-derived), in a scratch database.
  const codec = createMarkerCodec(loadMarkerKey(keyFile));
  const old = new Database(path.join(dir, `old-${scale}.sqlite`));
  old.exec(`CREATE TABLE markers (marker TEXT PRIMARY KEY, run_id TEXT NOT NULL, request_id TEXT NOT NULL, role TEXT NOT NULL, tenant TEXT NOT NULL, planted_at TEXT NOT NULL);
    CREATE INDEX markers_planted ON markers (planted_at);`);
  const insert = old.prepare('INSERT INTO markers VALUES (?, ?, ?, ?, ?, ?)');
  old.transaction(() => {
    for (const p of all) for (let k = 0; k < p.marker_count; k++) insert.run(codec.encode(p.request_no, k), p.run_id, p.request_id, p.role, p.tenant, p.planted_at);
  })();
  const oldBytes = Object.entries(tableBytes(old)).filter(([t]) => t.startsWith('markers') || t === 'sqlite_autoindex_markers_1').reduce((n, [, b]) => n + b, 0);
  old.close();
  const bytesPerCycle: Record<string, number> = {};
  for (const t of new Set([...Object.keys(after), ...Object.keys(before)])) {
    if (t === 'sqlite_schema' || t === 'sqlite_sequence' || t === 'schema_migrations' || t.startsWith('sqlite_autoindex_schema')) continue;
    bytesPerCycle[t] = Math.round(((after[t] ?? 0) - (before[t] ?? 0)) / CYCLES);
  }
  const pruned = (bytesPerCycle.requests ?? 0) + (bytesPerCycle.plantings ?? 0);
  const total = Object.values(bytesPerCycle).reduce((a, b) => a + b, 0);
  return {
    scale: `1/${scale}`,
    cycles: CYCLES,
    requestsPerCycle: round(requests / CYCLES, 1),
    plantingRowsPerCycle: round(plantings.n / CYCLES, 1),
    markersPerCycle: round(plantings.markers / CYCLES, 1),
    bytesPerCycle,
    prunedBytesPerCycle: pruned,
    keptBytesPerCycle: total - pruned,
    oldMarkerTableBytesPerCycle: Math.round(oldBytes / CYCLES),
    wallSeconds: round((performance.now() - t0) / 1000, 1),
  };
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-bench-markers-'));
try {
  const t0 = Date.now();
  const withKey = await recall(true, dir);
  const fresh = await recall(false, dir);
  process.stderr.write(`recall: ${JSON.stringify(withKey)}\n        ${JSON.stringify(fresh)}\n`);
  const g128 = await growth(128, dir);
  const g64 = await growth(64, dir);
  process.stderr.write(`growth: ${JSON.stringify(g128)}\n        ${JSON.stringify(g64)}\n`);
  // Six more doublings from 1/64 to full scale. Planting rows and requests are counted per request, so they
  // grow with the number of requests a cycle sends, not its marker count: the measured 1/128 -> 1/64 ratio,
  // applied six times, projects them (conservative while it is at least 1; marker counts are shown for scale).
  const ratio = (a: number, b: number): number => (a === 0 ? 1 : Math.max(1, b / a));
  const rowRatio = ratio(g128.prunedBytesPerCycle + g128.keptBytesPerCycle, g64.prunedBytesPerCycle + g64.keptBytesPerCycle);
  const fullPerCycle = (g64.prunedBytesPerCycle + g64.keptBytesPerCycle) * rowRatio ** 6;
  const fullPruned = g64.prunedBytesPerCycle * rowRatio ** 6;
  const fullKept = g64.keptBytesPerCycle * rowRatio ** 6;
  const cyclesPerRetention = RETENTION_MS / INTERVAL_MS;
  const oldFull = g64.oldMarkerTableBytesPerCycle * ratio(g128.oldMarkerTableBytesPerCycle, g64.oldMarkerTableBytesPerCycle) ** 6;
  const result = {
    command: `npm run bench:markers -- --runs ${RUNS} --cycles ${CYCLES}`,
    at: new Date().toISOString(),
    wallSeconds: round((Date.now() - t0) / 1000, 1),
    recall: { engine: 'incident preset, 1/128 scale, one engine for all runs', scenario: 'overlimit-handoff', rows: [withKey, fresh] },
    growth: {
      target: 'one target, every scenario per cycle (the service default)',
      rows: [g128, g64],
      projection: {
        method: 'bytes per cycle at 1/64 x (1/64 over 1/128 ratio, at least 1)^6; same for the old per-marker table',
        growthRatioPerDoubling: round(rowRatio, 3),
        fullScaleBytesPerCycle: Math.round(fullPerCycle),
        fullScalePrunedBytesPerCycle: Math.round(fullPruned),
        fullScaleKeptBytesPerCycle: Math.round(fullKept),
        goalBytesPerCycle: 1_000_000,
        retention: { days: RETENTION_MS / DAY, intervalMinutes: INTERVAL_MS / 60_000, cycles: cyclesPerRetention },
        steadyStatePrunedBytes: Math.round(fullPruned * cyclesPerRetention),
        keptBytesPerRetentionPeriod: Math.round(fullKept * cyclesPerRetention),
        oldDesignFullScaleMarkerBytesPerCycle: Math.round(oldFull),
        oldDesignSteadyStateMarkerBytes: Math.round(oldFull * cyclesPerRetention),
      },
    },
  };
  writeFileSync(args.out, JSON.stringify(result, null, 2) + '\n');
  const p = result.growth.projection;
  process.stdout.write(
    [
      `recall (runs with cross-request-leak / runs), ${RUNS} runs each on one engine:`,
      `  installation key : ${withKey.recalled}/${withKey.runs} = ${withKey.recall.toFixed(3)} (95% CI ${withKey.recallCi95.join('-')}); ` +
        `${withKey.attributedToEarlierRun} runs attributed to an earlier run; attribution correct ${withKey.attributionCorrect}/${withKey.leakFindings}`,
      `  fresh key per run: ${fresh.recalled}/${fresh.runs} = ${fresh.recall.toFixed(3)} (95% CI ${fresh.recallCi95.join('-')})`,
      `  ratio            : ${(withKey.recall / Math.max(fresh.recall, 1e-9)).toFixed(2)}x`,
      `store bytes per cycle (every scenario, one target):`,
      ...[g128, g64].map((g) => `  ${g.scale}: ${g.prunedBytesPerCycle + g.keptBytesPerCycle} B (pruned ${g.prunedBytesPerCycle}, kept ${g.keptBytesPerCycle}); ` +
        `${g.plantingRowsPerCycle} planting rows for ${g.markersPerCycle} markers; old per-marker table ${g.oldMarkerTableBytesPerCycle} B (${(g.oldMarkerTableBytesPerCycle / Math.max(1, g.bytesPerCycle.plantings ?? 1)).toFixed(0)}x the plantings table)`),
      `  full scale (projected): ${p.fullScaleBytesPerCycle} B per cycle (goal <= ${p.goalBytesPerCycle}); old design ${p.oldDesignFullScaleMarkerBytesPerCycle} B of markers alone`,
      `  7-day retention at one cycle / 5 min: ${p.steadyStatePrunedBytes} B steady state (pruned tables) + ${p.keptBytesPerRetentionPeriod} B kept records per 7 days; old design ${p.oldDesignSteadyStateMarkerBytes} B of markers`,
      `wrote ${args.out}`,
    ].join('\n') + '\n',
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
