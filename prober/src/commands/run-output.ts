/**
 * What `kvcanary run` prints: the `--json` document, the stderr summary, the JUnit XML report, and the exit
 * code a CI gate reads (`--fail-on`). Pure functions of a ProbeRun (and, for --json, the silences applied to
 * it). A finding a silence acknowledged is listed everywhere, marked so, and gates nothing.
 */
import { EXIT, type ExitCode } from '../exit-codes.js';
import { atLeast, FINDING_KINDS, type Finding, type Severity } from '../probe/findings.js';
import { BEHAVIOURAL_SCENARIOS, combineOutcomes, outcomeWithoutFindings, type Outcome, type ProbeRun, type ScenarioResult } from '../probe/result.js';
import { silenceOf, type Silence } from '../service/silences.js';
import { oneLine } from '../terminal-text.js';

/** Findings that gate: at or above `failOn` and not acknowledged by a silence. */
function gating(s: ScenarioResult, failOn: Severity): Finding[] {
  return s.findings.filter((f) => f.acknowledged === undefined && atLeast(f.severity, failOn));
}

/**
 * A scenario as the gate sees it: findings below `--fail-on`, or acknowledged, are listed but do not fail it;
 * the scenario then counts as what it established apart from them — never a pass if it stopped at a finding.
 */
function gated(s: ScenarioResult, failOn: Severity): Outcome {
  if (gating(s, failOn).length > 0) return 'fail';
  return outcomeWithoutFindings(s);
}

const acknowledgedCount = (s: ScenarioResult): number => s.findings.filter((f) => f.acknowledged !== undefined).length;

/**
 * 1 for a finding at or above `failOn`; otherwise the run's outcome with lesser findings set aside: 0 only
 * for a pass (a behavioural scenario passed, every other applicable one too), 2 for everything else.
 */
export function exitCodeFor(run: ProbeRun, failOn: Severity): ExitCode {
  const outcome = combineOutcomes(run.scenarios.map((s) => ({ name: s.name, outcome: gated(s, failOn) })));
  if (outcome === 'fail') return EXIT.fail;
  if (outcome === 'pass') return EXIT.pass;
  return EXIT.inconclusive;  // inconclusive, partial or nothing applicable: isolation was not established
}

/** Why a partial run is not a pass, in one line. */
function partialWhy(run: ProbeRun): string {
  const ran = run.scenarios.filter((s) => BEHAVIOURAL_SCENARIOS.includes(s.name));
  return ran.length === 0
    ? `no behavioural scenario (${BEHAVIOURAL_SCENARIOS.join(', ')}) was run: isolation not established`
    : `no behavioural scenario passed (${ran.map((s) => `${s.name} ${s.outcome}`).join(', ')}): isolation not established`;
}

function findingJson(f: Finding, silences: readonly Silence[]): object {
  const by = silenceOf(f, silences);
  return {
    kind: f.kind, severity: f.severity, scenario: f.scenario, evidence: f.evidence, chance: f.chance, remediation: FINDING_KINDS[f.kind].remediation,
    ...(f.acknowledged === undefined ? {} : {
      acknowledged: {
        ...(by === undefined ? {} : { silence: by.id, reason: by.reason, expiresAt: by.expiresAt, createdBy: by.createdBy }),
        text: f.acknowledged,
      },
    }),
  };
}

/** The documented `--json` document; `silences` (those applied) give an acknowledged finding its silence's fields. */
export function toJson(run: ProbeRun, silences: readonly Silence[] = []): object {
  return {
    outcome: run.outcome,
    target: run.baseUrl,
    model: run.model,
    runId: run.runId,
    startedAt: run.startedAt,
    finishedAt: run.finishedAt,
    capacity: run.capacity,
    scenarios: run.scenarios.map((s) => ({
      name: s.name,
      outcome: s.outcome,
      ...(s.reason !== undefined ? { reason: s.reason } : {}),
      ...(s.power !== undefined ? { power: s.power } : {}),
      findings: s.findings.length,
      ...(acknowledgedCount(s) > 0 ? { acknowledged: acknowledgedCount(s) } : {}),
      requests: s.requests.length,
      tokens: s.tokens,
      durationMs: s.durationMs,
      notes: s.notes,
    })),
    findings: run.scenarios.flatMap((s) => s.findings.map((f) => findingJson(f, silences))),
  };
}

