/**
 * A target's standing in `serve`: the one overall rule (probe/result.ts combineOutcomes) applied to the
 * latest result of each of its scenarios, with freshness, since under cost tiers most cycles run only
 * cheap scenarios. A target is `pass` only when its behavioural scenarios (overlimit-handoff, abort-race,
 * concurrent-interleave) passed within their intervals plus a grace, at least one of them did, and nothing
 * applicable failed or is inconclusive. So a cycle of cheap checks never turns a target green on its own,
 * and a behavioural pass that has aged past its interval (its runs skipped for the budget, say) stops
 * counting. Shown by /api/targets, /healthz, the status page and kvcanary_target_verdict.
 *
 *   fail            the latest run of some scenario failed (however old: a finding stands until a later run
 *                   of that scenario shows none)
 *   inconclusive    the latest run of some scenario was inconclusive
 *   pass            every configured behavioural scenario passed (or is not applicable) within its
 *                   freshness, at least one passed, and every other scenario's latest run passed or was
 *                   not applicable
 *   not-applicable  every latest run was not applicable
 *   partial         otherwise: what ran is clean, but the behavioural evidence is missing or stale
 *   none            no completed run yet
 */
import { BEHAVIOURAL_SCENARIOS, type Outcome, type RunOutcome } from '../probe/result.js';
import { formatDuration } from './config.js';

export type TargetStanding = RunOutcome | 'none';

export const TARGET_STANDINGS: readonly TargetStanding[] = ['pass', 'fail', 'inconclusive', 'not-applicable', 'partial', 'none'];

export interface TargetVerdict {
  outcome: TargetStanding;
  /** Why it is not a pass (empty for a pass), one short line each. */
  reasons: string[];
}

export interface ScenarioStanding {
  scenario: string;
  outcome: Outcome;
  /** When that run finished (ISO 8601). */
  at: string;
}

export interface VerdictInput {
  /** The target's configured scenarios (empty: judge whatever has history). */
  scenarios: readonly string[];
  /** Latest result per scenario. */
  latest: readonly ScenarioStanding[];
  /** How long a scenario's pass counts: its interval plus the grace (scenario-schedule.ts freshnessMs). */
  freshForMs: (scenario: string) => number;
  now: number;
}

const ago = (ms: number): string => formatDuration(Math.max(0, Math.round(ms / 1000)) * 1000);

export function targetVerdict(input: VerdictInput): TargetVerdict {
  const configured = input.scenarios.length > 0 ? new Set(input.scenarios) : undefined;
  const latest = input.latest.filter((s) => configured === undefined || configured.has(s.scenario));
  if (latest.length === 0) return { outcome: 'none', reasons: ['no completed run yet'] };
  const failed = latest.filter((s) => s.outcome === 'fail');
  if (failed.length > 0) return { outcome: 'fail', reasons: failed.map((s) => `${s.scenario} failed (its latest run)`) };
  const open = latest.filter((s) => s.outcome === 'inconclusive');
  if (open.length > 0) return { outcome: 'inconclusive', reasons: open.map((s) => `${s.scenario} inconclusive (its latest run)`) };
  if (latest.every((s) => s.outcome === 'not-applicable')) return { outcome: 'not-applicable', reasons: ['every scenario run was not applicable'] };

  const byName = new Map(latest.map((s) => [s.scenario, s]));
  const behavioural = (configured === undefined ? [...byName.keys()] : [...configured]).filter((s) => BEHAVIOURAL_SCENARIOS.includes(s));
  const reasons: string[] = [];
  let fresh = 0;
  for (const name of behavioural) {
    const s = byName.get(name);
    if (s === undefined) { reasons.push(`${name} has not run yet`); continue; }
    if (s.outcome === 'not-applicable') continue;
    const age = input.now - Date.parse(s.at);
    const limit = input.freshForMs(name);
    if (!(age <= limit)) { reasons.push(`${name} last passed ${ago(age)} ago, past its interval and grace (${ago(limit)})`); continue; }
    fresh++;
  }
  if (behavioural.length === 0) reasons.push(`no behavioural scenario (${BEHAVIOURAL_SCENARIOS.join(', ')}) is configured`);
  else if (fresh === 0 && reasons.length === 0) reasons.push('no behavioural scenario passed (the ones run were not applicable)');
  return reasons.length === 0 ? { outcome: 'pass', reasons: [] } : { outcome: 'partial', reasons };
}
