/**
 * The overall rule in `serve`: a cycle that ran only cheap scenarios is recorded as what it is (`partial`) and
 * never turns a target green on its own — in /api/runs, /api/targets, /healthz, the status page and /metrics.
 * A real service (store, scheduler, status server on port 0) with cost tiers; the probe is the ProbeFn seam,
 * so which scenario finds what is fixed by the test.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { makeFinding } from '../../prober/src/probe/findings.js';
import type { ProbeFn } from '../../prober/src/probe/probe-fn.js';
import type { ScenarioResult } from '../../prober/src/probe/result.js';
import { parseConfig } from '../../prober/src/service/config.js';
import type { FleetTarget } from '../../prober/src/service/fleet.js';
import { createLogger } from '../../prober/src/service/logger.js';
import type { HealthReport } from '../../prober/src/service/server.js';
import { createService } from '../../prober/src/service/service.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-rule-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const KNOWN = ['capacity-audit', 'overlimit-rejection', 'overlimit-handoff', 'abort-race', 'prefix-isolation'];
const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

const quiet = () => createLogger({ level: 'silent', destination: new Writable({ write(_c, _e, cb) { cb(); } }) });

function scen(name: string, outcome: ScenarioResult['outcome'], findings: ScenarioResult['findings'] = []): ScenarioResult {
  return { name, outcome, findings, requests: [], notes: [`${name} ${outcome}`], tokens: { sent: 10, billed: 10 }, durationMs: 1 };
}

/** A probe whose scenarios end as `outcomeOf` says; abort-race's fail carries a leak and stopped at it. */
function probeWith(outcomeOf: (scenario: string) => ScenarioResult['outcome']): ProbeFn {
  return async (req) => {
    const scenarios = req.scenarios.map((name) => {
      const outcome = outcomeOf(name);
      if (outcome !== 'fail') return scen(name, outcome);
      return { ...scen(name, 'fail', [makeFinding('cross-request-leak', name, { match: 'kvcanary-x' }, 1e-30)]), withoutFindings: 'inconclusive' as const };
    });
    const at = new Date().toISOString();
    return { runId: req.runId, target: req.target.name, baseUrl: req.target.baseUrl, model: 'm', startedAt: at, finishedAt: at, outcome: 'inconclusive', up: true, capacity: {}, scenarios };
  };
}

/** Tiers as the defaults shape them: the behavioural and prefix scenarios hourly, the cheap ones every cycle. */
const yaml = (name: string, scenarios: readonly string[]): string => `
listen: 127.0.0.1:0
store: { path: ${JSON.stringify(path.join(dir, name, 'store.sqlite'))} }
schedule:
  interval: 1s
  timeout: 900ms
  jitter: 0s
  scenarios: { overlimit-rejection: every_cycle, overlimit-handoff: 1h, abort-race: 1h, prefix-isolation: 1h }
scenarios: [${scenarios.join(', ')}]
targets:
  - { name: t, base_url: "http://127.0.0.1:9" }
`;

async function serveUntilCycles(name: string, scenarios: readonly string[], probe: ProbeFn, cycles: number) {
  const config = parseConfig(yaml(name, scenarios), { knownScenarios: KNOWN });
  const svc = await createService({ config, probe, logger: quiet() });
  closers.push(() => svc.stop());
  const runs = async () => (await (await fetch(`${svc.url}api/runs?limit=100`)).json() as { runs: { outcome: string; scenarios: { name: string }[] }[] }).runs;
  await vi.waitFor(async () => expect((await runs()).length).toBeGreaterThanOrEqual(cycles), { timeout: 15_000, interval: 200 });
  await svc.scheduler.idle();
  const targets = await (await fetch(`${svc.url}api/targets`)).json() as FleetTarget[];
  const health = await (await fetch(`${svc.url}healthz`)).json() as HealthReport;
  const page = await (await fetch(svc.url)).text();
  const metrics = await (await fetch(`${svc.url}metrics`)).text();
  return { runs: (await runs()).reverse(), target: targets[0]!, loop: health.loops[0]!, page, metrics };
}

const metric = (text: string, line: string): number | undefined => {
  const m = new RegExp(`^${line.replace(/[{}()[\]."+]/g, '\\$&')} (\\S+)$`, 'm').exec(text);
  return m === null ? undefined : Number(m[1]);
};

