/** The status page shows every outcome as itself: not-applicable in its own colour (never green), race power, cut-short reasons, remediation. */
import { describe, expect, it } from 'vitest';
import { FINDING_KINDS, makeFinding } from '../../prober/src/probe/findings.js';
import { powerOf, type ProbeRun, type ScenarioResult } from '../../prober/src/probe/result.js';
import { renderStatusPage } from '../../prober/src/service/server.js';
import { openStore } from '../../prober/src/service/store.js';

function scen(name: string, outcome: ScenarioResult['outcome'], extra: Partial<ScenarioResult> = {}): ScenarioResult {
  return { name, outcome, findings: [], requests: [], notes: [], tokens: { sent: 5, billed: 5 }, durationMs: 10, ...extra };
}

describe('status page outcomes', () => {
  it('renders not-applicable with its own badge and evidence, a race pass with its power, a budget cut with its reason, a finding with what to do', () => {
    const store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
    const at = '2026-01-01T00:50:00.000Z';
    const run: ProbeRun = {
      runId: 'r1', target: 'llama', baseUrl: 'http://llama:8080', model: 'tiny', startedAt: at, finishedAt: at, outcome: 'fail', up: true, capacity: {},
      scenarios: [
        scen('prefix-isolation', 'not-applicable', { notes: ['an exact same-tenant re-send got 0 cached tokens: the endpoint reuses no prefixes'] }),
        scen('abort-race', 'pass', { power: powerOf(30, 0.1) }),
        scen('prefix-churn', 'inconclusive', { reason: 'budget' }),
        scen('capacity-audit', 'fail', { findings: [makeFinding('pool-below-context', 'capacity-audit', { facts: { pool: 1 } })] }),
      ],
    };
    store.recordRun(run);
    const html = renderStatusPage({
      latest: store.latestPerTarget(), findings: store.findings(), health: undefined, now: Date.parse(at) + 60_000,
      configured: [{ name: 'llama', baseUrl: 'http://llama:8080', scenarios: run.scenarios.map((s) => s.name) }],
    });
    store.close();
    const row = (name: string): string => new RegExp(`<tr><td>${name}</td>.*?</tr>`, 's').exec(html)?.[0] ?? '';
    expect(row('prefix-isolation')).toContain('class="badge not-applicable"');
    expect(row('prefix-isolation')).toContain('0 cached tokens');
    expect(row('abort-race')).toContain('class="badge pass"');
    expect(row('abort-race')).toMatch(/power \(model, windows assumed independent\): 30 race windows.*0\.958/);
    expect(row('prefix-churn')).toContain('cut short: budget');
    expect(html).toContain(FINDING_KINDS['pool-below-context'].remediation);
    // Its own colour: the not-applicable badge is styled, and not with the pass green.
    const css = /\.not-applicable\{background:(#[0-9a-f]{6})\}/.exec(html)?.[1];
    const green = /\.pass\{background:(#[0-9a-f]{6})\}/.exec(html)?.[1];
    expect(css).toBeDefined();
    expect(css).not.toBe(green);
  });
});
