/**
 * The store's write paths: one transaction per run, per late finding batch, per planting batch; a skip a row.
 * Every string is bounded and scrubbed of the current secrets first.
 */
import type Database from 'better-sqlite3';
import type { Finding } from '../../probe/findings.js';
import type { PlantingRow } from '../../probe/marker-registry.js';
import { safeText } from '../../probe/redact.js';
import type { ProbeRun } from '../../probe/result.js';
import type { SkipRow } from '../store.js';
import { StoreError } from './error.js';
import { boundEvidence, iso, MAX_ERROR, MAX_FINDINGS_PER_SCENARIO, MAX_NOTE, MAX_NOTES, MAX_REQUESTS_PER_SCENARIO, num, short } from './values.js';

/** The store's write paths: one transaction per run, per late finding batch, per planting batch. Every string
 * is bounded and scrubbed of the current secrets first. */
export function createWriters(db: Database.Database, secretsOf: () => readonly string[]) {
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
        power:
          s.power === undefined
            ? null
            : JSON.stringify({
                trials: num(s.power.trials) ?? 0,
                detectableRate: num(s.power.detectableRate) ?? 0,
                confidence: num(s.power.confidence) ?? 0,
                ...(s.power.basis === 'measured' || s.power.basis === 'scaled' || s.power.basis === 'model' ? { basis: s.power.basis } : {}),
              }),
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

  /** A run, with SQLite's constraint errors told as what they mean (a run id seen before, a malformed run). */
  const recordRun = (run: ProbeRun): void => {
    try {
      writeRun(run);
    } catch (err) {
      if (err instanceof StoreError) throw err;
      const code = (err as { code?: string }).code;
      if (code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw new StoreError('KVC_STORE_DUPLICATE_RUN', `run ${run.runId} is already recorded`, { cause: err });
      if (code?.startsWith('SQLITE_CONSTRAINT') === true) throw new StoreError('KVC_STORE_INVALID_RUN', `run ${run.runId} rejected: ${(err as Error).message}`, { cause: err });
      throw err;
    }
  };

  return { recordRun, writeFindings, writePlantings, writeSkip };
}