describe('serve: cheap cycles run alone never show pass', () => {
  it('a leak found in the first cycle stays FAIL while later cycles run only the cheap checks (the late-write walk-through)', async () => {
    const all = ['capacity-audit', 'overlimit-rejection', 'overlimit-handoff', 'abort-race'];
    const r = await serveUntilCycles('leak', all, probeWith((s) => (s === 'abort-race' ? 'fail' : 'pass')), 3);
    // The first cycle ran everything and failed; the later ones ran only the cheap checks, and say so.
    expect(r.runs[0]!.outcome).toBe('fail');
    for (const later of r.runs.slice(1)) {
      expect(later.scenarios.map((s) => s.name).sort()).toEqual(['capacity-audit', 'overlimit-rejection']);
      expect(later.outcome).toBe('partial');
    }
    expect(r.target.lastOutcome).toBe('partial');
    expect(r.target.verdict).toBe('fail');
    expect(r.target.verdictReasons).toEqual(['abort-race failed (its latest run)']);
    expect(r.loop.verdict?.outcome).toBe('fail');
    expect(r.page).toMatch(/target <span class="badge fail"/);
    expect(r.page).toMatch(/last cycle <span class="badge partial"/);
    expect(r.page).not.toMatch(/(target|last cycle) <span class="badge pass"/);
    expect(metric(r.metrics, 'kvcanary_probe_cycles_total{target="t",outcome="pass"}')).toBe(0);
    expect(metric(r.metrics, 'kvcanary_probe_cycles_total{target="t",outcome="partial"}')).toBeGreaterThanOrEqual(2);
    expect(metric(r.metrics, 'kvcanary_target_verdict{target="t",outcome="fail"}')).toBe(1);
    expect(metric(r.metrics, 'kvcanary_target_verdict{target="t",outcome="pass"}')).toBe(0);
  }, 30_000);

  it('a behavioural scenario that never passed (inconclusive) keeps the target amber through clean cheap cycles', async () => {
    const r = await serveUntilCycles('amber', ['capacity-audit', 'overlimit-rejection', 'abort-race'], probeWith((s) => (s === 'abort-race' ? 'inconclusive' : 'pass')), 3);
    expect(r.runs.slice(1).every((x) => x.outcome === 'partial')).toBe(true);
    expect(r.target.verdict).toBe('inconclusive');
    expect(metric(r.metrics, 'kvcanary_target_verdict{target="t",outcome="inconclusive"}')).toBe(1);
    expect(r.page).not.toMatch(/(target|last cycle) <span class="badge pass"/);
  }, 30_000);

  it('a target with no behavioural scenario configured is partial, never pass', async () => {
    const r = await serveUntilCycles('cheap', ['capacity-audit', 'overlimit-rejection', 'prefix-isolation'], probeWith(() => 'pass'), 2);
    expect(r.runs.every((x) => x.outcome === 'partial')).toBe(true);
    expect(r.target.verdict).toBe('partial');
    expect(r.target.verdictReasons[0]).toMatch(/no behavioural scenario .* is configured/);
    expect(metric(r.metrics, 'kvcanary_target_verdict{target="t",outcome="partial"}')).toBe(1);
    expect(metric(r.metrics, 'kvcanary_probe_cycles_total{target="t",outcome="pass"}')).toBe(0);
  }, 30_000);

  it('a healthy target goes green once its behavioural scenarios pass, and stays green through cheap cycles within their interval', async () => {
    const r = await serveUntilCycles('green', ['capacity-audit', 'overlimit-rejection', 'overlimit-handoff', 'abort-race'], probeWith(() => 'pass'), 3);
    expect(r.runs[0]!.outcome).toBe('pass');
    expect(r.runs.slice(1).every((x) => x.outcome === 'partial')).toBe(true);
    expect(r.target.lastOutcome).toBe('partial');
    expect(r.target.verdict).toBe('pass');
    expect(r.page).toMatch(/target <span class="badge pass"/);
    expect(metric(r.metrics, 'kvcanary_target_verdict{target="t",outcome="pass"}')).toBe(1);
  }, 30_000);
});
