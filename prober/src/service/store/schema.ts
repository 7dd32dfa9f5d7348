/**
 * The store's schema: numbered migrations recorded in `schema_migrations`. A database newer than this code is
 * refused rather than written to; a read-only open never migrates, and reads a store as old as
 * MIN_READABLE_SCHEMA as it is (what a later migration added reads as empty).
 */
import type Database from 'better-sqlite3';
import { StoreError } from './error.js';

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
  {
    version: 6,
    name: 'partial run outcome (every applicable scenario passed, no behavioural one among them)',
    // SQLite cannot alter a CHECK constraint: rebuild runs (migrate() runs with foreign keys off).
    sql: `
      CREATE TABLE runs_v6 (
        run_id      TEXT PRIMARY KEY,
        target      TEXT NOT NULL,
        base_url    TEXT NOT NULL,
        model       TEXT NOT NULL,
        started_at  TEXT NOT NULL,
        finished_at TEXT NOT NULL,
        outcome     TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive', 'not-applicable', 'partial')),
        up          INTEGER NOT NULL,
        capacity    TEXT NOT NULL
      );
      INSERT INTO runs_v6 SELECT run_id, target, base_url, model, started_at, finished_at, outcome, up, capacity FROM runs;
      DROP TABLE runs;
      ALTER TABLE runs_v6 RENAME TO runs;
      CREATE INDEX runs_target_started ON runs (target, started_at);
      CREATE INDEX runs_started ON runs (started_at);
    `,
  },
];

export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/**
 * The oldest schema a read-only open accepts as it is: every read path works on it (silences and acknowledged
 * findings came with 4; skips, from 5, read as none). Raise it when a migration changes what the reads need.
 */
export const MIN_READABLE_SCHEMA = 4;

/** A read-only open: the file must be a kvcanary store at a schema from MIN_READABLE_SCHEMA to this one. */
export function checkSchema(db: Database.Database, file: string): void {
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

export function migrate(db: Database.Database): void {
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

