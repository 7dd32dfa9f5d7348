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
 * Schema changes are numbered migrations recorded in `schema_migrations`; a database newer than this
 * code is refused rather than written to. A read-only open (`report`) never migrates: it reads a store as old
 * as MIN_READABLE_SCHEMA as it is (what a later migration added reads as empty).
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Evidence, Finding, FindingKind, Severity } from '../probe/findings.js';
import type { PlantingRow } from '../probe/marker-registry.js';
import { safeText } from '../probe/redact.js';
import type { InconclusiveReason, Outcome, Power, ProbeRun } from '../probe/result.js';
import type { Silence } from './silences.js';

export type StoreErrorCode = 'KVC_STORE_OPEN' | 'KVC_STORE_SCHEMA_NEWER' | 'KVC_STORE_NOT_KVCANARY' | 'KVC_STORE_SCHEMA_OLDER' | 'KVC_STORE_INVALID_RUN' | 'KVC_STORE_DUPLICATE_RUN' | 'KVC_STORE_CLOSED';

export class StoreError extends Error {
  override readonly name = 'StoreError';
  constructor(readonly code: StoreErrorCode, message: string, opts: { cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
  }
}

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
  outcome: Outcome;
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

/** Per stored string; matches the scanner's bounded excerpt (about 160 chars) with room to spare. */
export const MAX_EVIDENCE_STRING = 320;
/** Whole evidence object as JSON. */
export const MAX_EVIDENCE_JSON = 4096;
const MAX_NOTE = 300;
const MAX_NOTES = 32;
const MAX_ERROR = 512;
const MAX_SHORT = 128;
/** A pathological scenario must not fill the disk; the count of what was dropped is noted. */
const MAX_FINDINGS_PER_SCENARIO = 1000;
const MAX_REQUESTS_PER_SCENARIO = 5000;

interface Migration { version: number; name: string; sql: string }

const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'runs, scenario_runs, requests, markers, findings',
    sql: `
      CREATE TABLE runs (
        run_id      TEXT PRIMARY KEY,
        target      TEXT NOT NULL,
        base_url    TEXT NOT NULL,
        model       TEXT NOT NULL,
        started_at  TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        outcome     TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive')),
        up          INTEGER NOT NULL,
        capacity    TEXT NOT NULL
      );
      CREATE INDEX runs_target_started ON runs (target, started_at);
      CREATE INDEX runs_started ON runs (started_at);

      CREATE TABLE scenario_runs (
        run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        scenario      TEXT NOT NULL,
        outcome       TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive')),
        duration_ms   REAL NOT NULL,
        tokens_sent   INTEGER NOT NULL,
        tokens_billed INTEGER NOT NULL,
        notes         TEXT NOT NULL,
        PRIMARY KEY (run_id, scenario)
      );

      CREATE TABLE requests (
        run_id                  TEXT NOT NULL,
        scenario                TEXT NOT NULL,
        request_id              TEXT NOT NULL,
        role                    TEXT NOT NULL,
        tenant                  TEXT NOT NULL,
        transport               TEXT NOT NULL,
        status                  INTEGER,
        prompt_tokens           INTEGER,
        usage_prompt_tokens     INTEGER,
        usage_completion_tokens INTEGER,
        cached_tokens           INTEGER,
        latency_ms              REAL,
        ttft_ms                 REAL,
        finish_reason           TEXT,
        error                   TEXT,
        at                      TEXT NOT NULL
      );
      CREATE INDEX requests_at ON requests (at);
      CREATE INDEX requests_run ON requests (run_id);

      CREATE TABLE markers (
        marker     TEXT PRIMARY KEY,
        run_id     TEXT NOT NULL,
        request_id TEXT NOT NULL,
        role       TEXT NOT NULL,
        tenant     TEXT NOT NULL,
        planted_at TEXT NOT NULL
      );
      CREATE INDEX markers_planted ON markers (planted_at);

      CREATE TABLE findings (
        id       INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id   TEXT NOT NULL REFERENCES runs (run_id),
        target   TEXT NOT NULL,
        scenario TEXT NOT NULL,
        kind     TEXT NOT NULL,
        severity TEXT NOT NULL,
        evidence TEXT NOT NULL,
        chance   REAL NOT NULL,
        at       TEXT NOT NULL
      );
      CREATE INDEX findings_at ON findings (at);
      CREATE INDEX findings_run ON findings (run_id);
    `,
  },
  {
    version: 2,
    name: 'not-applicable outcome; scenario power and inconclusive reason',
    // SQLite cannot alter a CHECK constraint: rebuild both tables (migrate() runs with foreign keys off).
    sql: `
      CREATE TABLE runs_v2 (
        run_id      TEXT PRIMARY KEY,
        target      TEXT NOT NULL,
        base_url    TEXT NOT NULL,
        model       TEXT NOT NULL,
        started_at  TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        outcome     TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive', 'not-applicable')),
        up          INTEGER NOT NULL,
        capacity    TEXT NOT NULL
      );
      INSERT INTO runs_v2 SELECT run_id, target, base_url, model, started_at, finished_at, outcome, up, capacity FROM runs;
      DROP TABLE runs;
      ALTER TABLE runs_v2 RENAME TO runs;
      CREATE INDEX runs_target_started ON runs (target, started_at);
      CREATE INDEX runs_started ON runs (started_at);

      CREATE TABLE scenario_runs_v2 (
        run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        scenario      TEXT NOT NULL,
        outcome       TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive', 'not-applicable')),
        duration_ms   REAL NOT NULL,
        tokens_sent   INTEGER NOT NULL,
        tokens_billed INTEGER NOT NULL,
        notes         TEXT NOT NULL,
        power         TEXT,
        reason        TEXT,
        PRIMARY KEY (run_id, scenario)
      );
      INSERT INTO scenario_runs_v2 (run_id, scenario, outcome, duration_ms, tokens_sent, tokens_billed, notes)
        SELECT run_id, scenario, outcome, duration_ms, tokens_sent, tokens_billed, notes FROM scenario_runs;
      DROP TABLE scenario_runs;
      ALTER TABLE scenario_runs_v2 RENAME TO scenario_runs;
    `,
  },
  {
    version: 3,
    name: 'plantings: one row per planting request; markers derived, not stored',
    // Earlier markers were random: they cannot be re-derived. Each request's rows collapse into one legacy
    // planting (its request number 'legacy-N', never a decrypted one) so the record of what was planted
    // stays until retention prunes it.
    sql: `
      CREATE TABLE plantings (
        request_no   TEXT PRIMARY KEY,
        run_id       TEXT NOT NULL,
        request_id   TEXT NOT NULL,
        role         TEXT NOT NULL,
        tenant       TEXT NOT NULL,
        planted_at   TEXT NOT NULL,
        marker_count INTEGER NOT NULL
      ) WITHOUT ROWID;
      INSERT INTO plantings (request_no, run_id, request_id, role, tenant, planted_at, marker_count)
        SELECT 'legacy-' || min(rowid), run_id, request_id, min(role), min(tenant), min(planted_at), count(*)
        FROM markers GROUP BY run_id, request_id;
      DROP TABLE markers;
      CREATE INDEX plantings_planted ON plantings (planted_at);
    `,
  },
  {
    version: 4,
    name: 'silences (kvcanary ack) and acknowledged findings',
    sql: `
      CREATE TABLE silences (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        target     TEXT NOT NULL,
        kind       TEXT NOT NULL,
        scenario   TEXT,
        reason     TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        created_by TEXT NOT NULL
      );
      ALTER TABLE findings ADD COLUMN acknowledged TEXT;
    `,
  },
  {
    version: 5,
    name: 'skips: cycles and scenarios not run (budget, overlap, shutdown)',
    sql: `
      CREATE TABLE skips (
        id               INTEGER PRIMARY KEY AUTOINCREMENT,
        target           TEXT NOT NULL,
        at               TEXT NOT NULL,
        reason           TEXT NOT NULL,
        scenario         TEXT,
        needed_tokens    INTEGER,
        available_tokens INTEGER
      );
      CREATE INDEX skips_target_at ON skips (target, at);
      CREATE INDEX skips_at ON skips (at);
    `,
  },
];

