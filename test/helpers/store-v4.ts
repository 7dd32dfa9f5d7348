/**
 * A store as kvcanary wrote it at schema version 4 (before the skips table), written by hand rather than by
 * today's migrations, so the migration and the read-only report are tested against what is really on disk.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';

export const V4_RUN = { runId: 'v4-run', target: 'prod', startedAt: '2026-01-01T00:00:00.000Z', finishedAt: '2026-01-01T00:01:00.000Z' };

/** A v4 store holding one failed run of `prod` (one scenario, one finding) and one silence. */
export function writeV4Store(file: string, at: { startedAt: string; finishedAt: string } = V4_RUN): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const db = new Database(file);
  db.exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);
    CREATE TABLE runs (run_id TEXT PRIMARY KEY, target TEXT NOT NULL, base_url TEXT NOT NULL, model TEXT NOT NULL, started_at TEXT NOT NULL,
      finished_at TEXT NOT NULL, outcome TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive', 'not-applicable')), up INTEGER NOT NULL, capacity TEXT NOT NULL);
    CREATE INDEX runs_target_started ON runs (target, started_at); CREATE INDEX runs_started ON runs (started_at);
    CREATE TABLE scenario_runs (run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, scenario TEXT NOT NULL,
      outcome TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive', 'not-applicable')), duration_ms REAL NOT NULL, tokens_sent INTEGER NOT NULL,
      tokens_billed INTEGER NOT NULL, notes TEXT NOT NULL, power TEXT, reason TEXT, PRIMARY KEY (run_id, scenario));
    CREATE TABLE requests (run_id TEXT NOT NULL, scenario TEXT NOT NULL, request_id TEXT NOT NULL, role TEXT NOT NULL, tenant TEXT NOT NULL,
      transport TEXT NOT NULL, status INTEGER, prompt_tokens INTEGER, usage_prompt_tokens INTEGER, usage_completion_tokens INTEGER,
      cached_tokens INTEGER, latency_ms REAL, ttft_ms REAL, finish_reason TEXT, error TEXT, at TEXT NOT NULL);
    CREATE INDEX requests_at ON requests (at); CREATE INDEX requests_run ON requests (run_id);
    CREATE TABLE findings (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs (run_id), target TEXT NOT NULL,
      scenario TEXT NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL, evidence TEXT NOT NULL, chance REAL NOT NULL, at TEXT NOT NULL, acknowledged TEXT);
    CREATE INDEX findings_at ON findings (at); CREATE INDEX findings_run ON findings (run_id);
    CREATE TABLE plantings (request_no TEXT PRIMARY KEY, run_id TEXT NOT NULL, request_id TEXT NOT NULL, role TEXT NOT NULL, tenant TEXT NOT NULL,
      planted_at TEXT NOT NULL, marker_count INTEGER NOT NULL) WITHOUT ROWID;
    CREATE INDEX plantings_planted ON plantings (planted_at);
    CREATE TABLE silences (id INTEGER PRIMARY KEY AUTOINCREMENT, target TEXT NOT NULL, kind TEXT NOT NULL, scenario TEXT, reason TEXT NOT NULL,
      created_at TEXT NOT NULL, expires_at TEXT NOT NULL, created_by TEXT NOT NULL);
    INSERT INTO schema_migrations VALUES (1, 'v1', '2026-01-01T00:00:00Z'), (2, 'v2', '2026-01-01T00:00:00Z'), (3, 'v3', '2026-01-01T00:00:00Z'), (4, 'v4', '2026-01-01T00:00:00Z');`);
  db.prepare(`INSERT INTO runs VALUES (?, 'prod', 'http://x', 'm', ?, ?, 'fail', 1, '{}')`).run(V4_RUN.runId, at.startedAt, at.finishedAt);
  db.prepare(`INSERT INTO scenario_runs VALUES (?, 'capacity-audit', 'fail', 10, 0, 0, '[]', NULL, NULL)`).run(V4_RUN.runId);
  db.prepare(`INSERT INTO findings (run_id, target, scenario, kind, severity, evidence, chance, at, acknowledged)
    VALUES (?, 'prod', 'capacity-audit', 'pool-below-context', 'warning', '{}', 0, ?, NULL)`).run(V4_RUN.runId, at.finishedAt);
  db.prepare(`INSERT INTO silences (target, kind, scenario, reason, created_at, expires_at, created_by)
    VALUES ('prod', 'pool-below-context', NULL, 'resize planned', ?, '2099-01-01T00:00:00.000Z', 'ops')`).run(at.finishedAt);
  db.close();
}
