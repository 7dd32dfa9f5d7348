/**
 * The evidence store: one SQLite file (better-sqlite3) holding probe runs, their requests, their planting
 * requests (one row per request that carried markers) and the findings they produced.
 *
 * Durability: WAL with `synchronous=FULL`. In WAL mode a committed transaction is already safe from a
 * SIGKILL of this process with NORMAL (the WAL frames sit in the OS page cache); FULL also fsyncs the WAL
 * on every commit, so a committed finding survives a power loss or kernel crash too. The service commits a
 * handful of transactions a minute, so the fsync costs nothing that matters, and a finding is exactly the
 * thing that must not vanish.
 *
 * Privacy: the file is created with mode 0600 (SQLite gives its -wal and -shm files the database file's
 * mode). No request or response bodies are stored. Evidence is re-bounded here whatever the caller sent
 * (strings cut, depth and size capped to a few KB) and every configured credential value is scrubbed from
 * every stored string first, since a leaked response or an echoed error may carry one.
 *
 * Retention: requests and plantings are pruned after the configured age; runs, scenario outcomes, findings
 * and skips (cycles or scenarios the scheduler did not run: budget, overlap, shutdown) are kept (they are
 * small, at most a row or two per cycle, and are the record). Plantings outlive their run so that a later run can
 * attribute a late leak of an earlier run's marker.
 *
 * Markers are not stored. A marker is the encryption of (request number, index, check) under the
 * installation's marker key (probe/markers.ts), so one `plantings` row per planting request (request
 * number, run, request, role, tenant, time, marker count; about 200 bytes with its indexes) attributes every
 * marker it carried, and its markers can be re-derived. Migration 3 replaced the per-marker table (which
 * grew by tens of MB an hour) with it: earlier marker rows were collapsed into one legacy planting row per
 * request (kept for the record until pruned; their random markers are no longer recognised).
 *
 * The pieces, under store/: opening the file (database.ts) and its schema (schema.ts), the write paths
 * (writes.ts), planting lookups (plantings.ts), the reads of the record (run-reads.ts), silences
 * (silences.ts); openStore wires them behind one Store and refuses every call once it is closed.
 *
 * Schema changes are numbered migrations recorded in `schema_migrations`; a database newer than this
 * code is refused rather than written to. A read-only open (`report`) never migrates: it reads a store as old
 * as MIN_READABLE_SCHEMA as it is (what a later migration added reads as empty).
 */
import type { Finding, Evidence, FindingKind, Severity } from '../probe/findings.js';
import type { PlantingRow } from '../probe/marker-registry.js';
import type { InconclusiveReason, Outcome, Power, ProbeRun, RunOutcome } from '../probe/result.js';
import type { Silence } from './silences.js';
import { openDatabase } from './store/database.js';
import { StoreError } from './store/error.js';
import { createPlantingReads, pruneOlderThan } from './store/plantings.js';
import { createRunReads } from './store/run-reads.js';
import { createSilenceAccess } from './store/silences.js';
import { createWriters } from './store/writes.js';
import { iso } from './store/values.js';

export { StoreError, type StoreErrorCode } from './store/error.js';
export { boundEvidence, MAX_EVIDENCE_JSON, MAX_EVIDENCE_STRING } from './store/values.js';
export { MIN_READABLE_SCHEMA, SCHEMA_VERSION } from './store/schema.js';

export interface StoreOptions {
  /** Database file, or ':memory:' (tests). */
  path: string;
  /** Requests and plantings older than this are removed by prune(). */
  retentionMs: number;
  /** Credential values to scrub from everything stored (a function so a config reload can change them). */
  secrets?: readonly string[] | (() => readonly string[]);
  /**
   * Open an existing kvcanary store for reading only (`report`): never created, chmodded, switched to WAL or
   * migrated; a file that is not a kvcanary store at this schema version is refused (StoreError).
   */
  readonly?: boolean;
}

/** One planting request (see PlantingRow in probe/marker-registry.ts). */
export type { PlantingRow } from '../probe/marker-registry.js';

export interface ScenarioSummary {
  name: string;
  outcome: Outcome;
  durationMs: number;
  tokens: { sent: number; billed: number };
  notes: string[];
  power?: Power;
  reason?: InconclusiveReason;
}

export interface RunSummary {
  runId: string;
  target: string;
  baseUrl: string;
  model: string;
  startedAt: string;
  finishedAt: string;
  /** By the overall rule, from the stored scenario outcomes (a cheap-only cycle an older version stored as pass reads partial). */
  outcome: RunOutcome;
  up: boolean;
  capacity: ProbeRun['capacity'];
  scenarios: ScenarioSummary[];
  findingCount: number;
}

export interface StoredFinding {
  id: number;
  runId: string;
  target: string;
  scenario: string;
  kind: FindingKind;
  severity: Severity;
  evidence: Evidence;
  chance: number;
  at: string;
  /** The silence that acknowledged it, if any. */
  acknowledged?: string;
}

