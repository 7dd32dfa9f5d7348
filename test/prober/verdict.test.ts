/**
 * The run verdict a gate reads: how scenario outcomes combine (not-applicable never a pass), what --fail-on
 * does to the exit code, the JUnit report CI systems display, and the --json / summary fields a user reads.
 */
import { XMLParser } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { exitCodeFor, quietLine, summaryTable, toJson, toJunit } from '../../prober/src/commands/run-output.js';
import { EXIT } from '../../prober/src/exit-codes.js';
import { FINDING_KINDS, makeFinding, type Finding } from '../../prober/src/probe/findings.js';
import { combineOutcomes, powerOf, trialsFor, type Outcome, type ProbeRun, type ScenarioResult } from '../../prober/src/probe/result.js';

function scen(name: string, outcome: Outcome, findings: Finding[] = [], extra: Partial<ScenarioResult> = {}): ScenarioResult {
  return { name, outcome, findings, requests: [], notes: [`${name} note`], tokens: { sent: 10, billed: 10 }, durationMs: 1500, ...extra };
}

function run(scenarios: ScenarioResult[]): ProbeRun {
  return {
    runId: 'run-1', target: 'cli', baseUrl: 'http://127.0.0.1:1', model: 'm', startedAt: '2026-01-01T00:00:00.000Z',
    finishedAt: '2026-01-01T00:01:00.000Z', outcome: combineOutcomes(scenarios), scenarios, capacity: {}, up: true,
  };
}

const leak = makeFinding('cross-request-leak', 'overlimit-handoff', { match: 'kvcanary-x', excerpt: '<script>alert(1)</script>' }, 1e-20);
const warning = makeFinding('pool-below-context', 'capacity-audit', { facts: { pool: 1, context: 2 } });
const saltFact = makeFinding('cache-salt-ignored', 'prefix-isolation', { facts: { cachedTokens: 500 } });

describe('combineOutcomes', () => {
  it('passes a run whose behavioural scenario passed and whose prefix scenarios are not applicable', () => {
    expect(combineOutcomes([scen('overlimit-handoff', 'pass'), scen('prefix-isolation', 'not-applicable'), scen('capacity-audit', 'pass')])).toBe('pass');
  });
  it('never counts not-applicable as a pass: all not-applicable is not-applicable, and behavioural scenarios must pass', () => {
    expect(combineOutcomes([scen('prefix-isolation', 'not-applicable'), scen('prefix-churn', 'not-applicable')])).toBe('not-applicable');
    expect(combineOutcomes([scen('capacity-audit', 'pass'), scen('abort-race', 'not-applicable')])).toBe('partial');
  });
  it('calls a clean run without a behavioural pass partial, never pass: cheap checks alone, or one prefix scenario', () => {
    expect(combineOutcomes([scen('capacity-audit', 'pass'), scen('overlimit-rejection', 'pass')])).toBe('partial');
    expect(combineOutcomes([scen('prefix-isolation', 'pass')])).toBe('partial');
    expect(combineOutcomes([scen('capacity-audit', 'pass'), scen('abort-race', 'pass')])).toBe('pass');
  });
  it('lets fail beat inconclusive beat everything else, and an empty run is inconclusive', () => {
    expect(combineOutcomes([scen('abort-race', 'pass'), scen('prefix-churn', 'inconclusive'), scen('overlimit-handoff', 'fail')])).toBe('fail');
    expect(combineOutcomes([scen('abort-race', 'pass'), scen('prefix-churn', 'inconclusive')])).toBe('inconclusive');
    expect(combineOutcomes([])).toBe('inconclusive');
  });
});

describe('power', () => {
  it('states c = 1 - (1 - r)^N and the windows needed for it', () => {
    expect(trialsFor(0.1, 0.95)).toBe(29);
    expect(powerOf(29, 0.1).confidence).toBeGreaterThanOrEqual(0.95);
    expect(powerOf(28, 0.1).confidence).toBeLessThan(0.95);
    expect(powerOf(0, 0.1).confidence).toBe(0);
  });
});

