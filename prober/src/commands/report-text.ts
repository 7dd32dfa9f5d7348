/**
 * `kvcanary report` as text: runs newest first by the time shown (when they finished); skips per target and
 * reason (how many, first, and the latest with what it needed against what the budget had left); findings
 * grouped by target and kind, each group with its count, first and last seen, and per finding who planted the
 * marker, who read it and the excerpt (what the alert runbook promises). Everything passes through forTerminal: the
 * store holds target-supplied text.
 */
import { isActive, type Silence } from '../service/silences.js';
import type { RunSummary, SkipSummary, StoredFinding } from '../service/store.js';
import { plantedText } from '../probe/findings.js';
import { forTerminal, oneLine } from '../terminal-text.js';


/** A target's standing now by the overall rule (docs/verdicts.md), with why it is not a pass. */
export interface TargetStanding { target: string; verdict: string; reasons: string[] }

export interface ReportData {
  since: number;
  targets?: readonly TargetStanding[];
  runs: readonly RunSummary[];
  skips?: readonly SkipSummary[];
  findings: readonly StoredFinding[];
  silences?: readonly Silence[];
  now?: number;
}

/** The latest skip of a group: when, which scenario, and for the budget what it needed against what was left. */
function latestSkip(l: SkipSummary['latest']): string {
  const tokens = [
    ...(l.neededTokens !== undefined ? [`needed ${l.neededTokens} tokens`] : []),
    ...(l.availableTokens !== undefined ? [`${l.availableTokens} available`] : []),
  ];
  return `latest ${l.at}${l.scenario !== undefined ? ` (${l.scenario})` : ''}${tokens.length > 0 ? `: ${tokens.join(', ')}` : ''}`;
}

export function reportText({ since, targets = [], runs, skips = [], findings, silences = [], now = Date.now() }: ReportData): string {
  const out: string[] = [`targets (${targets.length}), standing now by the overall rule (pass only while the behavioural scenarios passed within their intervals):`];
  for (const t of targets) out.push(`  ${t.target.padEnd(16)} ${t.verdict.toUpperCase().padEnd(14)}${t.reasons.length > 0 ? ` ${t.reasons.join('; ')}` : ''}`);
  out.push(`runs since ${new Date(since).toISOString()} (${runs.length}), newest first:`);
  const byShown = [...runs].sort((a, b) => b.finishedAt.localeCompare(a.finishedAt));
  for (const r of byShown) {
    const reasons = [...new Set(r.scenarios.map((s) => s.reason).filter((x) => x !== undefined))];
    out.push(`  ${r.finishedAt}  ${r.target.padEnd(16)} ${r.outcome.toUpperCase().padEnd(12)}${reasons.length > 0 ? ` (${reasons.join(', ')})` : ''} ${r.scenarios.map((s) => `${s.name}=${s.outcome}`).join(' ')}`);
  }
  out.push(`skipped cycles and scenarios (${skips.reduce((n, s) => n + s.count, 0)}) by target and reason:`);
  for (const s of skips) {
    out.push(`  ${s.target.padEnd(16)} ${s.reason.padEnd(8)} ×${s.count}  first ${s.firstAt}  ${latestSkip(s.latest)}`);
  }
  const groups = new Map<string, StoredFinding[]>();
  for (const f of findings) {
    const key = `${f.target}\u0000${f.kind}`;
    groups.set(key, [...(groups.get(key) ?? []), f]);
  }
  out.push(`findings (${findings.length}) by target and kind:`);
  const ordered = [...groups.values()].map((g) => [...g].sort((a, b) => b.at.localeCompare(a.at)))
    .sort((a, b) => b[0]!.at.localeCompare(a[0]!.at));
  for (const g of ordered) {
    const first = g[g.length - 1]!;
    const last = g[0]!;
    out.push(`  ${last.target} ${last.kind} [${last.severity}] ×${g.length}  first seen ${first.at}  last seen ${last.at}`);
    for (const f of g) {
      const e = f.evidence;
      const parts = [`    ${f.at}  ${f.scenario}`];
      if (e.match !== undefined) parts.push(`${evidenceLabel(f)} ${oneLine(e.match)}`);
      if (e.planted !== undefined) parts.push(`${plantedText(e.planted)}${e.planted.resolvedFrom !== undefined ? ` (from ${e.planted.resolvedFrom})` : ''}`);
      if (e.read !== undefined) parts.push(`read by ${e.read.tenant}/${e.read.role} ${e.read.requestId}`);
      if (f.chance > 0) parts.push(`chance ≤ ${f.chance.toExponential(1)}`);
      if (f.acknowledged !== undefined) parts.push(`ACKNOWLEDGED (${oneLine(f.acknowledged)})`);
      out.push(parts.join('  '));
      if (e.excerpt !== undefined) out.push(`      excerpt: ${oneLine(e.excerpt)}`);
    }
  }
  out.push(`silences (${silences.length}):`);
  for (const s of silences) {
    out.push(`  ${isActive(s, now) ? 'active ' : 'expired'}  until ${s.expiresAt}  target=${s.target} kind=${s.kind}${s.scenario === undefined ? '' : ` scenario=${s.scenario}`}  by ${s.createdBy}: ${oneLine(s.reason)}`);
  }
  return forTerminal(out.join('\n'));
}

/**
 * What a finding's `evidence.match` is: a canary marker (or a fragment of one) for a leak that carried one, an
 * observation (cached tokens, a timing effect, a served over-limit prompt, pool against context) otherwise.
 */
export function evidenceLabel(f: Pick<StoredFinding, 'kind' | 'evidence'>): string {
  if (f.evidence.planted !== undefined || f.kind === 'cross-request-leak') return 'marker';
  return 'observed:';
}