function outcomeText(s: ScenarioResult): string {
  const base = s.outcome.toUpperCase();
  if (s.reason !== undefined) return `${base} (${s.reason})`;
  if (s.power !== undefined && s.outcome === 'pass') return `${base} (c=${s.power.confidence.toFixed(2)})`;
  return base;
}

export function summaryTable(run: ProbeRun): string {
  const rows = run.scenarios.map((s) => [s.name, outcomeText(s), String(s.findings.length), String(s.requests.length), String(s.tokens.sent), `${(s.durationMs / 1000).toFixed(1)}s`]);
  const head = ['scenario', 'outcome', 'findings', 'requests', 'tokens', 'time'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const fmt = (r: string[]): string => r.map((c, i) => c.padEnd(widths[i]!)).join('  ');
  const lines = [``, `kvcanary run ${run.baseUrl} (model ${run.model || '?'}): ${run.outcome.toUpperCase()}`, fmt(head), ...rows.map(fmt)];
  const kinds = new Map<Finding['kind'], { n: number; acked: Map<string, number> }>();
  for (const f of run.scenarios.flatMap((s) => s.findings)) {
    const k = kinds.get(f.kind) ?? { n: 0, acked: new Map<string, number>() };
    k.n++;
    if (f.acknowledged !== undefined) k.acked.set(f.acknowledged, (k.acked.get(f.acknowledged) ?? 0) + 1);
    kinds.set(f.kind, k);
  }
  for (const [kind, { n, acked }] of kinds) {
    const ackedN = [...acked.values()].reduce((a, b) => a + b, 0);
    lines.push(`finding ${kind} ×${n} [${FINDING_KINDS[kind].severity}]${ackedN > 0 ? ` (${ackedN} acknowledged)` : ''}`);
    // A silence's reason is the operator's text: one line, whatever an older store holds.
    for (const [by, m] of acked) lines.push(`  ACKNOWLEDGED ×${m}: ${oneLine(by)}`);
    lines.push(`  what to do: ${FINDING_KINDS[kind].remediation}`);
  }
  for (const s of run.scenarios.filter((x) => x.outcome === 'not-applicable' || x.outcome === 'inconclusive')) {
    const why = s.notes[0];
    if (why !== undefined) lines.push(`${s.name} ${s.outcome}: ${why}`);
  }
  if (run.outcome === 'partial') lines.push(`PARTIAL: ${partialWhy(run)}`);
  return lines.join('\n');
}

/**
 * `run -q`: the verdict in one line, the verdict the exit code gives (`--fail-on` and silences applied): a
 * finding below `--fail-on` or acknowledged is counted after it, never as the verdict. An inconclusive run
 * says why (the reasons of its inconclusive scenarios: unreachable, deadline, budget, power, or the first
 * note), never a table of empty rows.
 */
export function quietLine(run: ProbeRun, failOn: Severity = 'warning'): string {
  const verdict = combineOutcomes(run.scenarios.map((s) => ({ name: s.name, outcome: gated(s, failOn) })));
  const acked = run.scenarios.reduce((n, s) => n + acknowledgedCount(s), 0);
  const gatingN = run.scenarios.reduce((n, s) => n + gating(s, failOn).length, 0);
  const below = run.scenarios.reduce((n, s) => n + s.findings.length, 0) - acked - gatingN;
  const aside = [
    ...(below > 0 ? [`${below} finding(s) below --fail-on ${failOn}`] : []),
    ...(acked > 0 ? [`${acked} acknowledged finding(s)`] : []),
  ].join(', ');
  const head = `kvcanary run ${run.baseUrl}: ${verdict.toUpperCase()}`;
  if (verdict === 'fail') return `${head}: ${gatingN} finding(s) at or above ${failOn}${aside === '' ? '' : `, ${aside}`}`;
  if (verdict === 'partial') return `${head} (${partialWhy(run)})${aside === '' ? '' : `: ${aside}`}`;
  if (verdict !== 'inconclusive') return aside === '' ? head : `${head}: ${aside}`;
  const open = run.scenarios.filter((s) => s.outcome === 'inconclusive');
  const reasons = [...new Set(open.map((s) => s.reason).filter((r) => r !== undefined))];
  const why = reasons.length > 0 ? reasons.join(', ') : (open[0]?.notes[0] ?? 'isolation not established');
  const note = reasons.length > 0 ? open.find((s) => s.reason === reasons[0])?.notes[0] : undefined;
  return `${head} (${why})${note !== undefined && note !== why ? `: ${note.replace(/\s+/g, ' ').slice(0, 200)}` : ''}${aside === '' ? '' : `; ${aside}`}`;
}

function xml(s: string): string {
  // XML 1.0 forbids most control characters even as references: drop them, escape the rest.
  // eslint-disable-next-line no-control-regex
  // C1 controls and bidi overrides are legal XML but act on whoever views the report: dropped too.
  return s.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufffe\uffff]/g, '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]!);
}