describe('exit code and --fail-on', () => {
  it('exits 1 only for a finding at or above the threshold (default warning), still listing the others', () => {
    const r = run([scen('overlimit-handoff', 'pass'), scen('capacity-audit', 'fail', [warning], { withoutFindings: 'pass' })]);
    expect(exitCodeFor(r, 'warning')).toBe(EXIT.fail);
    expect(exitCodeFor(r, 'high')).toBe(EXIT.pass);
    expect(exitCodeFor(r, 'critical')).toBe(EXIT.pass);
    expect(toJson(r)).toMatchObject({ outcome: 'fail', findings: [{ kind: 'pool-below-context', severity: 'warning' }] });
  });
  it('exits 0 with an info finding at the default, 1 with --fail-on info', () => {
    const r = run([scen('overlimit-handoff', 'pass'), scen('prefix-isolation', 'pass', [saltFact])]);
    expect(r.outcome).toBe('pass');
    expect(exitCodeFor(r, 'warning')).toBe(EXIT.pass);
    expect(exitCodeFor(r, 'info')).toBe(EXIT.fail);
  });
  it('never counts a scenario that stopped at a finding below --fail-on as a pass: exit 2, a JUnit error, no failure', () => {
    const rejection = makeFinding('rejection-not-enforced', 'concurrent-interleave', { facts: { status: 200 } });
    const r = run([scen('capacity-audit', 'pass'), scen('concurrent-interleave', 'fail', [rejection], { withoutFindings: 'inconclusive' })]);
    expect(exitCodeFor(r, 'high')).toBe(EXIT.fail);
    expect(exitCodeFor(r, 'critical')).toBe(EXIT.inconclusive);
    const doc = new XMLParser({ ignoreAttributes: false }).parse(toJunit(r, 'critical')) as { testsuites: { '@_failures': string; '@_errors': string; testsuite: { testcase: Record<string, unknown>[] } } };
    expect(doc.testsuites['@_failures']).toBe('0');
    expect(doc.testsuites['@_errors']).toBe('1');
    const tc = doc.testsuites.testsuite.testcase.find((t) => t['@_name'] === 'concurrent-interleave')!;
    expect(tc['failure']).toBeUndefined();
    expect(JSON.stringify(tc['error'])).toContain('isolation not established');
    // With another behavioural pass beside it the run passes the gate; the stopped scenario still is no pass.
    const other = run([scen('abort-race', 'pass'), scen('concurrent-interleave', 'fail', [rejection], { withoutFindings: 'inconclusive' })]);
    expect(exitCodeFor(other, 'critical')).toBe(EXIT.inconclusive);
    // A result without withoutFindings (from elsewhere) is never promoted to a pass either.
    expect(exitCodeFor(run([scen('abort-race', 'fail', [rejection])]), 'critical')).toBe(EXIT.inconclusive);
  });
  it('exits 2 for a clean run without a behavioural scenario (run --scenario prefix-isolation)', () => {
    const r = run([scen('prefix-isolation', 'pass')]);
    expect(r.outcome).toBe('partial');
    expect(exitCodeFor(r, 'warning')).toBe(EXIT.inconclusive);
    expect(toJson(r)).toMatchObject({ outcome: 'partial' });
  });
  it('exits 2 when nothing behavioural passed, even with every prefix scenario not applicable', () => {
    expect(exitCodeFor(run([scen('prefix-isolation', 'not-applicable')]), 'warning')).toBe(EXIT.inconclusive);
    expect(exitCodeFor(run([scen('abort-race', 'inconclusive', [], { reason: 'budget' })]), 'warning')).toBe(EXIT.inconclusive);
  });
});

