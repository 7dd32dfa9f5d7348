/**
 * kvcanary_open_findings, the series the finding alerts fire on: the unacknowledged findings of a scenario's
 * last run or of the last 15 minutes, re-checked against the silences in force at every scrape. What an
 * on-call relies on: an ack takes the series to 0 at the next scrape (the alert resolves at the next rule
 * evaluation, dashboards/alerts.test.yaml), and the series names the shard, the status page and the labels
 * discovery gave the replica. The last test runs it through `serve` and `kvcanary ack` on the real store.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';
import { makeFinding, type Finding } from '../../prober/src/probe/findings.js';
import type { ProbeRun, ScenarioResult } from '../../prober/src/probe/result.js';
import { parseConfig } from '../../prober/src/service/config.js';
import { parseExternalUrl, statusPageUrl } from '../../prober/src/service/external-url.js';
import { createMetrics, observeRun, seedScenarioState } from '../../prober/src/service/metrics.js';
import { OPEN_WINDOW_MS } from '../../prober/src/service/open-findings.js';
import { createService } from '../../prober/src/service/service.js';
import type { Silence } from '../../prober/src/service/silences.js';
import { runCli } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-open-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const leak = (scenario = 'abort-race'): Finding => makeFinding('cross-request-leak', scenario, { match: 'kvcanary-x' }, 1e-20);
function run(runId: string, target: string, scenarios: Partial<ScenarioResult>[]): ProbeRun {
  return {
    runId, target, baseUrl: 'http://h', model: 'm', startedAt: '2026-01-01T00:00:00Z', finishedAt: '2026-01-01T00:00:10Z', outcome: 'fail', up: true, capacity: {},
    scenarios: scenarios.map((s) => ({ name: 'abort-race', outcome: 'fail', findings: [], requests: [], notes: [], tokens: { sent: 0, billed: 0 }, durationMs: 1, ...s })),
  };
}
const silence = (over: Partial<Silence>): Silence => ({
  id: '1', target: 'glm/*', kind: 'cross-request-leak', reason: 'known', expiresAt: new Date(Date.now() + 3_600_000).toISOString(), createdAt: new Date().toISOString(), createdBy: 'ops', ...over,
});

/** The exposition lines of kvcanary_open_findings, label text included. */
async function openLines(reg: Registry): Promise<string[]> {
  return (await reg.getSingleMetricAsString('kvcanary_open_findings')).split('\n').filter((l) => l.startsWith('kvcanary_open_findings{'));
}

describe('kvcanary_open_findings', () => {
  it('counts the last run and the 15-minute window, and drops to 0 the scrape after a silence covers it', async () => {
    let now = Date.parse('2026-01-01T00:00:00Z');
    let silences: Silence[] = [];
    const reg = new Registry();
    const m = createMetrics(reg, { silences: () => silences, now: () => now });
    const target = 'glm/10.0.0.7:8000';
    m.open.setContext({
      shard: '1/3', placements: new Map([[target, { source: 'glm', labels: { zone: 'eu-1', job: 'not-a-label-here' } }]]),
      statusPage: (t) => statusPageUrl('https://kvcanary-{shard}.example.com/', 1, t),
    });
    observeRun(m, run('r1', target, [{ findings: [leak(), leak()] }]));
    expect(await openLines(reg)).toEqual([
      `kvcanary_open_findings{target="${target}",scenario="abort-race",kind="cross-request-leak",severity="critical",shard="1/3",source="glm",status_page="https://kvcanary-1.example.com/#target-glm%2F10.0.0.7%3A8000",zone="eu-1"} 2`,
    ]);
    // A later run that finds none: the window still holds the two for 15 minutes, then 0.
    now += 5 * 60_000;
    observeRun(m, run('r2', target, [{ outcome: 'pass' }]));
    expect((await openLines(reg))[0]).toMatch(/ 2$/);
    now += OPEN_WINDOW_MS;
    expect((await openLines(reg))[0]).toMatch(/ 0$/);
    // Found again; then `kvcanary ack` (a silence in force): 0 at the very next scrape, no window to wait out.
    observeRun(m, run('r3', target, [{ findings: [leak()] }]));
    expect((await openLines(reg))[0]).toMatch(/ 1$/);
    silences = [silence({})];
    expect((await openLines(reg))[0]).toMatch(/ 0$/);
    // A silence for another kind, scenario or target covers nothing here; an expired one neither.
    for (const other of [silence({ kind: 'pool-below-context' }), silence({ scenario: 'overlimit-handoff' }), silence({ target: 'other/*' }), silence({ expiresAt: new Date(now - 1).toISOString() })]) {
      silences = [other];
      expect((await openLines(reg))[0], JSON.stringify(other)).toMatch(/ 1$/);
    }
    // Findings acknowledged when recorded never count.
    silences = [];
    observeRun(m, run('r4', target, [{ findings: [{ ...leak(), acknowledged: 'silence 9 (ops) until …: known' }] }]));
    now += OPEN_WINDOW_MS + 1;
    expect((await openLines(reg))[0]).toMatch(/ 0$/);
  });

  it('keeps a firing last run across a restart (seeded from the store)', async () => {
    const reg = new Registry();
    const m = createMetrics(reg);
    seedScenarioState(m, { target: 'prod', scenario: 'abort-race', outcome: 'fail', at: '2026-01-01T00:00:00Z', inconclusiveStreak: 0, findingCounts: { 'cross-request-leak': 3 }, runId: 'r9' });
    expect(await openLines(reg)).toEqual(['kvcanary_open_findings{target="prod",scenario="abort-race",kind="cross-request-leak",severity="critical",shard="0/1",source="prod"} 3']);
  });
});

