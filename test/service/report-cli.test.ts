/**
 * `kvcanary report` as an operator runs it: it only reads (never chmods, switches the journal or migrates,
 * and refuses a file that is not a kvcanary store), shows who planted and who read a leak with the excerpt,
 * grouped by target and kind, and an unknown --target is an error rather than an empty green report.
 */
import { chmodSync, mkdtempSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { makeFinding } from '../../prober/src/probe/findings.js';
import type { ProbeRun } from '../../prober/src/probe/result.js';
import { openStore } from '../../prober/src/service/store.js';
import { runCli } from '../helpers/cli.js';
import { V4_RUN, writeV4Store } from '../helpers/store-v4.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-report-'));
const M = 'kvcanary-aaaaaaaaaaaaaaaaaaaaaaaaaa';

function leakRun(runId: string, at: string, target: string): ProbeRun {
  const f = makeFinding('cross-request-leak', 'abort-race', {
    match: M, excerpt: `before ${M} after`,
    planted: { runId, requestId: 'planter-1', role: 'planter', tenant: 'acme', at },
    read: { requestId: 'reader-7', role: 'reader', tenant: 'globex' },
  }, 1e-30);
  return {
    runId, target, baseUrl: 'http://h:8000', model: 'm', startedAt: at, finishedAt: new Date(Date.parse(at) + 5000).toISOString(), outcome: 'fail', up: true,
    capacity: {}, scenarios: [{ name: 'abort-race', outcome: 'fail', findings: [f], requests: [], notes: [], tokens: { sent: 1, billed: 1 }, durationMs: 1 }],
  };
}

function kvcanaryStore(name: string): string {
  const p = path.join(dir, name);
  const store = openStore({ path: p, retentionMs: 86_400_000 });
  const now = Date.now();
  store.recordRun(leakRun('r1', new Date(now - 3 * 3_600_000).toISOString(), 'prod'));
  store.recordRun(leakRun('r2', new Date(now - 3_600_000).toISOString(), 'prod'));
  store.close();
  return p;
}

describe('report only reads', () => {
  it('leaves mode, journal and schema of a kvcanary store as they were', async () => {
    const p = kvcanaryStore('ro.sqlite');
    const db = new Database(p);
    db.pragma('journal_mode = DELETE');
    db.close();
    chmodSync(p, 0o644);
    const r = await runCli(['report', '--store', p]);
    expect(r.code).toBe(1);
    expect(statSync(p).mode & 0o777).toBe(0o644);
    const after = new Database(p, { readonly: true });
    expect(after.pragma('journal_mode', { simple: true })).toBe('delete');
    after.close();
  });

  it('refuses an SQLite database that is not a kvcanary store (64), adding nothing to it', async () => {
    const p = path.join(dir, 'other.sqlite');
    const db = new Database(p);
    db.exec('CREATE TABLE t (a)');
    db.close();
    chmodSync(p, 0o644);
    const r = await runCli(['report', '--store', p]);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/not a kvcanary evidence store/);
    const again = new Database(p, { readonly: true });
    expect((again.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>).map((x) => x.name)).toEqual(['t']);
    expect(again.pragma('journal_mode', { simple: true })).toBe('delete');
    again.close();
    expect(statSync(p).mode & 0o777).toBe(0o644);
  });

  it('refuses a file that is not a database, and a directory, with 64 and one line', async () => {
    const p = path.join(dir, 'notes.txt');
    writeFileSync(p, 'hello, this is not a database at all\n'.repeat(200));
    for (const target of [p, dir]) {
      const r = await runCli(['report', '--store', target]);
      expect(r.code).toBe(64);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
  });
});