describe('--json and the summary', () => {
  it('carry the outcome, power, reason and each finding\'s remediation line', () => {
    const power = powerOf(32, 0.1);
    const r = run([scen('abort-race', 'pass', [], { power }), scen('prefix-churn', 'inconclusive', [], { reason: 'budget', notes: ['not sent (token budget exhausted)'] }),
      scen('prefix-isolation', 'not-applicable', [], { notes: ['an exact same-tenant re-send got 0 cached tokens: no prefix reuse'] }), scen('overlimit-handoff', 'fail', [leak])]);
    const json = toJson(r) as { scenarios: Record<string, unknown>[]; findings: Record<string, unknown>[] };
    expect(json.scenarios[0]).toMatchObject({ name: 'abort-race', outcome: 'pass', power });
    expect(json.scenarios[1]).toMatchObject({ outcome: 'inconclusive', reason: 'budget' });
    expect(json.scenarios[2]).toMatchObject({ outcome: 'not-applicable' });
    expect(json.findings[0]).toMatchObject({ kind: 'cross-request-leak', remediation: FINDING_KINDS['cross-request-leak'].remediation });
    const text = summaryTable(r);
    expect(text).toContain('NOT-APPLICABLE');
    expect(text).toContain('INCONCLUSIVE (budget)');
    expect(text).toMatch(/PASS \(c=0\.9\d\)/);
    expect(text).toContain(`what to do: ${FINDING_KINDS['cross-request-leak'].remediation}`);
    expect(text).toContain('prefix-isolation not-applicable: an exact same-tenant re-send got 0 cached tokens');
  });
});

describe('--junit', () => {
  it('writes a testcase per scenario: failure per gating finding, skipped for not-applicable, error for inconclusive', () => {
    const r = run([scen('overlimit-handoff', 'fail', [leak]), scen('capacity-audit', 'fail', [warning], { withoutFindings: 'pass' }), scen('prefix-isolation', 'not-applicable'),
      scen('prefix-churn', 'inconclusive', [], { reason: 'deadline' }), scen('abort-race', 'pass')]);
    const xml = toJunit(r, 'high');
    const doc = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '' }).parse(xml) as {
      testsuites: { tests: string; failures: string; errors: string; skipped: string; testsuite: { testcase: Record<string, unknown>[] } };
    };
    expect(doc.testsuites).toMatchObject({ tests: '5', failures: '1', errors: '1', skipped: '1' });
    const cases = new Map(doc.testsuites.testsuite.testcase.map((c) => [c.name as string, c]));
    expect(cases.get('overlimit-handoff')).toHaveProperty('failure');
    expect(cases.get('capacity-audit')).not.toHaveProperty('failure');  // warning is below --fail-on high
    expect(cases.get('prefix-isolation')).toHaveProperty('skipped');
    expect(cases.get('prefix-churn')).toHaveProperty('error');
    expect(cases.get('abort-race')).not.toHaveProperty('failure');
    // Evidence from a hostile target stays text: escaped, never markup.
    expect(xml).not.toContain('<script>');
    expect(xml).toContain('&lt;script&gt;');
  });
});