/**
 * JUnit XML as CI systems read it: a testcase per scenario; a <failure> per finding at or above `failOn` that
 * no silence acknowledged (acknowledged ones are listed in the testcase's <system-out>); <skipped> for
 * not-applicable; <error> for inconclusive. Evidence is already bounded and redacted.
 */
export function toJunit(run: ProbeRun, failOn: Severity): string {
  const cases = run.scenarios.map((s) => {
    const failures = gating(s, failOn);
    const acked = s.findings.flatMap((f) => (f.acknowledged === undefined ? [] : [`acknowledged ${f.kind} [${f.severity}]: ${f.acknowledged}`]));
    const notes = [...acked, ...s.notes].join('\n');
    const body: string[] = [];
    for (const f of failures) {
      const detail = [FINDING_KINDS[f.kind].summary, `what to do: ${FINDING_KINDS[f.kind].remediation}`, JSON.stringify(f.evidence)].join('\n');
      body.push(`      <failure type="${xml(f.kind)}" message="${xml(`${f.kind} [${f.severity}]`)}">${xml(detail)}</failure>`);
    }
    const shown = gated(s, failOn);
    if (shown === 'not-applicable') body.push(`      <skipped message="${xml(`not applicable: ${s.notes[0] ?? ''}`)}"/>`);
    if (shown === 'inconclusive') {
      const why = s.outcome === 'fail' ? `stopped at a finding below --fail-on or acknowledged: isolation not established` : s.notes[0] ?? '';
      body.push(`      <error type="inconclusive" message="${xml(`inconclusive${s.reason !== undefined ? ` (${s.reason})` : ''}: ${why}`)}"/>`);
    }
    if (notes.length > 0) body.push(`      <system-out>${xml(notes)}</system-out>`);
    return `    <testcase classname="kvcanary.${xml(run.target)}" name="${xml(s.name)}" time="${(s.durationMs / 1000).toFixed(3)}">\n${body.join('\n')}${body.length > 0 ? '\n' : ''}    </testcase>`;
  });
  const count = (p: (s: ScenarioResult) => boolean): number => run.scenarios.filter(p).length;
  const failures = count((s) => gating(s, failOn).length > 0);
  const errors = count((s) => gated(s, failOn) === 'inconclusive');
  const skipped = count((s) => gated(s, failOn) === 'not-applicable');
  const seconds = (Date.parse(run.finishedAt) - Date.parse(run.startedAt)) / 1000;
  return `<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="kvcanary" tests="${run.scenarios.length}" failures="${failures}" errors="${errors}" skipped="${skipped}">
  <testsuite name="${xml(`kvcanary ${run.baseUrl}`)}" tests="${run.scenarios.length}" failures="${failures}" errors="${errors}" skipped="${skipped}" time="${Number.isFinite(seconds) ? seconds.toFixed(3) : '0'}" timestamp="${xml(run.startedAt)}">
    <properties>
      <property name="outcome" value="${xml(run.outcome)}"/>
      <property name="model" value="${xml(run.model)}"/>
      <property name="runId" value="${xml(run.runId)}"/>
      <property name="failOn" value="${failOn}"/>
    </properties>
${cases.join('\n')}
  </testsuite>
</testsuites>
`;
}