describe('report for an operator', () => {
  it('shows planter, reader and excerpt, grouped by target and kind with first and last seen', async () => {
    const p = kvcanaryStore('leaks.sqlite');
    const r = await runCli(['report', '--store', p]);
    expect(r.stdout).toMatch(/prod cross-request-leak \[critical\] ×2 {2}first seen \S+ {2}last seen \S+/);
    expect(r.stdout).toContain('planted by acme/planter planter-1');
    expect(r.stdout).toContain('read by globex/reader reader-7');
    expect(r.stdout).toContain(`excerpt: before ${M} after`);
    // Rows ordered by the time shown, newest first.
    const times = [...r.stdout.matchAll(/^ {2}(\d{4}-\S+Z) {2}prod/gm)].map((m) => m[1]!);
    expect(times).toEqual([...times].sort().reverse());
  });

  it('applies the overall rule: a stored cheap-only cycle reads partial (even one an older version stored as pass), and the target\'s standing follows its behavioural scenarios', async () => {
    const p = path.join(dir, 'rule.sqlite');
    const store = openStore({ path: p, retentionMs: 86_400_000 });
    const at = (h: number): string => new Date(Date.now() - h * 3_600_000).toISOString();
    const run = (runId: string, when: string, scenarios: [string, 'pass' | 'fail'][]): ProbeRun => ({
      runId, target: 'cheap', baseUrl: 'http://h:8000', model: 'm', startedAt: when, finishedAt: when, outcome: 'pass', up: true, capacity: {},
      scenarios: scenarios.map(([name, outcome]) => ({ name, outcome, findings: [], requests: [], notes: [], tokens: { sent: 1, billed: 1 }, durationMs: 1 })),
    });
    store.recordRun(run('c1', at(2), [['capacity-audit', 'pass'], ['overlimit-rejection', 'pass']]));
    store.recordRun(run('c2', at(1), [['capacity-audit', 'pass']]));
    store.close();
    const r = await runCli(['report', '--store', p]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^ {2}cheap +PARTIAL +no behavioural scenario .* is configured/m);
    expect(r.stdout).toMatch(/^ {2}\S+ {2}cheap +PARTIAL /m);
    expect(r.stdout).not.toMatch(/cheap +PASS/);
    const json = JSON.parse((await runCli(['report', '--store', p, '--json'])).stdout) as { targets: { target: string; verdict: string }[]; runs: { outcome: string }[] };
    expect(json.targets).toEqual([expect.objectContaining({ target: 'cheap', verdict: 'partial' })]);
    expect(json.runs.map((x) => x.outcome)).toEqual(['partial', 'partial']);
    // A leak's target stands failed.
    const leaks = await runCli(['report', '--store', kvcanaryStore('rule-leaks.sqlite')]);
    expect(leaks.stdout).toMatch(/^ {2}prod +FAIL +abort-race failed/m);
  });

  it('--since takes a date/time; an unknown --target is an error', async () => {
    const p = kvcanaryStore('since.sqlite');
    const day = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
    expect((await runCli(['report', '--store', p, '--since', day])).code).toBe(1);
    const r = await runCli(['report', '--store', p, '--target', 'nope']);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/--target: no target named "nope" .*known: prod/);
  });

  it('report --config needs no secret values set', async () => {
    const p = kvcanaryStore('cfg.sqlite');
    const cfg = path.join(dir, 'cfg.yaml');
    writeFileSync(cfg, `store: { path: ${p} }\ntargets: [{ name: prod, base_url: "http://127.0.0.1:1", api_key_env: KVC_SURELY_UNSET_VAR }]\n`);
    const r = await runCli(['report', '--config', cfg]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('cross-request-leak');
  });
});