describe('acknowledged findings (silences)', () => {
  const acked = (f: Finding): Finding => ({ ...f, acknowledged: 'silence 3 (ops) until 2026-02-01T00:00:00.000Z: known (TICKET-9)' });

  it('never gate, at any --fail-on, while an unacknowledged one still does', () => {
    const quiet = run([scen('overlimit-handoff', 'pass', [acked(leak)]), scen('capacity-audit', 'pass', [acked(warning)])]);
    for (const failOn of ['critical', 'high', 'warning', 'info'] as const) expect(exitCodeFor(quiet, failOn), failOn).toBe(EXIT.pass);
    const mixed = run([scen('overlimit-handoff', 'pass', [acked(leak)]), scen('capacity-audit', 'fail', [warning], { withoutFindings: 'pass' })]);
    expect(exitCodeFor(mixed, 'warning')).toBe(EXIT.fail);
    expect(exitCodeFor(mixed, 'high')).toBe(EXIT.pass);
    const xml = toJunit(mixed, 'warning');
    expect(xml).toMatch(/failures="1"/);
    expect(xml).toContain('acknowledged cross-request-leak [critical]: silence 3 (ops) until 2026-02-01T00:00:00.000Z: known (TICKET-9)');
  });

  it('are listed in --json with the silence that acknowledged them, and in the summary', () => {
    const r = run([scen('overlimit-handoff', 'pass', [acked(leak)])]);
    const silence = { id: '3', target: 'cli', kind: '*', reason: 'known (TICKET-9)', expiresAt: '2026-02-01T00:00:00.000Z', createdAt: '2026-01-01T00:00:00.000Z', createdBy: 'ops' };
    expect(toJson(r, [silence])).toMatchObject({
      scenarios: [{ name: 'overlimit-handoff', findings: 1, acknowledged: 1 }],
      findings: [{ kind: 'cross-request-leak', acknowledged: { silence: '3', reason: 'known (TICKET-9)', expiresAt: '2026-02-01T00:00:00.000Z', createdBy: 'ops' } }],
    });
    expect(summaryTable(r)).toContain('ACKNOWLEDGED ×1: silence 3 (ops) until 2026-02-01T00:00:00.000Z: known (TICKET-9)');
  });
});

describe('run -q: the one line says the verdict the exit code gives', () => {
  const acked = { ...leak, acknowledged: 'silence 1 (ops) until 2026-02-01T00:00:00.000Z: known' };
  const verdictOf = (line: string): string => /: (PASS|FAIL|INCONCLUSIVE|NOT-APPLICABLE|PARTIAL)\b/.exec(line)![1]!;
  const wordFor = { [EXIT.pass]: 'PASS', [EXIT.fail]: 'FAIL', [EXIT.inconclusive]: 'INCONCLUSIVE' } as Record<number, string>;
  it('a finding below --fail-on plus an acknowledged one: never FAIL when the exit code is not 1, both counted after the verdict', () => {
    const r = run([scen('overlimit-handoff', 'pass', [acked]), scen('capacity-audit', 'fail', [warning])]);
    expect(r.outcome).toBe('fail');
    expect(exitCodeFor(r, 'critical')).not.toBe(EXIT.fail);
    const line = quietLine(r, 'critical');
    expect(exitCodeFor(r, 'critical') === EXIT.pass ? ['PASS'] : ['INCONCLUSIVE', 'PARTIAL', 'NOT-APPLICABLE']).toContain(verdictOf(line));
    expect(line).toContain('1 finding(s) below --fail-on critical');
    expect(line).toContain('1 acknowledged finding(s)');
    expect(line).not.toContain('FAIL');
  });
  it('agrees with the exit code at every --fail-on', () => {
    const runs = [
      run([scen('overlimit-handoff', 'pass', [acked]), scen('capacity-audit', 'fail', [warning])]),
      run([scen('overlimit-handoff', 'fail', [leak]), scen('capacity-audit', 'fail', [warning])]),
      run([scen('overlimit-handoff', 'pass', [acked])]),
      run([scen('overlimit-handoff', 'inconclusive', [], { reason: 'deadline' }), scen('capacity-audit', 'fail', [warning])]),
    ];
    for (const r of runs) {
      for (const failOn of ['critical', 'high', 'warning', 'info'] as const) {
        // Exit 2 is every way of not establishing isolation: inconclusive, partial, nothing applicable.
        const word = verdictOf(quietLine(r, failOn));
        const code = exitCodeFor(r, failOn);
        if (code === EXIT.inconclusive) expect(['INCONCLUSIVE', 'PARTIAL', 'NOT-APPLICABLE'], `${failOn}: ${quietLine(r, failOn)}`).toContain(word);
        else expect(word, `${failOn}: ${quietLine(r, failOn)}`).toBe(wordFor[code]);
      }
    }
    expect(quietLine(runs[1]!, 'warning')).toMatch(/FAIL: 2 finding\(s\) at or above warning$/);
  });
});
