import { spawn } from 'node:child_process';
import { scratchHome } from '../helpers/cli.js';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { makeFinding, type Finding } from '../../prober/src/probe/findings.js';
import type { ProbeRun, ScenarioResult } from '../../prober/src/probe/result.js';
import { boundEvidence, MAX_EVIDENCE_JSON, openStore, SCHEMA_VERSION, StoreError, type Store } from '../../prober/src/service/store.js';
import { V4_RUN, writeV4Store } from '../helpers/store-v4.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-store-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const dbPath = (): string => path.join(dir, `s${n++}`, 'kvcanary.sqlite');
const DAY = 86_400_000;
const KEY = 'sk-live-0123456789abcdefghijklmnop';

function scenario(name: string, outcome: ScenarioResult['outcome'], findings: Finding[] = [], extra: Partial<ScenarioResult> = {}): ScenarioResult {
  return {
    name, outcome, findings, notes: [`${name} ${outcome}`], tokens: { sent: 1000, billed: 400 }, durationMs: 1234,
    requests: [{ requestId: `${name}-r1`, role: 'planter', tenant: 'default', transport: 'ok', status: 200, latencyMs: 12, ttftMs: 3, promptTokens: 100 }],
    ...extra,
  };
}

function run(runId: string, at: string, scenarios: ScenarioResult[], target = 'prod'): ProbeRun {
  return {
    runId, target, baseUrl: 'http://h:8000', model: 'm', startedAt: at, finishedAt: new Date(Date.parse(at) + 5000).toISOString(),
    outcome: scenarios.some((s) => s.outcome === 'fail') ? 'fail' : scenarios.every((s) => s.outcome === 'pass') ? 'pass' : 'inconclusive',
    scenarios, capacity: { contextTokens: 4096, poolTokens: 2048 }, up: true,
  };
}

const leak = (excerpt = 'abc kvcanary-aaaaaaaaaaaaaaaaaaaaaaaaaa def'): Finding =>
  makeFinding('cross-request-leak', 'abort-race', { match: 'kvcanary-aaaaaaaaaaaaaaaaaaaaaaaaaa', excerpt, read: { requestId: 'r9', role: 'reader', tenant: 'default' } }, 1e-30);