describe('report lists skips', () => {
  const ago = (ms: number): string => new Date(Date.now() - ms).toISOString();
  const H = 3_600_000;

  function storeWithSkips(name: string, skips: { target: string; at: string; reason: string; scenario?: string; neededTokens?: number; availableTokens?: number }[]): string {
    const p = kvcanaryStore(name);
    const store = openStore({ path: p, retentionMs: 86_400_000 });
    for (const k of skips) store.recordSkip(k);
    store.close();
    return p;
  }

  it('counts per target and reason over the window, and shows the latest with needed and available tokens (text and --json)', async () => {
    const p = storeWithSkips('skips.sqlite', [
      { target: 'prod', at: ago(30 * H), reason: 'budget', neededTokens: 1, availableTokens: 0 },
      { target: 'prod', at: ago(2 * H), reason: 'budget', neededTokens: 900, availableTokens: 100 },
      { target: 'prod', at: ago(H), reason: 'budget', neededTokens: 650, availableTokens: 350 },
      { target: 'prod', at: ago(H / 2), reason: 'overlap' },
    ]);
    const text = await runCli(['report', '--store', p]);
    expect(text.code).toBe(1);
    expect(text.stdout).toContain('skipped cycles and scenarios (3) by target and reason:');
    expect(text.stdout).toMatch(/^ {2}prod +budget +×2 {2}first \S+ {2}latest \S+: needed 650 tokens, 350 available$/m);
    expect(text.stdout).toMatch(/^ {2}prod +overlap +×1 {2}first \S+ {2}latest \S+$/m);

    const json = await runCli(['report', '--store', p, '--json']);
    const doc = JSON.parse(json.stdout) as { skips: { target: string; reason: string; count: number; latest: Record<string, unknown> }[] };
    expect(doc.skips.map((k) => [k.target, k.reason, k.count])).toEqual([['prod', 'overlap', 1], ['prod', 'budget', 2]]);
    expect(doc.skips[1]!.latest).toMatchObject({ reason: 'budget', neededTokens: 650, availableTokens: 350 });
    const older = JSON.parse((await runCli(['report', '--store', p, '--json', '--since', '48h'])).stdout) as typeof doc;
    expect(older.skips.find((k) => k.reason === 'budget')!.count).toBe(3);
  });

  it('merges several stores: counts add up, the latest is the newest of all', async () => {
    const a = storeWithSkips('skips-a.sqlite', [
      { target: 'prod', at: ago(3 * H), reason: 'budget', neededTokens: 900, availableTokens: 100 },
      { target: 'prod', at: ago(2 * H), reason: 'budget', neededTokens: 800, availableTokens: 200 },
    ]);
    const b = storeWithSkips('skips-b.sqlite', [
      { target: 'prod', at: ago(H), reason: 'budget', scenario: 'abort-race', neededTokens: 700, availableTokens: 0 },
      { target: 'canary', at: ago(4 * H), reason: 'shutdown', scenario: 'abort-race' },
    ]);
    const r = await runCli(['report', '--store', a, '--store', b, '--json']);
    const doc = JSON.parse(r.stdout) as { skips: { target: string; reason: string; count: number; firstAt: string; latest: Record<string, unknown> }[] };
    expect(doc.skips.map((k) => [k.target, k.reason, k.count])).toEqual([['prod', 'budget', 3], ['canary', 'shutdown', 1]]);
    expect(doc.skips[0]).toMatchObject({ latest: { scenario: 'abort-race', neededTokens: 700, availableTokens: 0 } });
    expect(Date.parse(doc.skips[0]!.firstAt)).toBeLessThan(Date.now() - 2.5 * H);
    const text = await runCli(['report', '--store', a, '--store', b, '--target', 'prod']);
    expect(text.stdout).toMatch(/prod +budget +×3 .* latest \S+ \(abort-race\): needed 700 tokens, 0 available/);
    expect(text.stdout).not.toMatch(/^ {2}canary /m);
    // A target that never ran (every run skipped) is still one --target can name.
    const canary = await runCli(['report', '--store', b, '--target', 'canary']);
    expect(canary.code, canary.stderr).toBe(0);
    expect(canary.stdout).toMatch(/^ {2}canary +shutdown +×1 /m);
  });

  it('reads a store of the previous schema (4) as it is: runs and findings listed, no skips, nothing migrated', async () => {
    const p = path.join(dir, 'v4.sqlite');
    writeV4Store(p, { startedAt: ago(H + 60_000), finishedAt: ago(H) });
    const r = await runCli(['report', '--store', p, '--json']);
    expect(r.code, r.stderr).toBe(1);
    const doc = JSON.parse(r.stdout) as { runs: { runId: string }[]; skips: unknown[]; findings: { kind: string }[]; silences: { reason: string }[] };
    expect(doc.runs.map((x) => x.runId)).toEqual([V4_RUN.runId]);
    expect(doc.skips).toEqual([]);
    expect(doc.findings.map((f) => f.kind)).toEqual(['pool-below-context']);
    expect(doc.silences.map((x) => x.reason)).toEqual(['resize planned']);
    expect((await runCli(['report', '--store', p])).stdout).toContain('skipped cycles and scenarios (0)');
    const db = new Database(p, { readonly: true });
    expect(db.prepare('SELECT max(version) AS v FROM schema_migrations').get()).toEqual({ v: 4 });
    expect(db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'skips'").get()).toEqual({ n: 0 });
    db.close();
  });
});