export interface ScenarioLatest {
  scenario: string;
  outcome: Outcome;
  runId: string;
  at: string;
  notes: string[];
  /** Consecutive inconclusive runs of this scenario up to and including the latest (0 after a pass or fail). */
  inconclusiveStreak: number;
  /** Findings of the latest run of this scenario that no silence acknowledged, per kind. */
  findingCounts: Record<string, number>;
  tokens: { sent: number; billed: number };
  power?: Power;
  reason?: InconclusiveReason;
}

export interface TargetLatest {
  target: string;
  lastRun: RunSummary;
  scenarios: ScenarioLatest[];
}

export interface TokenSpend {
  target: string;
  scenario: string;
  /** Unix ms of the run's finish. */
  at: number;
  tokens: { sent: number; billed: number };
}

/** A cycle (or, with `scenario`, one scenario of a running cycle) the scheduler did not run. */
export interface SkipRow {
  target: string;
  /** ISO time of the skip. */
  at: string;
  /** budget, overlap or shutdown. */
  reason: string;
  scenario?: string;
  /** Budget skips: what the cycle (or scenario) cost last time, uncapped. */
  neededTokens?: number;
  /** Budget skips: what was left of the hourly budget. */
  availableTokens?: number;
}

/** The skips of one target for one reason within a window: how many, the first, and the latest in full. */
export interface SkipSummary {
  target: string;
  reason: string;
  count: number;
  firstAt: string;
  latest: SkipRow;
}

export interface Store {
  readonly path: string;
  schemaVersion(): number;
  /** The whole run (run, scenario outcomes, requests, findings) in one transaction. */
  recordRun(run: ProbeRun): void;
  /** Findings that arrived after their run was recorded (a probe that returned after its timeout). */
  addFindings(ref: { runId: string; target: string }, findings: readonly Finding[], at: string): void;
  /**
   * Records planting requests (one row per request number); call before the requests carrying their
   * markers are sent. Idempotent; a row seen again keeps the larger marker count.
   */
  recordPlantings(rows: readonly PlantingRow[]): void;
  /** Plantings since a time, oldest first, each with its run's target where the run is recorded. */
  loadPlantings(since: Date | number | string, opts?: { limit?: number }): PlantingRow[];
  /** The planting with this request number (16 hex digits), with its run's target where recorded. */
  findPlanting(requestNo: string): PlantingRow | undefined;
  /** Removes requests and plantings older than the retention (default: the one opened with); returns how many went. */
  prune(now: Date | number, retentionMs?: number): { requests: number; plantings: number };
  recentRuns(opts?: { limit?: number; since?: Date | number | string; target?: string }): RunSummary[];
  findings(opts?: { since?: Date | number | string; target?: string; limit?: number }): StoredFinding[];
  latestPerTarget(): TargetLatest[];
  tokenSpend(since: Date | number | string): TokenSpend[];
  /** Stores a silence (kvcanary ack); its id is assigned here. */
  addSilence(s: Omit<Silence, 'id'>): Silence;
  /** Every stored silence, newest first (active and expired: `report` lists both). */
  silences(): Silence[];
  /** Records a skip (the scheduler calls it whenever a cycle or a scenario of one does not run). */
  recordSkip(skip: SkipRow): void;
  /** Skips per target and reason, latest first; none for a store older than migration 5 (opened read-only). */
  skipSummary(opts?: { since?: Date | number | string; target?: string }): SkipSummary[];
  close(): void;
}

export function openStore(opts: StoreOptions): Store {
  const secretsOf = typeof opts.secrets === 'function' ? opts.secrets : (() => (opts.secrets as readonly string[] | undefined) ?? []);
  const db = openDatabase(opts);
  const writers = createWriters(db, secretsOf);
  const plantings = createPlantingReads(db);
  const reads = createRunReads(db);
  const silences = createSilenceAccess(db, secretsOf);
  let closed = false;
  /** Every call but close() refuses a closed store (a StoreError, not better-sqlite3's TypeError). */
  const open = <A extends unknown[], R>(f: (...args: A) => R) => (...args: A): R => {
    if (closed) throw new StoreError('KVC_STORE_CLOSED', 'the evidence store is closed');
    return f(...args);
  };

  return {
    path: opts.path,
    schemaVersion: open(() => (db.prepare('SELECT coalesce(max(version), 0) AS v FROM schema_migrations').get() as { v: number }).v),
    recordRun: open(writers.recordRun),
    addFindings: open((ref, findings, at) => writers.writeFindings(ref, findings, iso(at, 'at'))),
    recordPlantings: open(writers.writePlantings),
    loadPlantings: open(plantings.loadPlantings),
    findPlanting: open(plantings.findPlanting),
    prune: open((now, retentionMs = opts.retentionMs) => pruneOlderThan(db, now, retentionMs)),
    recentRuns: open(reads.recentRuns),
    findings: open(reads.findings),
    latestPerTarget: open(reads.latestPerTarget),
    tokenSpend: open(reads.tokenSpend),
    addSilence: open(silences.addSilence),
    silences: open(silences.silences),
    recordSkip: open(writers.writeSkip),
    skipSummary: open(reads.skipSummary),
    close() {
      if (closed) return;
      closed = true;
      db.close();
    },
  };
}