export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/**
 * The oldest schema a read-only open accepts as it is: every read path works on it (silences and acknowledged
 * findings came with 4; skips, from 5, read as none). Raise it when a migration changes what the reads need.
 */
export const MIN_READABLE_SCHEMA = 4;

function iso(t: Date | number | string, what: string): string {
  const d = t instanceof Date ? t : new Date(t);
  if (Number.isNaN(d.getTime())) throw new StoreError('KVC_STORE_INVALID_RUN', `${what}: not a valid time: ${String(t).slice(0, 40)}`);
  return d.toISOString();
}

function num(x: number | undefined): number | null {
  return x === undefined || !Number.isFinite(x) ? null : x;
}

/** Creates the file (and its folder) owner-only before SQLite opens it, and tightens an existing one. */
function prepareFile(file: string): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  closeSync(openSync(file, 'a', 0o600));
  for (const f of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
}

/**
 * Before a writable open: an existing, non-empty file must already be a kvcanary store (any schema; older ones
 * are migrated). Another application's SQLite file (or any other file) is refused before anything touches
 * it: opening it for writing would add kvcanary's tables, switch it to WAL and chmod it 0600.
 */
function refuseForeignFile(file: string): void {
  let size: number;
  try {
    size = statSync(file).size;
  } catch {
    return;  // a new store
  }
  if (size === 0) return;
  let probe: Database.Database;
  try {
    probe = new Database(file, { readonly: true, fileMustExist: true });
  } catch (err) {
    throw new StoreError('KVC_STORE_NOT_KVCANARY', `${file} is not a kvcanary evidence store (cannot be opened as SQLite); nothing was changed`, { cause: err });
  }
  try {
    const tables = new Set((probe.prepare(`SELECT name FROM sqlite_master WHERE type = 'table'`).all() as Array<{ name: string }>).map((r) => r.name));
    if (!(tables.has('schema_migrations') && tables.has('runs') && tables.has('findings'))) {
      throw new StoreError('KVC_STORE_NOT_KVCANARY', `${file} is not a kvcanary evidence store (an SQLite database without kvcanary's tables); nothing was changed`);
    }
  } catch (err) {
    if (err instanceof StoreError) throw err;
    throw new StoreError('KVC_STORE_NOT_KVCANARY', `${file} is not a kvcanary evidence store (not an SQLite database); nothing was changed`, { cause: err });
  } finally {
    probe.close();
  }
}