describe('store: file, pragmas and migrations', () => {
  it('creates the database and its WAL files owner-only, in WAL mode', () => {
    const p = dbPath();
    const store = openStore({ path: p, retentionMs: DAY });
    store.recordRun(run('r1', '2026-01-01T00:00:00Z', [scenario('capacity-audit', 'pass')]));
    for (const f of [p, `${p}-wal`, `${p}-shm`]) expect(statSync(f).mode & 0o777, f).toBe(0o600);
    expect(store.schemaVersion()).toBe(SCHEMA_VERSION);
    store.close();
    const db = new Database(p, { readonly: true });
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
  });

  it('tightens an existing world-readable file', () => {
    const p = dbPath();
    openStore({ path: p, retentionMs: DAY }).close();
    chmodSync(p, 0o644);
    openStore({ path: p, retentionMs: DAY }).close();
    expect(statSync(p).mode & 0o777).toBe(0o600);
  });

  it('applies numbered migrations once and refuses a newer schema', () => {
    const p = dbPath();
    openStore({ path: p, retentionMs: DAY }).close();
    openStore({ path: p, retentionMs: DAY }).close();
    const db = new Database(p);
    expect(db.prepare('SELECT version FROM schema_migrations').all()).toEqual(Array.from({ length: SCHEMA_VERSION }, (_, i) => ({ version: i + 1 })));
    db.prepare('INSERT INTO schema_migrations VALUES (99, ?, ?)').run('future', new Date().toISOString());
    db.close();
    expect(() => openStore({ path: p, retentionMs: DAY })).toThrow(expect.objectContaining({ code: 'KVC_STORE_SCHEMA_NEWER' }) as unknown as Error);
  });

  it('migrates a version-1 store in place: runs, scenario outcomes and findings kept, not-applicable and power storable', () => {
    const p = dbPath();
    mkdirSync(path.dirname(p), { recursive: true });
    const v1 = new Database(p);
    v1.exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);
      CREATE TABLE runs (run_id TEXT PRIMARY KEY, target TEXT NOT NULL, base_url TEXT NOT NULL, model TEXT NOT NULL, started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL, outcome TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive')), up INTEGER NOT NULL, capacity TEXT NOT NULL);
      CREATE INDEX runs_target_started ON runs (target, started_at); CREATE INDEX runs_started ON runs (started_at);
      CREATE TABLE scenario_runs (run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, scenario TEXT NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive')), duration_ms REAL NOT NULL, tokens_sent INTEGER NOT NULL,
        tokens_billed INTEGER NOT NULL, notes TEXT NOT NULL, PRIMARY KEY (run_id, scenario));
      CREATE TABLE requests (run_id TEXT NOT NULL, scenario TEXT NOT NULL, request_id TEXT NOT NULL, role TEXT NOT NULL, tenant TEXT NOT NULL,
        transport TEXT NOT NULL, status INTEGER, prompt_tokens INTEGER, usage_prompt_tokens INTEGER, usage_completion_tokens INTEGER,
        cached_tokens INTEGER, latency_ms REAL, ttft_ms REAL, finish_reason TEXT, error TEXT, at TEXT NOT NULL);
      CREATE TABLE markers (marker TEXT PRIMARY KEY, run_id TEXT NOT NULL, request_id TEXT NOT NULL, role TEXT NOT NULL, tenant TEXT NOT NULL, planted_at TEXT NOT NULL);
      CREATE TABLE findings (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs (run_id), target TEXT NOT NULL,
        scenario TEXT NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL, evidence TEXT NOT NULL, chance REAL NOT NULL, at TEXT NOT NULL);
      INSERT INTO schema_migrations VALUES (1, 'v1', '2026-01-01T00:00:00Z');
      INSERT INTO runs VALUES ('old', 't', 'http://x', 'm', '2026-01-01T00:00:00.000Z', '2026-01-01T00:01:00.000Z', 'fail', 1, '{}');
      INSERT INTO scenario_runs VALUES ('old', 'overlimit-handoff', 'fail', 10, 5, 5, '[]');
      INSERT INTO findings (run_id, target, scenario, kind, severity, evidence, chance, at)
        VALUES ('old', 't', 'overlimit-handoff', 'cross-request-leak', 'critical', '{}', 0, '2026-01-01T00:01:00.000Z');`);
    v1.close();
    const store = openStore({ path: p, retentionMs: 1000 * DAY });
    expect(store.recentRuns({ since: '2025-01-01T00:00:00Z' }).map((r) => [r.runId, r.outcome, r.scenarios.map((s) => s.outcome)])).toEqual([['old', 'fail', ['fail']]]);
    expect(store.findings({ since: '2025-01-01T00:00:00Z' })).toHaveLength(1);
    const power = { trials: 29, detectableRate: 0.1, confidence: 0.953 };
    store.recordRun({ ...run('new', '2026-02-01T00:00:00.000Z', [scenario('prefix-churn', 'not-applicable'), scenario('abort-race', 'pass', [], { power })], 't'), outcome: 'not-applicable' });
    const latest = store.latestPerTarget().find((t) => t.target === 't')!;
    // Stored as given (the CHECK takes not-applicable); read by the overall rule from its scenarios: abort-race passed.
    expect(latest.lastRun.outcome).toBe('pass');
    expect(latest.scenarios.map((s) => [s.scenario, s.outcome, s.power])).toEqual([['abort-race', 'pass', power], ['overlimit-handoff', 'fail', undefined], ['prefix-churn', 'not-applicable', undefined]]);
    store.close();
  });

  it('migrates a version-2 store with marker rows to one planting row per request (migration 3)', () => {
    const p = dbPath();
    mkdirSync(path.dirname(p), { recursive: true });
    const v2 = new Database(p);
    v2.exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);
      CREATE TABLE runs (run_id TEXT PRIMARY KEY, target TEXT NOT NULL, base_url TEXT NOT NULL, model TEXT NOT NULL, started_at TEXT NOT NULL,
        finished_at TEXT NOT NULL, outcome TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive', 'not-applicable')), up INTEGER NOT NULL, capacity TEXT NOT NULL);
      CREATE INDEX runs_target_started ON runs (target, started_at); CREATE INDEX runs_started ON runs (started_at);
      CREATE TABLE scenario_runs (run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, scenario TEXT NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive', 'not-applicable')), duration_ms REAL NOT NULL, tokens_sent INTEGER NOT NULL,
        tokens_billed INTEGER NOT NULL, notes TEXT NOT NULL, power TEXT, reason TEXT, PRIMARY KEY (run_id, scenario));
      CREATE TABLE requests (run_id TEXT NOT NULL, scenario TEXT NOT NULL, request_id TEXT NOT NULL, role TEXT NOT NULL, tenant TEXT NOT NULL,
        transport TEXT NOT NULL, status INTEGER, prompt_tokens INTEGER, usage_prompt_tokens INTEGER, usage_completion_tokens INTEGER,
        cached_tokens INTEGER, latency_ms REAL, ttft_ms REAL, finish_reason TEXT, error TEXT, at TEXT NOT NULL);
      CREATE TABLE markers (marker TEXT PRIMARY KEY, run_id TEXT NOT NULL, request_id TEXT NOT NULL, role TEXT NOT NULL, tenant TEXT NOT NULL, planted_at TEXT NOT NULL);
      CREATE INDEX markers_planted ON markers (planted_at);
      CREATE TABLE findings (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs (run_id), target TEXT NOT NULL,
        scenario TEXT NOT NULL, kind TEXT NOT NULL, severity TEXT NOT NULL, evidence TEXT NOT NULL, chance REAL NOT NULL, at TEXT NOT NULL);
      INSERT INTO schema_migrations VALUES (1, 'v1', '2026-01-01T00:00:00Z'), (2, 'v2', '2026-01-01T00:00:00Z');
      INSERT INTO runs VALUES ('old', 't', 'http://x', 'm', '2026-01-01T00:00:00.000Z', '2026-01-01T00:01:00.000Z', 'fail', 1, '{}');`);
    const insert = v2.prepare('INSERT INTO markers VALUES (?, ?, ?, ?, ?, ?)');
    for (let i = 0; i < 300; i++) insert.run(`kvcanary-${String(i).padStart(26, 'a')}`, 'old', `planter-${i % 3}`, 'planter', `tenant-${i % 3}`, `2026-01-01T00:00:${String(i % 60).padStart(2, '0')}.000Z`);
    insert.run('kvcanary-' + 'b'.repeat(26), 'old', 'reader-1', 'reader', 'tenant-b', '2026-01-01T00:00:30.000Z');
    v2.close();

    const store = openStore({ path: p, retentionMs: 1000 * DAY });
    expect(store.schemaVersion()).toBe(SCHEMA_VERSION);
    store.close();
    const db = new Database(p, { readonly: true });
    expect(db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'markers'").get()).toEqual({ n: 0 });
    const rows = db.prepare('SELECT request_id, role, tenant, planted_at, marker_count FROM plantings ORDER BY request_id').all();
    db.close();
    // Four requests planted 301 markers: four rows remain, each with its marker count and earliest time.
    expect(rows).toEqual([
      { request_id: 'planter-0', role: 'planter', tenant: 'tenant-0', planted_at: '2026-01-01T00:00:00.000Z', marker_count: 100 },
      { request_id: 'planter-1', role: 'planter', tenant: 'tenant-1', planted_at: '2026-01-01T00:00:01.000Z', marker_count: 100 },
      { request_id: 'planter-2', role: 'planter', tenant: 'tenant-2', planted_at: '2026-01-01T00:00:02.000Z', marker_count: 100 },
      { request_id: 'reader-1', role: 'reader', tenant: 'tenant-b', planted_at: '2026-01-01T00:00:30.000Z', marker_count: 1 },
    ]);
    const reopened = openStore({ path: p, retentionMs: 1000 * DAY });
    // Legacy rows cannot be re-derived (their markers were random): not loaded into a registry, pruned with age.
    expect(reopened.loadPlantings(0)).toEqual([]);
    expect(reopened.prune(Date.parse('2026-03-01T00:00:00Z'), DAY)).toEqual({ requests: 0, plantings: 4 });
    reopened.close();
  });

  it('migrates a version-4 store (migration 5): runs, findings and silences kept, skips recordable', () => {
    const p = dbPath();
    writeV4Store(p);
    const store = openStore({ path: p, retentionMs: DAY });
    expect(store.schemaVersion()).toBe(SCHEMA_VERSION);
    expect(store.recentRuns({ since: '2025-01-01T00:00:00Z' }).map((r) => [r.runId, r.outcome, r.findingCount])).toEqual([[V4_RUN.runId, 'fail', 1]]);
    expect(store.findings({ since: '2025-01-01T00:00:00Z' })).toEqual([expect.objectContaining({ runId: V4_RUN.runId, kind: 'pool-below-context' })]);
    expect(store.silences()).toEqual([expect.objectContaining({ target: 'prod', kind: 'pool-below-context', reason: 'resize planned' })]);
    expect(store.skipSummary()).toEqual([]);
    store.recordSkip({ target: 'prod', at: '2026-01-01T00:10:00Z', reason: 'budget', neededTokens: 650, availableTokens: 350 });
    expect(store.skipSummary()).toEqual([{ target: 'prod', reason: 'budget', count: 1, firstAt: '2026-01-01T00:10:00.000Z',
      latest: { target: 'prod', at: '2026-01-01T00:10:00.000Z', reason: 'budget', neededTokens: 650, availableTokens: 350 } }]);
    store.close();
  });

  it('reads a version-4 store read-only as it is (no skips), and refuses an older one read-only', () => {
    const p = dbPath();
    writeV4Store(p);
    const ro = openStore({ path: p, retentionMs: DAY, readonly: true });
    expect(ro.schemaVersion()).toBe(4);
    expect(ro.recentRuns({ since: '2025-01-01T00:00:00Z' })).toHaveLength(1);
    expect(ro.skipSummary({ since: '2025-01-01T00:00:00Z' })).toEqual([]);
    ro.close();
    const db = new Database(p);
    expect(db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'skips'").get()).toEqual({ n: 0 });
    db.prepare('DELETE FROM schema_migrations WHERE version = 4').run();
    db.close();
    expect(() => openStore({ path: p, retentionMs: DAY, readonly: true })).toThrow(expect.objectContaining({ code: 'KVC_STORE_SCHEMA_OLDER' }) as unknown as Error);
  });

  it('refuses a file that is not a database as KVC_STORE_NOT_KVCANARY, before touching it', () => {
    const p = path.join(dir, 'garbage.sqlite');
    writeFileSync(p, 'x'.repeat(4096));
    expect(() => openStore({ path: p, retentionMs: DAY })).toThrow(expect.objectContaining({ code: 'KVC_STORE_NOT_KVCANARY' }) as unknown as Error);
    expect(readFileSync(p, 'utf8')).toBe('x'.repeat(4096));
  });
});

describe('store: runs, findings, markers', () => {
  const fresh = (secrets: string[] = []): Store => openStore({ path: dbPath(), retentionMs: DAY, secrets });

  it('records a whole run and reads it back for the report and the status page', () => {
    const store = fresh();
    store.recordRun(run('r1', '2026-01-01T00:00:00Z', [scenario('overlimit-handoff', 'pass'), scenario('abort-race', 'inconclusive')]));
    store.recordRun(run('r2', '2026-01-01T00:05:00Z', [scenario('overlimit-handoff', 'fail', [leak()]), scenario('abort-race', 'inconclusive')]));
    store.recordRun(run('r3', '2026-01-01T00:10:00Z', [scenario('abort-race', 'inconclusive')]));
    store.recordRun(run('o1', '2026-01-01T00:07:00Z', [scenario('capacity-audit', 'pass')], 'other'));

    const recent = store.recentRuns();
    expect(recent.map((r) => r.runId)).toEqual(['r3', 'o1', 'r2', 'r1']);
    expect(recent[2]).toMatchObject({
      runId: 'r2', target: 'prod', outcome: 'fail', up: true, capacity: { contextTokens: 4096, poolTokens: 2048 }, findingCount: 1,
      scenarios: [
        { name: 'abort-race', outcome: 'inconclusive', durationMs: 1234, tokens: { sent: 1000, billed: 400 }, notes: ['abort-race inconclusive'] },
        { name: 'overlimit-handoff', outcome: 'fail' },
      ],
    });
    expect(store.recentRuns({ target: 'other' }).map((r) => r.runId)).toEqual(['o1']);
    expect(store.recentRuns({ since: '2026-01-01T00:06:00Z' }).map((r) => r.runId)).toEqual(['r3', 'o1']);
    expect(store.recentRuns({ limit: 1 })).toHaveLength(1);

    const [f] = store.findings({ since: '2026-01-01T00:00:00Z' });
    expect(f).toMatchObject({ runId: 'r2', target: 'prod', scenario: 'abort-race', kind: 'cross-request-leak', severity: 'critical', chance: 1e-30 });
    expect(f?.evidence.read).toEqual({ requestId: 'r9', role: 'reader', tenant: 'default' });
    expect(store.findings({ since: '2026-01-02T00:00:00Z' })).toEqual([]);

    const latest = store.latestPerTarget();
    expect(latest.map((t) => t.target)).toEqual(['other', 'prod']);
    const prod = latest[1]!;
    expect(prod.lastRun.runId).toBe('r3');
    // The latest overlimit-handoff outcome comes from r2, although r3 did not run it.
    expect(prod.scenarios).toEqual([
      expect.objectContaining({ scenario: 'abort-race', outcome: 'inconclusive', runId: 'r3', inconclusiveStreak: 3 }),
      expect.objectContaining({ scenario: 'overlimit-handoff', outcome: 'fail', runId: 'r2', inconclusiveStreak: 0 }),
    ]);
    expect(store.tokenSpend('2026-01-01T00:06:00Z').map((t) => [t.target, t.scenario, t.tokens.sent, t.at])).toEqual([
      ['other', 'capacity-audit', 1000, Date.parse('2026-01-01T00:07:05Z')],
      ['prod', 'abort-race', 1000, Date.parse('2026-01-01T00:10:05Z')],
    ]);
    store.close();
  });

  it('gives each scenario\'s latest run its unacknowledged findings per kind (what a restart restores for the alerts)', () => {
    const store = fresh();
    store.recordRun(run('r1', '2026-01-01T00:00:00Z', [scenario('abort-race', 'fail', [leak(), leak()])]));
    store.recordRun(run('r2', '2026-01-01T00:05:00Z', [scenario('capacity-audit', 'pass')]));
    const counts = () => Object.fromEntries(store.latestPerTarget()[0]!.scenarios.map((s) => [s.scenario, s.findingCounts]));
    expect(counts()).toEqual({ 'abort-race': { 'cross-request-leak': 2 }, 'capacity-audit': {} });
    store.recordRun(run('r3', '2026-01-01T01:00:00Z', [scenario('abort-race', 'fail', [leak(), { ...leak(), acknowledged: 'silence 1' }])]));
    expect(counts()['abort-race']).toEqual({ 'cross-request-leak': 1 });
    store.recordRun(run('r4', '2026-01-01T02:00:00Z', [scenario('abort-race', 'pass')]));
    expect(counts()['abort-race']).toEqual({});
    store.close();
  });

  it('writes a run in one transaction: a bad scenario leaves nothing behind', () => {
    const store = fresh();
    const bad = run('r1', '2026-01-01T00:00:00Z', [scenario('overlimit-handoff', 'fail', [leak()]), scenario('abort-race', 'maybe' as 'pass')]);
    expect(() => store.recordRun(bad)).toThrow(StoreError);
    expect(store.recentRuns()).toEqual([]);
    expect(store.findings()).toEqual([]);
    store.recordRun(run('r1', '2026-01-01T00:00:00Z', [scenario('capacity-audit', 'pass')]));
    expect(() => store.recordRun(run('r1', '2026-01-01T00:00:00Z', [scenario('capacity-audit', 'pass')])))
      .toThrow(expect.objectContaining({ code: 'KVC_STORE_DUPLICATE_RUN' }) as unknown as Error);
    store.close();
  });

  it('bounds evidence and scrubs configured keys, even a key cut at the excerpt edge', () => {
    const store = fresh([KEY]);
    const huge = 'x'.repeat(50_000);
    const facts: Record<string, string> = {};
    for (let i = 0; i < 200; i++) facts[`f${i}`] = huge;
    const f1 = makeFinding('rejection-not-enforced', 'overlimit-handoff', {
      excerpt: `${huge} Authorization: Bearer ${KEY} ${huge}`,
      facts: { [`key-${KEY}`]: 1, status: 200, note: `echo ${KEY.slice(0, 20)}` },
    });
    const f2 = makeFinding('cross-request-leak', 'abort-race', { match: 'm', facts, excerpt: `…${KEY.slice(5)}` });
    const s = scenario('overlimit-handoff', 'fail', [f1, f2], {
      notes: [`target said: invalid key ${KEY}`],
      requests: [{ requestId: 'q', role: 'overlimit', tenant: 'default', transport: 'http-4xx', status: 401, error: `bad key ${KEY} ${huge}` }],
    });
    store.recordRun(run('r1', '2026-01-01T00:00:00Z', [s]));
    const found = store.findings();
    for (const f of found) expect(JSON.stringify(f.evidence).length).toBeLessThanOrEqual(MAX_EVIDENCE_JSON);
    const p = store.path;
    store.close();
    // Nothing in the file (tables, WAL) carries the key or a 12-character piece of it.
    const db = new Database(p, { readonly: true });
    const dump = JSON.stringify([
      db.prepare('SELECT * FROM findings').all(), db.prepare('SELECT * FROM requests').all(), db.prepare('SELECT * FROM scenario_runs').all(),
    ]);
    db.close();
    for (let i = 0; i + 12 <= KEY.length; i++) expect(dump).not.toContain(KEY.slice(i, i + 12));
    expect(dump).toContain('[redacted]');
    expect(dump.length).toBeLessThan(20_000);
  });

  it('boundEvidence keeps small evidence as given', () => {
    const e = { match: 'kvcanary-abc', excerpt: 'short window', planted: { runId: 'r', requestId: 'q', role: 'planter', tenant: 'a', at: '2026-01-01T00:00:00.000Z' }, facts: { status: 200, ok: true, none: null } };
    expect(boundEvidence(e)).toEqual(e);
  });

  it('records one planting row per request idempotently, loads them by age and prunes requests and plantings but keeps findings', () => {
    const store = fresh();
    const now = Date.parse('2026-01-10T00:00:00Z');
    const old = new Date(now - 2 * DAY).toISOString();
    const recent = new Date(now - 1000).toISOString();
    const planting = (requestNo: string, runId: string, at: string, markerCount: number) => ({ requestNo, runId, requestId: 'q-' + requestNo, role: 'planter', tenant: 'default', plantedAt: at, markerCount });
    store.recordPlantings([planting('00000000000000a1', 'old', old, 10), planting('00000000000000b2', 'new', recent, 4)]);
    // Seen again (a request that planted more markers since): one row, the larger count.
    store.recordPlantings([planting('00000000000000b2', 'new', recent, 7), planting('00000000000000b2', 'new', recent, 5)]);
    expect(store.loadPlantings(0).map((p) => [p.requestNo, p.markerCount])).toEqual([['00000000000000a1', 10], ['00000000000000b2', 7]]);
    expect(store.loadPlantings(now - DAY)).toEqual([{ ...planting('00000000000000b2', 'new', recent, 7) }]);
    expect(store.loadPlantings(0, { limit: 1 }).map((p) => p.requestNo)).toEqual(['00000000000000b2']);
    expect(() => store.recordPlantings([planting('not-hex', 'x', recent, 1)])).toThrow(/16 hex digits/);

    store.recordRun(run('old', old, [scenario('abort-race', 'fail', [leak()])]));
    store.recordRun(run('new', recent, [scenario('abort-race', 'pass')]));
    // Attribution joins the planting's run: its target (and base URL) where the run is recorded.
    expect(store.findPlanting('00000000000000b2')).toMatchObject({ runId: 'new', requestId: 'q-00000000000000b2', markerCount: 7, target: expect.stringMatching(/^prod \(/) });
    expect(store.findPlanting('00000000000000ff')).toBeUndefined();
    expect(store.prune(now)).toEqual({ requests: 1, plantings: 1 });
    expect(store.loadPlantings(0).map((p) => p.requestNo)).toEqual(['00000000000000b2']);
    expect(store.findings().map((f) => f.runId)).toEqual(['old']);
    expect(store.recentRuns().map((r) => r.runId)).toEqual(['new', 'old']);
    expect(store.prune(now)).toEqual({ requests: 0, plantings: 0 });
    store.close();
  });

  it('summarises skips per target and reason: count, first, and the latest with its tokens; by window and target; keys scrubbed', () => {
    const store = fresh([KEY]);
    store.recordSkip({ target: 'prod', at: '2026-01-01T00:00:00Z', reason: 'budget', neededTokens: 900, availableTokens: 100 });
    store.recordSkip({ target: 'prod', at: '2026-01-01T00:10:00Z', reason: 'budget', scenario: 'abort-race', neededTokens: 650.4, availableTokens: 0 });
    store.recordSkip({ target: 'prod', at: '2026-01-01T00:05:00Z', reason: 'overlap' });
    store.recordSkip({ target: 'other', at: '2026-01-01T00:20:00Z', reason: 'shutdown', scenario: `x ${KEY}` });
    expect(store.skipSummary().map((s) => [s.target, s.reason, s.count, s.firstAt])).toEqual([
      ['other', 'shutdown', 1, '2026-01-01T00:20:00.000Z'],
      ['prod', 'budget', 2, '2026-01-01T00:00:00.000Z'],
      ['prod', 'overlap', 1, '2026-01-01T00:05:00.000Z'],
    ]);
    expect(store.skipSummary({ target: 'prod' })[0]!.latest).toEqual({ target: 'prod', at: '2026-01-01T00:10:00.000Z', reason: 'budget', scenario: 'abort-race', neededTokens: 650, availableTokens: 0 });
    expect(store.skipSummary({ since: '2026-01-01T00:06:00Z', target: 'prod' }).map((s) => [s.reason, s.count])).toEqual([['budget', 1]]);
    expect(JSON.stringify(store.skipSummary())).not.toContain(KEY);
    expect(() => store.recordSkip({ target: 'prod', at: 'yesterday', reason: 'budget' })).toThrow(/skip at: not a valid time/);
    store.close();
  });

  it('adds late findings to a recorded run', () => {
    const store = fresh();
    store.recordRun(run('r1', '2026-01-01T00:00:00Z', [scenario('abort-race', 'inconclusive')]));
    store.addFindings({ runId: 'r1', target: 'prod' }, [leak()], '2026-01-01T00:09:00Z');
    expect(store.findings()).toEqual([expect.objectContaining({ runId: 'r1', kind: 'cross-request-leak', at: '2026-01-01T00:09:00.000Z' })]);
    expect(store.recentRuns()[0]?.findingCount).toBe(1);
    store.close();
  });
});

describe('store: SIGKILL mid-write', () => {
  it('loses no committed finding, and the database opens and carries on', async () => {
    const p = dbPath();
    const child = path.join(dir, 'writer.mts');
    writeFileSync(child, `
      import { openStore } from ${JSON.stringify(pathToFileURL(path.resolve('prober/src/service/store.ts')).href)};
      const store = openStore({ path: ${JSON.stringify(p)}, retentionMs: 86400000 });
      const big = 'y'.repeat(300);
      for (let i = 0; ; i++) {
        const requests = Array.from({ length: 50 }, (_, k) => ({ requestId: 'q' + k, role: 'reader', tenant: 'default', transport: 'ok', error: big }));
        const findings = [{ kind: 'cross-request-leak', severity: 'critical', scenario: 'abort-race', evidence: { match: 'm' + i, excerpt: big }, chance: 0 }];
        store.recordPlantings(Array.from({ length: 20 }, (_, k) => ({ requestNo: (i * 20 + k).toString(16).padStart(16, '0'), runId: 'run-' + i, requestId: 'q' + k, role: 'planter', tenant: 'default', plantedAt: new Date().toISOString(), markerCount: 40 })));
        store.recordRun({ runId: 'run-' + i, target: 'prod', baseUrl: 'http://h', model: 'm', startedAt: new Date().toISOString(),
          finishedAt: new Date().toISOString(), outcome: 'fail', up: true, capacity: {},
          scenarios: [{ name: 'abort-race', outcome: 'fail', findings, requests, notes: [], tokens: { sent: 1, billed: 1 }, durationMs: 1 }] });
        process.stdout.write('committed run-' + i + '\\n');
      }
    `);
    const proc = spawn(process.execPath, ['--import', 'tsx', child], { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KVCANARY_HOME: scratchHome() } });
    let out = '';
    let err = '';
    proc.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    await new Promise<void>((resolve, reject) => {
      proc.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if ((out.match(/\n/g)?.length ?? 0) >= 200) { proc.kill('SIGKILL'); resolve(); }
      });
      proc.on('exit', (code) => reject(new Error(`writer exited early (${code}): ${err}`)));
    });
    await new Promise((resolve) => proc.once('close', resolve));
    expect(proc.signalCode).toBe('SIGKILL');

    const committed = out.split('\n').filter((l) => l.startsWith('committed ')).map((l) => l.slice('committed '.length));
    expect(committed.length).toBeGreaterThanOrEqual(200);
    const store = openStore({ path: p, retentionMs: DAY });
    const stored = new Set(store.findings({ limit: 1_000_000 }).map((f) => f.runId));
    const missing = committed.filter((id) => !stored.has(id));
    expect(missing).toEqual([]);
    // The killed write either committed whole or not at all.
    for (const r of store.recentRuns({ limit: 1_000_000 })) expect(r.findingCount).toBe(1);
    store.recordRun(run('after-crash', new Date().toISOString(), [scenario('abort-race', 'fail', [leak()])]));
    expect(store.findings({ limit: 1 })[0]?.runId).toBe('after-crash');
    store.close();
    const db = new Database(p, { readonly: true });
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    db.close();
  });
});