describe('external_url', () => {
  it('accepts http(s) URLs with {shard}, and refuses credentials, queries, fragments and other schemes without echoing them', () => {
    expect(parseExternalUrl('https://kvcanary-{shard}.example.com')).toEqual({ url: 'https://kvcanary-{shard}.example.com/' });
    expect(parseExternalUrl('http://10.0.0.1:9464/status/')).toEqual({ url: 'http://10.0.0.1:9464/status/' });
    for (const bad of ['https://ops:hunter2-secret@k.example.com/', 'https://k.example.com/?token=sk-abcdef', 'https://k.example.com/#x', 'ftp://k.example.com/', 'k.example.com', 'https://k-{index}.example.com/', 'https://k.example.com/\u202e', '', 'x'.repeat(600)]) {
      const r = parseExternalUrl(bad);
      expect('error' in r, bad).toBe(true);
      expect(JSON.stringify(r)).not.toMatch(/hunter2|sk-abcdef/);
    }
    expect(() => parseConfig('external_url: "https://u:p4ssw0rd@x.example.com/"\ntargets: [{ name: a, base_url: "http://127.0.0.1:9/" }]\n', { knownScenarios: ['capacity-audit'] }))
      .toThrow(/external_url: credentials are not allowed/);
    const ok = parseConfig('external_url: https://kvcanary-{shard}.example.com\ntargets: [{ name: a, base_url: "http://127.0.0.1:9/" }]\n', { knownScenarios: ['capacity-audit'] });
    expect(ok.externalUrl).toBe('https://kvcanary-{shard}.example.com/');
  });
});

describe('serve and kvcanary ack', () => {
  it('a leak shows on /metrics with the page URL; `kvcanary ack` on the store takes it to 0 at the next scrape', async () => {
    const store = path.join(dir, 'store.sqlite');
    const config = parseConfig(`
listen: 127.0.0.1:0
store: { path: ${store} }
external_url: https://kvcanary-{shard}.example.com/
schedule: { interval: 1h, timeout: 30s, jitter: 0s }
targets: [{ name: leaky-1, base_url: "http://127.0.0.1:9/", scenarios: [abort-race] }]
`, { knownScenarios: ['abort-race'] });
    let probes = 0;
    const svc = await createService({
      config, shard: { index: 2, count: 3 },
      probe: async (req) => {
        probes++;
        const now = new Date().toISOString();
        return { ...run(`run-${probes}`, req.target.name, [{ findings: [leak()] }]), startedAt: now, finishedAt: now };
      },
    });
    try {
      const scrape = async (): Promise<string> => (await (await fetch(`${svc.url}metrics`)).text()).split('\n').filter((l) => l.startsWith('kvcanary_open_findings{')).join('\n');
      const firing = await (async () => {
        for (let i = 0; i < 100; i++) {
          const t = await scrape();
          if (/ 1$/.test(t)) return t;
          await new Promise((r) => setTimeout(r, 100));
        }
        return await scrape();
      })();
      // "leaky-1" is shard 2's of 3 by rendezvous hash (shard.ts), so this replica probes it.
      expect(firing).toBe('kvcanary_open_findings{target="leaky-1",scenario="abort-race",kind="cross-request-leak",severity="critical",shard="2/3",source="leaky-1",status_page="https://kvcanary-2.example.com/#target-leaky-1"} 1');
      const ack = await runCli(['ack', '--store', store, '--target', 'leaky-1', '--kind', 'cross-request-leak', '--expires', '1h', '--reason', 'endpoint drained (INC-42)']);
      expect(ack.code, ack.stderr).toBe(0);
      expect(await scrape()).toMatch(/ 0$/);
      expect(probes).toBe(1);  // no new probe was needed: the scrape re-read the silences
    } finally {
      await svc.stop();
    }
  }, 60_000);
});
