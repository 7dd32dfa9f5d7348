/**
 * The status page as on-call opens it: what needs someone comes first (unacknowledged findings of each
 * scenario's latest run, critical first, each with what to do and its evidence a click away), targets with
 * open findings before the rest, every note of a scenario one click away (nothing cut), the header's pool
 * labelled as the smallest exposed, and endpoints `kvcanary run --store` recorded into serve's store listed
 * apart instead of as a lost "(no longer configured)" target.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeFinding, type Finding } from '../../prober/src/probe/findings.js';
import type { ProbeRun, ScenarioResult } from '../../prober/src/probe/result.js';
import { renderStatusPage } from '../../prober/src/service/server.js';
import type { Silence } from '../../prober/src/service/silences.js';
import { openStore } from '../../prober/src/service/store.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-page-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const at = new Date(Date.now() - 60_000).toISOString();

function scen(name: string, outcome: ScenarioResult['outcome'], findings: Finding[] = [], notes: string[] = []): ScenarioResult {
  return { name, outcome, findings, requests: [], notes, tokens: { sent: 1, billed: 1 }, durationMs: 1 };
}
function run(target: string, scenarios: ScenarioResult[], extra: Partial<ProbeRun> = {}): ProbeRun {
  return {
    runId: `00000000-0000-4000-8000-${String(++n).padStart(12, '0')}`, target, baseUrl: `http://${target}.internal:8000`, model: 'm', startedAt: at, finishedAt: at,
    outcome: scenarios.some((s) => s.outcome === 'fail') ? 'fail' : 'pass', up: true, capacity: { contextTokens: 16_384, poolTokens: 8_320 }, scenarios, ...extra,
  };
}

const LONG_NOTES = ['first note', 'second note', 'third note', 'why it was inconclusive: 14 of 29 race windows answered, the rest timed out (5xx from target)', 'fifth note'];

function page(silences: Silence[] = []): string {
  const store = openStore({ path: path.join(dir, `s${++n}.sqlite`), retentionMs: 86_400_000 });
  try {
    const configured = ['a-healthy', 'b-warning', 'c-critical', 'd-high', 'e-flaky'].map((name) => ({ name, baseUrl: `http://${name}.internal:8000`, scenarios: ['capacity-audit', 'abort-race', 'overlimit-handoff'] }));
    store.recordRun(run('a-healthy', [scen('abort-race', 'pass'), scen('capacity-audit', 'pass')]));
    store.recordRun(run('b-warning', [scen('capacity-audit', 'fail', [makeFinding('pool-below-context', 'capacity-audit', { match: 'pool 8320 < context 16384' })])]));
    store.recordRun(run('c-critical', [scen('abort-race', 'fail', [makeFinding('cross-request-leak', 'abort-race', { match: 'kvcanary-abcdefghijklmnopqrstuvwxyz', excerpt: 'someone else\'s words' })])]));
    store.recordRun(run('d-high', [scen('overlimit-handoff', 'fail', [makeFinding('rejection-not-enforced', 'overlimit-handoff', { match: 'beyond context: a 200 with output' })])]));
    store.recordRun(run('e-flaky', [scen('abort-race', 'inconclusive', [], LONG_NOTES)]));
    // `kvcanary run --store <this store>` against an endpoint this serve does not probe (ids run-…).
    store.recordRun(run('10.0.0.9:8000', [scen('abort-race', 'pass')], { runId: 'run-8d1c2b7e-0000-4000-8000-000000000001' }));
    // A target this serve used to probe.
    store.recordRun(run('retired', [scen('abort-race', 'pass')]));
    return renderStatusPage({ latest: store.latestPerTarget(), findings: store.findings({ limit: 20 }), configured, health: undefined, now: Date.now(), silences });
  } finally {
    store.close();
  }
}

describe('status page layout', () => {
  it('opens on what needs attention, critical first, with what to do and the evidence a click away', () => {
    const html = page();
    const attention = html.slice(html.indexOf('<section id="attention">'), html.indexOf('</section>', html.indexOf('<section id="attention">')));
    expect(html.indexOf('<section id="attention">')).toBeLessThan(html.indexOf('<section id="target-'));
    const order = ['c-critical', 'd-high', 'b-warning'].map((t) => attention.indexOf(`>${t}</a>`));
    expect(order.every((i) => i > 0)).toBe(true);
    expect(order).toEqual([...order].sort((x, y) => x - y));
    expect(attention).toContain('CRITICAL');
    expect(attention).toContain('What to do:');
    expect(attention).toMatch(/<details><summary>latest evidence<\/summary><pre>[^<]*kvcanary-abcdefghijklmnopqrstuvwxyz/);
    expect(attention).not.toContain('a-healthy');
    // Target sections: open findings by severity, then inconclusive, then the rest.
    const sections = [...html.matchAll(/<section id="target-([^"]+)">/g)].map((m) => decodeURIComponent(m[1]!));
    expect(sections).toEqual(['c-critical', 'd-high', 'b-warning', 'e-flaky', 'a-healthy', 'retired']);
  });

  it('drops a finding a silence covers from "needs attention" at once', () => {
    const html = page([{ id: '7', target: 'c-*', kind: 'cross-request-leak', reason: 'drained (INC-1)', expiresAt: new Date(Date.now() + 3_600_000).toISOString(), createdAt: at, createdBy: 'ops' }]);
    const attention = html.slice(html.indexOf('<section id="attention">'), html.indexOf('</section>', html.indexOf('<section id="attention">')));
    expect(attention).not.toContain('c-critical');
    expect(attention).toContain('d-high');
  });

  it('keeps every note of a scenario, whole, one click away', () => {
    const html = page();
    const flaky = html.slice(html.indexOf('<section id="target-e-flaky">'), html.indexOf('</section>', html.indexOf('<section id="target-e-flaky">')));
    expect(flaky).toContain('first note');
    expect(flaky).toContain('<details><summary>all 5 notes</summary>');
    for (const note of LONG_NOTES) expect(flaky).toContain(`<li>${note}</li>`);
  });

  it('labels the header\'s pool as the smallest exposed', () => {
    const html = page();
    expect(html).toContain('smallest KV pool 8,320 tokens');
    expect(html).not.toMatch(/[^t] KV pool 8,320/);
  });

  it('lists endpoints `kvcanary run --store` recorded apart, never as "(no longer configured)"', () => {
    const html = page();
    expect(html).not.toMatch(/10\.0\.0\.9:8000 <small>[^<]*<\/small> <small>\(no longer configured\)/);
    expect(html).not.toContain('<section id="target-10.0.0.9%3A8000">');
    const cli = html.slice(html.indexOf('<section id="cli-runs">'), html.indexOf('</section>', html.indexOf('<section id="cli-runs">')));
    expect(cli).toContain('1 endpoint probed by <code>kvcanary run --store</code>');
    expect(cli).toContain('10.0.0.9:8000');
    // A target serve itself probed before is still shown as such.
    expect(html).toMatch(/<h2>retired <small>[^<]*<\/small> <small>\(no longer configured\)<\/small><\/h2>/);
  });
});

describe('kvcanary run --store <serve\'s store>', () => {
  it('adds no "(no longer configured)" section to that serve\'s status page', async () => {
    const { startEngine } = await import('../../engine-under-test/src/index.js');
    const { runCli } = await import('../helpers/cli.js');
    const { startServiceServer } = await import('../../prober/src/service/server.js');
    const { Registry } = await import('prom-client');
    const engine = await startEngine({ preset: 'hardened', scale: 128, port: 0, log: () => {} });
    const storePath = path.join(dir, 'serve-store.sqlite');
    openStore({ path: storePath, retentionMs: 86_400_000 }).close();
    try {
      const r = await runCli(['run', '--target', engine.url, '--scenario', 'capacity-audit', '--store', storePath, '-q'], { env: { KVCANARY_HOME: mkdtempSync(path.join(dir, 'home-')) }, timeoutMs: 60_000 });
      expect([0, 1, 2]).toContain(r.code);
      const store = openStore({ path: storePath, retentionMs: 86_400_000 });
      const server = await startServiceServer({ port: 0, registry: new Registry(), store, targets: () => [{ name: 'prod', baseUrl: 'http://prod.internal:8000', scenarios: ['capacity-audit'] }] });
      try {
        expect(store.latestPerTarget().length).toBe(1);
        const html = await (await fetch(server.url)).text();
        expect(html).not.toContain('no longer configured');
        expect(html).toContain('probed by <code>kvcanary run --store</code>');
        expect(html).toContain(engine.url.replace(/\/$/, ''));
      } finally {
        await server.close();
        store.close();
      }
    } finally {
      await engine.close();
    }
  }, 90_000);
});
