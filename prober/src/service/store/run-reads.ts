/**
 * The store's reads of the record: runs with their scenario outcomes, findings, each target's latest outcome
 * per scenario (the status page, metrics on start), token spend (budgets on start) and skips (`report`).
 */
import type Database from 'better-sqlite3';
import type { Evidence, FindingKind, Severity } from '../../probe/findings.js';
import { combineOutcomes, type InconclusiveReason, type Power, type ProbeRun } from '../../probe/result.js';
import type { RunSummary, ScenarioSummary, SkipSummary, StoredFinding, TargetLatest, TokenSpend } from '../store.js';
import type { FindingRow, RunRow, ScenarioRow } from './rows.js';
import { iso } from './values.js';

const RUN_COLUMNS = `r.*, (SELECT count(*) FROM findings f WHERE f.run_id = r.run_id) AS finding_count`;

/** Each run's scenario outcomes, by run id. */
function scenariosOf(db: Database.Database, runIds: string[]): Map<string, ScenarioSummary[]> {
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

function toSummaries(db: Database.Database, rows: RunRow[]): RunSummary[] {
  const scen = scenariosOf(db, rows.map((r) => r.run_id));
  return rows.map((r) => {
    // The overall rule, applied to what was stored: older versions stored a cycle of cheap checks as pass.
    const scenarios = scen.get(r.run_id) ?? [];
    return {
      runId: r.run_id, target: r.target, baseUrl: r.base_url, model: r.model, startedAt: r.started_at,
      finishedAt: r.finished_at, outcome: scenarios.length > 0 ? combineOutcomes(scenarios) : r.outcome, up: r.up === 1,
      capacity: JSON.parse(r.capacity) as ProbeRun['capacity'], scenarios,
      findingCount: r.finding_count,
    };
  });
}

export function createRunReads(db: Database.Database) {
  return {
    recentRuns({ limit = 50, since, target }: { limit?: number; since?: Date | number | string; target?: string } = {}): RunSummary[] {
      const rows = db.prepare(`SELECT ${RUN_COLUMNS} FROM runs r
        WHERE (@since IS NULL OR r.started_at >= @since) AND (@target IS NULL OR r.target = @target)
        ORDER BY r.started_at DESC, r.run_id LIMIT @limit`).all({
        since: since === undefined ? null : iso(since, 'since'), target: target ?? null, limit: Math.max(0, Math.floor(limit)),
      }) as RunRow[];
      return toSummaries(db, rows);
    },

    findings({ since, target, limit = 100 }: { since?: Date | number | string; target?: string; limit?: number } = {}): StoredFinding[] {
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

    latestPerTarget(): TargetLatest[] {
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
      const summaries = toSummaries(db, lastRuns);
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

    tokenSpend(since: Date | number | string): TokenSpend[] {
      const rows = db.prepare(`SELECT r.target, s.scenario, r.finished_at, s.tokens_sent, s.tokens_billed
        FROM scenario_runs s JOIN runs r ON r.run_id = s.run_id WHERE r.finished_at >= ? ORDER BY r.finished_at`)
        .all(iso(since, 'since')) as { target: string; scenario: string; finished_at: string; tokens_sent: number; tokens_billed: number }[];
      return rows.map((r) => ({ target: r.target, scenario: r.scenario, at: Date.parse(r.finished_at), tokens: { sent: r.tokens_sent, billed: r.tokens_billed } }));
    },

    skipSummary({ since, target }: { since?: Date | number | string; target?: string } = {}): SkipSummary[] {
      return readSkipSummary(db, since === undefined ? null : iso(since, 'since'), target ?? null);
    },
  };
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