/** A read-only open: the file must be a kvcanary store at a schema from MIN_READABLE_SCHEMA to this one. */
function checkSchema(db: Database.Database, file: string): void {
  let version: number | undefined;
  try {
    const tables = new Set((db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table'`).all() as Array<{ name: string }>).map((r) => r.name));
    if (tables.has('schema_migrations') && tables.has('runs') && tables.has('findings')) {
      version = (db.prepare('SELECT coalesce(max(version), 0) AS v FROM schema_migrations').get() as { v: number }).v;
    }
  } catch (err) {
    db.close();
    throw new StoreError('KVC_STORE_NOT_KVCANARY', `${file} is not a kvcanary evidence store (not an SQLite database)`, { cause: err });
  }
  if (version === undefined) {
    db.close();
    throw new StoreError('KVC_STORE_NOT_KVCANARY', `${file} is not a kvcanary evidence store (an SQLite database without kvcanary's tables); nothing was changed`);
  }
  if (version > SCHEMA_VERSION || version < MIN_READABLE_SCHEMA) {
    db.close();
    throw version > SCHEMA_VERSION
      ? new StoreError('KVC_STORE_SCHEMA_NEWER', `${file}: schema version ${version} is newer than this kvcanary understands (${SCHEMA_VERSION}); upgrade kvcanary`)
      : new StoreError('KVC_STORE_SCHEMA_OLDER', `${file}: schema version ${version} is older than this kvcanary reads (${MIN_READABLE_SCHEMA}); \`kvcanary serve\` on it migrates it (report never writes)`);
  }
}

function migrate(db: Database.Database): void {
  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`);
  const current = (db.prepare('SELECT coalesce(max(version), 0) AS v FROM schema_migrations').get() as { v: number }).v;
  if (current > SCHEMA_VERSION) {
    throw new StoreError('KVC_STORE_SCHEMA_NEWER',
      `database schema version ${current} is newer than this kvcanary understands (${SCHEMA_VERSION}); upgrade kvcanary`);
  }
  const mark = db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)');
  for (const m of MIGRATIONS) {
    if (m.version <= current) continue;
    db.transaction(() => {
      db.exec(m.sql);
      mark.run(m.version, m.name, new Date().toISOString());
    })();
  }
}

/**
 * A bounded, scrubbed copy of any JSON-ish value: depth, list length, key count and string length capped,
 * non-JSON values dropped. Keys are scrubbed too (facts keyed by something a target sent).
 */
function boundValue(v: unknown, depth: number, maxString: number, secrets: readonly string[]): unknown {
  if (v === null || typeof v === 'boolean') return v;
  if (typeof v === 'number') return Number.isFinite(v) ? v : null;
  if (typeof v === 'string') return safeText(v, maxString, secrets);
  if (depth >= 4 || typeof v !== 'object') return undefined;
  if (Array.isArray(v)) {
    return v.slice(0, 16).map((x) => boundValue(x, depth + 1, maxString, secrets) ?? null);
  }
  const out: Record<string, unknown> = {};
  let n = 0;
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    if (n++ >= 32) break;
    const bounded = boundValue(x, depth + 1, maxString, secrets);
    if (bounded !== undefined) out[safeText(k, 64, secrets)] = bounded;
  }
  return out;
}

/** Exported for tests and for any other writer of evidence (the CLI's --json output may want the same). */
export function boundEvidence(evidence: Evidence, secrets: readonly string[] = []): Evidence {
  for (const maxString of [MAX_EVIDENCE_STRING, 96, 32]) {
    const bounded = boundValue(evidence, 0, maxString, secrets) ?? {};
    if (JSON.stringify(bounded).length <= MAX_EVIDENCE_JSON) return bounded as Evidence;
  }
  const match = typeof evidence.match === 'string' ? safeText(evidence.match, 96, secrets) : undefined;
  return { ...(match === undefined ? {} : { match }), facts: { evidence_truncated: true } };
}

interface RunRow {
  run_id: string; target: string; base_url: string; model: string; started_at: string; finished_at: string;
  outcome: Outcome; up: number; capacity: string; finding_count: number;
}
interface ScenarioRow {
  run_id: string; scenario: string; outcome: Outcome; duration_ms: number; tokens_sent: number; tokens_billed: number; notes: string;
  power: string | null; reason: string | null;
}
interface FindingRow {
  id: number; run_id: string; target: string; scenario: string; kind: string; severity: string; evidence: string; chance: number; at: string;
  acknowledged: string | null;
}

const short = (s: string, secrets: readonly string[]): string => safeText(s, MAX_SHORT, secrets);

/**
 * The page cache a connection keeps, in KiB (SQLite's own default). better-sqlite3 builds SQLite with a 16 MB
 * default, which a replica's store (8 MB after one cycle of 50 targets, every scenario) fills with pages it
 * wrote and seldom reads again: resident memory for nothing. The store is written row by row and read by
 * indexed queries (status page, API, reports), which a small cache serves.
 */
const PAGE_CACHE_KIB = 2048;

/** Every connection's settings: `kvcanary report` may read while `serve` writes (wait for the writer rather than fail); the page cache. */
function tuneConnection(db: Database.Database): void {
  db.pragma('busy_timeout = 5000');
  db.pragma(`cache_size = -${PAGE_CACHE_KIB}`);
}

/** Opens (read-only: checks the schema; otherwise creates owner-only, WAL, migrated) the database. */
function openDatabase(opts: StoreOptions): Database.Database {
  let db: Database.Database;
  try {
    if (opts.readonly === true) {
      db = new Database(opts.path, { readonly: true, fileMustExist: true });
      tuneConnection(db);
      checkSchema(db, opts.path);
    } else {
      if (opts.path !== ':memory:') {
        refuseForeignFile(opts.path);
        prepareFile(opts.path);
      }
      db = new Database(opts.path);
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = FULL');
      tuneConnection(db);
      // Table rebuilds in migrations must not cascade deletes: foreign keys are enforced once the schema is current.
      db.pragma('foreign_keys = OFF');
      migrate(db);
      db.pragma('foreign_keys = ON');
      if (opts.path !== ':memory:') prepareFile(opts.path);
    }
  } catch (err) {
    if (err instanceof StoreError) throw err;
    throw new StoreError('KVC_STORE_OPEN', `cannot open evidence store ${opts.path}: ${(err as Error).message}`, { cause: err });
  }
  return db;
}

/** The store's write paths: one transaction per run, per late finding batch, per planting batch. Every string
 * is bounded and scrubbed of the current secrets first. */
function createWriters(db: Database.Database, secretsOf: () => readonly string[]) {
  const insertRun = db.prepare(`INSERT INTO runs (run_id, target, base_url, model, started_at, finished_at, outcome, up, capacity)
    VALUES (@run_id, @target, @base_url, @model, @started_at, @finished_at, @outcome, @up, @capacity)`);
  const insertScenario = db.prepare(`INSERT INTO scenario_runs (run_id, scenario, outcome, duration_ms, tokens_sent, tokens_billed, notes, power, reason)
    VALUES (@run_id, @scenario, @outcome, @duration_ms, @tokens_sent, @tokens_billed, @notes, @power, @reason)`);
  const insertRequest = db.prepare(`INSERT INTO requests (run_id, scenario, request_id, role, tenant, transport, status, prompt_tokens,
    usage_prompt_tokens, usage_completion_tokens, cached_tokens, latency_ms, ttft_ms, finish_reason, error, at)
    VALUES (@run_id, @scenario, @request_id, @role, @tenant, @transport, @status, @prompt_tokens, @usage_prompt_tokens,
    @usage_completion_tokens, @cached_tokens, @latency_ms, @ttft_ms, @finish_reason, @error, @at)`);
  const insertFinding = db.prepare(`INSERT INTO findings (run_id, target, scenario, kind, severity, evidence, chance, at, acknowledged)
    VALUES (@run_id, @target, @scenario, @kind, @severity, @evidence, @chance, @at, @acknowledged)`);
  const upsertPlanting = db.prepare(`INSERT INTO plantings (request_no, run_id, request_id, role, tenant, planted_at, marker_count)
    VALUES (@request_no, @run_id, @request_id, @role, @tenant, @planted_at, @marker_count)
    ON CONFLICT (request_no) DO UPDATE SET marker_count = max(marker_count, excluded.marker_count)`);

  function findingRow(runId: string, target: string, f: Finding, at: string, secrets: readonly string[]) {
    return {
      run_id: runId,
      target,
      scenario: short(f.scenario, secrets),
      kind: short(f.kind, secrets),
      severity: short(f.severity, secrets),
      evidence: JSON.stringify(boundEvidence(f.evidence ?? {}, secrets)),
      chance: Number.isFinite(f.chance) ? Math.min(1, Math.max(0, f.chance)) : 1,
      at,
      acknowledged: f.acknowledged === undefined ? null : safeText(f.acknowledged, 512, secrets),
    };
  }

  const writeRun = db.transaction((run: ProbeRun) => {
    const secrets = secretsOf();
    const startedAt = iso(run.startedAt, 'startedAt');
    const finishedAt = iso(run.finishedAt, 'finishedAt');
    insertRun.run({
      run_id: run.runId,
      target: run.target,
      base_url: safeText(run.baseUrl, 512, secrets),
      model: short(run.model, secrets),
      started_at: startedAt,
      finished_at: finishedAt,
      outcome: run.outcome,
      up: run.up ? 1 : 0,
      capacity: JSON.stringify({
        contextTokens: num(run.capacity.contextTokens) ?? undefined,
        poolTokens: num(run.capacity.poolTokens) ?? undefined,
        pageSize: num(run.capacity.pageSize) ?? undefined,
      }),
    });
    for (const s of run.scenarios) {
      const notes = s.notes.slice(0, MAX_NOTES).map((n) => safeText(n, MAX_NOTE, secrets));
      if (s.findings.length > MAX_FINDINGS_PER_SCENARIO) notes.push(`${s.findings.length - MAX_FINDINGS_PER_SCENARIO} more findings not stored (cap ${MAX_FINDINGS_PER_SCENARIO})`);
      if (s.requests.length > MAX_REQUESTS_PER_SCENARIO) notes.push(`${s.requests.length - MAX_REQUESTS_PER_SCENARIO} more requests not stored (cap ${MAX_REQUESTS_PER_SCENARIO})`);
      insertScenario.run({
        run_id: run.runId,
        scenario: short(s.name, secrets),
        outcome: s.outcome,
        duration_ms: num(s.durationMs) ?? 0,
        tokens_sent: Math.round(num(s.tokens.sent) ?? 0),
        tokens_billed: Math.round(num(s.tokens.billed) ?? 0),
        notes: JSON.stringify(notes),
        power: s.power === undefined ? null : JSON.stringify({ trials: num(s.power.trials) ?? 0, detectableRate: num(s.power.detectableRate) ?? 0, confidence: num(s.power.confidence) ?? 0 }),
        reason: s.reason ?? null,
      });
      for (const r of s.requests.slice(0, MAX_REQUESTS_PER_SCENARIO)) {
        insertRequest.run({
          run_id: run.runId,
          scenario: short(s.name, secrets),
          request_id: short(r.requestId, secrets),
          role: short(r.role, secrets),
          tenant: short(r.tenant, secrets),
          transport: short(r.transport, secrets),
          status: num(r.status),
          prompt_tokens: num(r.promptTokens),
          usage_prompt_tokens: num(r.usagePromptTokens),
          usage_completion_tokens: num(r.usageCompletionTokens),
          cached_tokens: num(r.cachedTokens),
          latency_ms: num(r.latencyMs),
          ttft_ms: num(r.ttftMs),
          finish_reason: r.finishReason === undefined ? null : short(r.finishReason, secrets),
          error: r.error === undefined ? null : safeText(r.error, MAX_ERROR, secrets),
          at: startedAt,
        });
      }
      for (const f of s.findings.slice(0, MAX_FINDINGS_PER_SCENARIO)) insertFinding.run(findingRow(run.runId, run.target, f, finishedAt, secrets));
    }
  });

  const writeFindings = db.transaction((ref: { runId: string; target: string }, findings: readonly Finding[], at: string) => {
    const secrets = secretsOf();
    for (const f of findings.slice(0, MAX_FINDINGS_PER_SCENARIO)) insertFinding.run(findingRow(ref.runId, ref.target, f, at, secrets));
  });

  const writePlantings = db.transaction((rows: readonly PlantingRow[]) => {
    const secrets = secretsOf();
    for (const p of rows) {
      if (typeof p.requestNo !== 'string' || !/^[0-9a-f]{16}$/.test(p.requestNo)) {
        throw new StoreError('KVC_STORE_INVALID_RUN', `planting: expected a request number of 16 hex digits, got ${JSON.stringify(String(p.requestNo).slice(0, 40))}`);
      }
      if (!Number.isInteger(p.markerCount) || p.markerCount < 0) {
        throw new StoreError('KVC_STORE_INVALID_RUN', `planting ${p.requestNo}: expected a non-negative integer marker count, got ${String(p.markerCount)}`);
      }
      upsertPlanting.run({
        request_no: p.requestNo, run_id: short(p.runId, secrets), request_id: short(p.requestId, secrets), role: short(p.role, secrets),
        tenant: short(p.tenant, secrets), planted_at: iso(p.plantedAt, 'plantedAt'), marker_count: p.markerCount,
      });
    }
  });

  // Prepared on first use: a read-only open of a store from before migration 5 has no skips table.
  let insertSkip: Database.Statement | undefined;
  const tokens = (x: number | undefined): number | null => (num(x) === null ? null : Math.max(0, Math.round(x!)));
  const writeSkip = (k: SkipRow): void => {
    const secrets = secretsOf();
    insertSkip ??= db.prepare(`INSERT INTO skips (target, at, reason, scenario, needed_tokens, available_tokens)
      VALUES (@target, @at, @reason, @scenario, @needed_tokens, @available_tokens)`);
    insertSkip.run({
      target: short(k.target, secrets), at: iso(k.at, 'skip at'), reason: short(k.reason, secrets),
      scenario: k.scenario === undefined ? null : short(k.scenario, secrets),
      needed_tokens: tokens(k.neededTokens), available_tokens: tokens(k.availableTokens),
    });
  };

  return { writeRun, writeFindings, writePlantings, writeSkip };
}

/** Skips per target and reason within the window, latest first. A store from before migration 5 has none. */
function readSkipSummary(db: Database.Database, since: string | null, target: string | null): SkipSummary[] {
  const exists = db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'skips'`).get() !== undefined;
  if (!exists) return [];
  const rows = db.prepare(`
    WITH w AS (SELECT * FROM skips WHERE (@since IS NULL OR at >= @since) AND (@target IS NULL OR target = @target)),
    ranked AS (
      SELECT w.*, row_number() OVER (PARTITION BY target, reason ORDER BY at DESC, id DESC) AS rn,
             count(*) OVER (PARTITION BY target, reason) AS n, min(at) OVER (PARTITION BY target, reason) AS first_at
      FROM w)
    SELECT * FROM ranked WHERE rn = 1 ORDER BY at DESC, target, reason`).all({ since, target }) as
    { target: string; at: string; reason: string; scenario: string | null; needed_tokens: number | null; available_tokens: number | null; n: number; first_at: string }[];
  return rows.map((r) => ({
    target: r.target, reason: r.reason, count: r.n, firstAt: r.first_at,
    latest: {
      target: r.target, at: r.at, reason: r.reason,
      ...(r.scenario === null ? {} : { scenario: r.scenario }),
      ...(r.needed_tokens === null ? {} : { neededTokens: r.needed_tokens }),
      ...(r.available_tokens === null ? {} : { availableTokens: r.available_tokens }),
    },
  }));
}

export function openStore(opts: StoreOptions): Store {
  const secretsOf = typeof opts.secrets === 'function' ? opts.secrets : (() => (opts.secrets as readonly string[] | undefined) ?? []);
  const db = openDatabase(opts);
  const { writeRun, writeFindings, writePlantings, writeSkip } = createWriters(db, secretsOf);
  const PLANTING_SELECT = `SELECT p.*, r.target AS target, r.base_url AS base_url FROM plantings p LEFT JOIN runs r ON r.run_id = p.run_id`;
  const selectPlanting = db.prepare(`${PLANTING_SELECT} WHERE p.request_no = ?`);

  type PlantingDbRow = { request_no: string; run_id: string; request_id: string; role: string; tenant: string; planted_at: string; marker_count: number; target: string | null; base_url: string | null };
  const plantingOf = (r: PlantingDbRow): PlantingRow => ({
    requestNo: r.request_no, runId: r.run_id, requestId: r.request_id, role: r.role, tenant: r.tenant, plantedAt: r.planted_at,
    markerCount: r.marker_count, ...(r.target !== null ? { target: r.base_url !== null ? `${r.target} (${r.base_url})` : r.target } : {}),
  });

  function scenariosOf(runIds: string[]): Map<string, ScenarioSummary[]> {
    const out = new Map<string, ScenarioSummary[]>();
    if (runIds.length === 0) return out;
    const rows = db.prepare(`SELECT * FROM scenario_runs WHERE run_id IN (SELECT value FROM json_each(?)) ORDER BY scenario`)
      .all(JSON.stringify(runIds)) as ScenarioRow[];
    for (const r of rows) {
      const list = out.get(r.run_id) ?? [];
      list.push({
        name: r.scenario, outcome: r.outcome, durationMs: r.duration_ms,
        tokens: { sent: r.tokens_sent, billed: r.tokens_billed }, notes: JSON.parse(r.notes) as string[],
        ...(r.power !== null ? { power: JSON.parse(r.power) as Power } : {}),
        ...(r.reason !== null ? { reason: r.reason as InconclusiveReason } : {}),
      });
      out.set(r.run_id, list);
    }
    return out;
  }

  function toSummaries(rows: RunRow[]): RunSummary[] {
    const scen = scenariosOf(rows.map((r) => r.run_id));
    return rows.map((r) => ({
      runId: r.run_id, target: r.target, baseUrl: r.base_url, model: r.model, startedAt: r.started_at,
      finishedAt: r.finished_at, outcome: r.outcome, up: r.up === 1,
      capacity: JSON.parse(r.capacity) as ProbeRun['capacity'], scenarios: scen.get(r.run_id) ?? [],
      findingCount: r.finding_count,
    }));
  }

  const RUN_COLUMNS = `r.*, (SELECT count(*) FROM findings f WHERE f.run_id = r.run_id) AS finding_count`;
  let closed = false;
  const open = (): void => { if (closed) throw new StoreError('KVC_STORE_CLOSED', 'the evidence store is closed'); };

  return {
    path: opts.path,

    schemaVersion() {
      open();
      return (db.prepare('SELECT coalesce(max(version), 0) AS v FROM schema_migrations').get() as { v: number }).v;
    },

    recordRun(run) {
      open();
      try {
        writeRun(run);
      } catch (err) {
        if (err instanceof StoreError) throw err;
        const code = (err as { code?: string }).code;
        if (code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw new StoreError('KVC_STORE_DUPLICATE_RUN', `run ${run.runId} is already recorded`, { cause: err });
        if (code?.startsWith('SQLITE_CONSTRAINT') === true) throw new StoreError('KVC_STORE_INVALID_RUN', `run ${run.runId} rejected: ${(err as Error).message}`, { cause: err });
        throw err;
      }
    },

    addFindings(ref, findings, at) {
      open();
      writeFindings(ref, findings, iso(at, 'at'));
    },

    recordPlantings(rows) {
      open();
      writePlantings(rows);
    },

    loadPlantings(since, { limit } = {}) {
      open();
      // Newest first under the limit, returned oldest first; legacy rows (no request number) cannot be re-derived.
      const rows = db.prepare(`SELECT * FROM (${PLANTING_SELECT} WHERE p.planted_at >= @since AND p.request_no NOT LIKE 'legacy-%'
        ORDER BY p.planted_at DESC LIMIT @limit) ORDER BY planted_at`)
        .all({ since: iso(since, 'since'), limit: limit === undefined ? -1 : Math.max(0, Math.floor(limit)) }) as PlantingDbRow[];
      return rows.map(plantingOf);
    },

    findPlanting(requestNo) {
      open();
      const row = selectPlanting.get(requestNo) as PlantingDbRow | undefined;
      return row === undefined ? undefined : plantingOf(row);
    },

    prune(now, retentionMs = opts.retentionMs) {
      open();
      const cutoff = iso((now instanceof Date ? now.getTime() : now) - retentionMs, 'now');
      return db.transaction(() => ({
        requests: db.prepare('DELETE FROM requests WHERE at < ?').run(cutoff).changes,
        plantings: db.prepare('DELETE FROM plantings WHERE planted_at < ?').run(cutoff).changes,
      }))();
    },

    recentRuns({ limit = 50, since, target } = {}) {
      open();
      const rows = db.prepare(`SELECT ${RUN_COLUMNS} FROM runs r
        WHERE (@since IS NULL OR r.started_at >= @since) AND (@target IS NULL OR r.target = @target)
        ORDER BY r.started_at DESC, r.run_id LIMIT @limit`).all({
        since: since === undefined ? null : iso(since, 'since'), target: target ?? null, limit: Math.max(0, Math.floor(limit)),
      }) as RunRow[];
      return toSummaries(rows);
    },

    findings({ since, target, limit = 100 } = {}) {
      open();
      const rows = db.prepare(`SELECT * FROM findings
        WHERE (@since IS NULL OR at >= @since) AND (@target IS NULL OR target = @target)
        ORDER BY at DESC, id DESC LIMIT @limit`).all({
        since: since === undefined ? null : iso(since, 'since'), target: target ?? null, limit: Math.max(0, Math.floor(limit)),
      }) as FindingRow[];
      return rows.map((r) => ({
        id: r.id, runId: r.run_id, target: r.target, scenario: r.scenario, kind: r.kind as FindingKind,
        severity: r.severity as Severity, evidence: JSON.parse(r.evidence) as Evidence, chance: r.chance, at: r.at,
        ...(r.acknowledged === null || r.acknowledged === undefined ? {} : { acknowledged: r.acknowledged }),
      }));
    },

    addSilence(silence) {
      open();
      const info = db.prepare(`INSERT INTO silences (target, kind, scenario, reason, created_at, expires_at, created_by)
        VALUES (@target, @kind, @scenario, @reason, @created_at, @expires_at, @created_by)`).run({
        target: silence.target, kind: silence.kind, scenario: silence.scenario ?? null, reason: safeText(silence.reason, 300, secretsOf()),
        created_at: iso(silence.createdAt, 'createdAt'), expires_at: iso(silence.expiresAt, 'expiresAt'), created_by: safeText(silence.createdBy, 64, secretsOf()),
      });
      return { ...silence, id: String(info.lastInsertRowid) };
    },

    silences() {
      open();
      const rows = db.prepare('SELECT * FROM silences ORDER BY created_at DESC, id DESC').all() as
        { id: number; target: string; kind: string; scenario: string | null; reason: string; created_at: string; expires_at: string; created_by: string }[];
      return rows.map((r) => ({
        id: String(r.id), target: r.target, kind: r.kind, reason: r.reason, createdAt: r.created_at, expiresAt: r.expires_at, createdBy: r.created_by,
        ...(r.scenario === null ? {} : { scenario: r.scenario }),
      }));
    },

    recordSkip(skip) {
      open();
      writeSkip(skip);
    },

    skipSummary({ since, target } = {}) {
      open();
      return readSkipSummary(db, since === undefined ? null : iso(since, 'since'), target ?? null);
    },

    latestPerTarget() {
      open();
      const lastRuns = db.prepare(`SELECT ${RUN_COLUMNS} FROM runs r
        WHERE r.run_id = (SELECT r2.run_id FROM runs r2 WHERE r2.target = r.target ORDER BY r2.started_at DESC, r2.run_id LIMIT 1)
        ORDER BY r.target`).all() as RunRow[];
      // The latest outcome of each scenario may come from an older cycle (a scenario skipped since).
      const latest = db.prepare(`
        WITH ranked AS (
          SELECT r.target, s.*, r.finished_at, r.started_at,
                 row_number() OVER (PARTITION BY r.target, s.scenario ORDER BY r.started_at DESC, r.run_id) AS rn
          FROM scenario_runs s JOIN runs r ON r.run_id = s.run_id)
        SELECT ranked.*,
          (SELECT count(*) FROM scenario_runs s3 JOIN runs r3 ON r3.run_id = s3.run_id
            WHERE r3.target = ranked.target AND s3.scenario = ranked.scenario AND s3.outcome = 'inconclusive'
              AND r3.started_at > coalesce((SELECT max(r4.started_at) FROM scenario_runs s4 JOIN runs r4 ON r4.run_id = s4.run_id
                WHERE r4.target = ranked.target AND s4.scenario = ranked.scenario AND s4.outcome != 'inconclusive'), '')) AS streak
        FROM ranked WHERE rn = 1 ORDER BY target, scenario`).all() as (ScenarioRow & { target: string; finished_at: string; streak: number })[];
      const countsOf = db.prepare('SELECT kind, count(*) AS n FROM findings WHERE run_id = ? AND scenario = ? AND acknowledged IS NULL GROUP BY kind');
      const findingCounts = (runId: string, scenario: string): Record<string, number> =>
        Object.fromEntries((countsOf.all(runId, scenario) as { kind: string; n: number }[]).map((r) => [r.kind, r.n]));
      const summaries = toSummaries(lastRuns);
      return summaries.map((lastRun) => ({
        target: lastRun.target,
        lastRun,
        scenarios: latest.filter((s) => s.target === lastRun.target).map((s) => ({
          scenario: s.scenario, outcome: s.outcome, runId: s.run_id, at: s.finished_at, notes: JSON.parse(s.notes) as string[],
          inconclusiveStreak: s.streak, findingCounts: findingCounts(s.run_id, s.scenario), tokens: { sent: s.tokens_sent, billed: s.tokens_billed },
          ...(s.power !== null ? { power: JSON.parse(s.power) as Power } : {}),
          ...(s.reason !== null ? { reason: s.reason as InconclusiveReason } : {}),
        })),
      }));
    },

    tokenSpend(since) {
      open();
      const rows = db.prepare(`SELECT r.target, s.scenario, r.finished_at, s.tokens_sent, s.tokens_billed
        FROM scenario_runs s JOIN runs r ON r.run_id = s.run_id WHERE r.finished_at >= ? ORDER BY r.finished_at`)
        .all(iso(since, 'since')) as { target: string; scenario: string; finished_at: string; tokens_sent: number; tokens_billed: number }[];
      return rows.map((r) => ({ target: r.target, scenario: r.scenario, at: Date.parse(r.finished_at), tokens: { sent: r.tokens_sent, billed: r.tokens_billed } }));
    },

    close() {
      if (closed) return;
      closed = true;
      db.close();
    },
  };
}
