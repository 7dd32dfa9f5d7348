/**
 * The service's Prometheus metrics (names agreed in the project's metric list; dashboards and alert rules
 * key on them). Everything registers on the Registry passed in, never prom-client's global one.
 *
 * Labels stay low in cardinality: target, scenario, outcome, kind, severity, role, transport, reason.
 * Roles come from the probe, so they are checked against a short-name pattern and anything else is
 * exported as "other": a request or marker id can never become a label value.
 *
 * Label sets of configured targets and scenarios are created at start where a consumer needs the 0: the
 * run, cycle, skip and token counters (so increase() and rate() see a target's first run, skip or spend),
 * the outcome state sets and the inconclusive streak (so the outcome panel shows "no run yet"). Findings
 * and histograms are created by their first observation: every consumer of kvcanary_findings_total
 * (the recording rule kvcanary:findings:increase15m and the dashboard's finding panels) counts a series
 * born inside its window with its whole value, and a histogram of zeros has no quantile to show. The
 * finding alerts read kvcanary_open_findings instead (open-findings.ts), which an ack closes at once.
 * Pre-creating everything took 24 KiB of heap per target with two scenarios and 91 KiB with all eight
 * (now 5.6 and 18; docs/fleet.md "Sizing"), most of it prom-client's histogram buckets: the histograms here are
 * CompactHistogram for that reason.
 *
 * Gauges that state a fact (last-run time, target up, capacity) are left absent until the fact is known: a
 * last-run time of 0 would read as "56 years ago", and "up 0" before the first probe would page someone.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { FINDING_KINDS, type Finding, type FindingKind } from '../probe/findings.js';
import { CompactHistogram } from './compact-histogram.js';
import { OUTCOMES, RUN_OUTCOMES, type Outcome, type ProbeRun, type TransportClass } from '../probe/result.js';
import { TARGET_STANDINGS, type TargetStanding } from './target-verdict.js';
import { createOpenFindings, type OpenFindings } from './open-findings.js';
import type { Silence } from './silences.js';

export { OUTCOMES };

/** Prometheus label values use underscores: `not-applicable` is exported as `not_applicable`. */
export function outcomeLabel(o: string): string {
  return o.replace('-', '_');
}
export const TRANSPORTS: readonly TransportClass[] = ['ok', 'http-4xx', 'http-5xx', 'refused', 'reset', 'timeout', 'aborted', 'malformed', 'too-large'];
export const SKIP_REASONS = ['budget', 'overlap', 'shutdown'] as const;
export type SkipReason = typeof SKIP_REASONS[number];

const ROLE_RE = /^[a-z][a-z0-9_-]{0,31}$/;
/** A role that looks like an id (long digit or hex runs) is not a role. */
const ID_LIKE_RE = /[0-9a-f]{8,}|\d{4,}/;

export function roleLabel(role: string): string {
  return ROLE_RE.test(role) && !ID_LIKE_RE.test(role) ? role : 'other';
}

export interface Metrics {
  probeRuns: Counter<'target' | 'scenario' | 'outcome'>;
  probeCycles: Counter<'target' | 'outcome'>;
  /** The target's standing by the overall rule (target-verdict.ts): a state set. */
  targetVerdict: Gauge<'target' | 'outcome'>;
  findings: Counter<'target' | 'scenario' | 'kind' | 'severity'>;
  /** Findings a silence acknowledged (silences.ts): counted here instead of in `findings`, so they do not page. */
  findingsAcknowledged: Counter<'target' | 'scenario' | 'kind' | 'severity'>;
  probeDuration: CompactHistogram<'target' | 'scenario'>;
  requestDuration: CompactHistogram<'target' | 'role'>;
  timeToFirstToken: CompactHistogram<'target' | 'role'>;
  requests: Counter<'target' | 'role' | 'transport'>;
  tokensSent: Counter<'target' | 'scenario'>;
  tokensBilled: Counter<'target' | 'scenario'>;
  lastRunTimestamp: Gauge<'target' | 'scenario'>;
  lastRunOutcome: Gauge<'target' | 'scenario' | 'outcome'>;
  inconclusiveStreak: Gauge<'target' | 'scenario'>;
  /**
   * Findings of each kind in the scenario's last run that no silence acknowledged, 0 once a later run of it
   * finds none: the finding alerts hold on this between the runs of an hourly scenario.
   */
  lastRunFindings: Gauge<'target' | 'scenario' | 'kind'>;
  contextLimit: Gauge<'target'>;
  poolCapacity: Gauge<'target'>;
  targetUp: Gauge<'target'>;
  runsSkipped: Counter<'target' | 'reason'>;
  budgetRemaining: Gauge<'target'>;
  /** How often each scenario is due (its cost tier, else the cycle interval): what "stale" is measured against. */
  scenarioInterval: Gauge<'target' | 'scenario'>;
  /** Consecutive inconclusive runs per target/scenario (the gauge's source of truth). */
  streaks: Map<string, number>;
  /** The kinds kvcanary_last_run_findings has a series for, per target/scenario. */
  lastRunKinds: Map<string, Set<string>>;
  /** kvcanary_open_findings: what the finding alerts read (open-findings.ts). */
  open: OpenFindings;
}

export interface MetricsOptions {
  /** Silences in force now, re-read at every scrape by kvcanary_open_findings. @default none */
  silences?: () => readonly Silence[];
  /** @default Date.now */
  now?: () => number;
}

export function createMetrics(registry: Registry, opts: MetricsOptions = {}): Metrics {
  const registers = [registry];
  return {
    open: createOpenFindings({ registry, silences: opts.silences ?? (() => []), now: opts.now ?? Date.now }),
    probeRuns: new Counter({ name: 'kvcanary_probe_runs_total', help: 'Scenario runs completed, by outcome (inconclusive is never a pass).', labelNames: ['target', 'scenario', 'outcome'], registers }),
    probeCycles: new Counter({ name: 'kvcanary_probe_cycles_total', help: 'Whole probe cycles (all scenarios of one run), by combined outcome: pass needs a behavioural scenario passed; a cycle of cheap checks that passed is partial.', labelNames: ['target', 'outcome'], registers }),
    targetVerdict: new Gauge({ name: 'kvcanary_target_verdict', help: 'State set: 1 for the target\'s standing by the overall rule (pass only while its behavioural scenarios passed within their intervals and nothing applicable failed; partial, inconclusive, fail, not_applicable, none), 0 for the others.', labelNames: ['target', 'outcome'], registers }),
    findings: new Counter({ name: 'kvcanary_findings_total', help: 'Findings, by kind and severity.', labelNames: ['target', 'scenario', 'kind', 'severity'], registers }),
    findingsAcknowledged: new Counter({ name: 'kvcanary_findings_acknowledged_total', help: 'Findings matched by a silence (kvcanary ack or the config\'s silences): recorded, not paged.', labelNames: ['target', 'scenario', 'kind', 'severity'], registers }),
    probeDuration: new CompactHistogram({ name: 'kvcanary_probe_duration_seconds', help: 'Scenario wall time.', labelNames: ['target', 'scenario'], buckets: [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600], registers }),
    requestDuration: new CompactHistogram({ name: 'kvcanary_request_duration_seconds', help: 'Latency of one HTTP request to the target.', labelNames: ['target', 'role'], buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120], registers }),
    timeToFirstToken: new CompactHistogram({ name: 'kvcanary_time_to_first_token_seconds', help: 'Time to first generated token of streaming requests.', labelNames: ['target', 'role'], buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60], registers }),
    requests: new Counter({ name: 'kvcanary_requests_total', help: 'Requests to the target, by transport class (ok, http-4xx, http-5xx, refused, reset, timeout, aborted, malformed, too-large).', labelNames: ['target', 'role', 'transport'], registers }),
    tokensSent: new Counter({ name: 'kvcanary_tokens_sent_total', help: 'Prompt tokens sent (the prober\'s estimate).', labelNames: ['target', 'scenario'], registers }),
    tokensBilled: new Counter({ name: 'kvcanary_tokens_billed_total', help: 'Prompt plus completion tokens the endpoint reported in usage.', labelNames: ['target', 'scenario'], registers }),
    lastRunTimestamp: new Gauge({ name: 'kvcanary_last_run_timestamp_seconds', help: 'Unix time of the last completed scenario run.', labelNames: ['target', 'scenario'], registers }),
    lastRunOutcome: new Gauge({ name: 'kvcanary_last_run_outcome', help: 'State set: 1 for the outcome of the last scenario run (pass, fail, inconclusive, not_applicable), 0 for the others.', labelNames: ['target', 'scenario', 'outcome'], registers }),
    inconclusiveStreak: new Gauge({ name: 'kvcanary_inconclusive_streak', help: 'Consecutive inconclusive runs of a scenario (0 after a pass or fail).', labelNames: ['target', 'scenario'], registers }),
    lastRunFindings: new Gauge({ name: 'kvcanary_last_run_findings', help: 'Findings of a kind in the last run of a scenario that no silence acknowledged (0 once a later run finds none of that kind).', labelNames: ['target', 'scenario', 'kind'], registers }),
    contextLimit: new Gauge({ name: 'kvcanary_target_context_limit_tokens', help: 'Context limit the target advertises (absent if unknown).', labelNames: ['target'], registers }),
    poolCapacity: new Gauge({ name: 'kvcanary_target_pool_capacity_tokens', help: 'KV pool capacity of the target (absent if not exposed).', labelNames: ['target'], registers }),
    targetUp: new Gauge({ name: 'kvcanary_target_up', help: '1 if the last probe cycle reached the endpoint, else 0.', labelNames: ['target'], registers }),
    runsSkipped: new Counter({ name: 'kvcanary_runs_skipped_total', help: 'Scheduled runs not started, by reason (budget, overlap, shutdown).', labelNames: ['target', 'reason'], registers }),
    budgetRemaining: new Gauge({ name: 'kvcanary_budget_tokens_remaining', help: 'Tokens left in the target\'s current hourly budget.', labelNames: ['target'], registers }),
    scenarioInterval: new Gauge({ name: 'kvcanary_scenario_interval_seconds', help: 'How often the scenario is due against the target: its cost tier (schedule.scenarios) or else the cycle interval.', labelNames: ['target', 'scenario'], registers }),
    streaks: new Map(),
    lastRunKinds: new Map(),
  };
}

const key = (target: string, scenario: string): string => `${target}\u0000${scenario}`;

/**
 * Creates the zero-valued label sets of configured targets and scenarios that a consumer needs before the
 * first run (see the top of this file; findings and histograms are not among them). Idempotent: never
 * resets a count.
 */
export function initTargetMetrics(m: Metrics, target: string, scenarios: readonly string[]): void {
  for (const outcome of RUN_OUTCOMES) m.probeCycles.inc({ target, outcome: outcomeLabel(outcome) }, 0);
  for (const reason of SKIP_REASONS) m.runsSkipped.inc({ target, reason }, 0);
  for (const scenario of scenarios) {
    for (const outcome of OUTCOMES) m.probeRuns.inc({ target, scenario, outcome: outcomeLabel(outcome) }, 0);
    m.tokensSent.inc({ target, scenario }, 0);
    m.tokensBilled.inc({ target, scenario }, 0);
    const k = key(target, scenario);
    if (!m.streaks.has(k)) {
      m.streaks.set(k, 0);
      m.inconclusiveStreak.set({ target, scenario }, 0);
      for (const outcome of OUTCOMES) m.lastRunOutcome.set({ target, scenario, outcome: outcomeLabel(outcome) }, 0);
    }
  }
}

/**
 * Sets kvcanary_scenario_interval_seconds for exactly these targets (the ones this replica probes now), so the
 * staleness alert waits three tiers for an hourly scenario rather than paging between its runs.
 */
export function observeSchedules(m: Metrics, targets: readonly { name: string; scenarios: readonly string[]; schedule: { intervalMs: number; scenarioIntervalsMs?: Record<string, number> } }[]): void {
  m.scenarioInterval.reset();
  for (const t of targets) {
    for (const scenario of t.scenarios) {
      const tier = t.schedule.scenarioIntervalsMs?.[scenario] ?? 0;
      m.scenarioInterval.set({ target: t.name, scenario }, Math.max(t.schedule.intervalMs, tier) / 1000);
    }
  }
}

/**
 * Restores the last-run gauges after a restart from what the store knows, so no alert fires on a restart and
 * none that was firing resolves.
 */
export function seedScenarioState(
  m: Metrics,
  s: { target: string; scenario: string; outcome: Outcome; at: string; inconclusiveStreak: number; findingCounts?: Readonly<Record<string, number>>; runId?: string },
): void {
  if (s.findingCounts !== undefined) {
    m.open.seed(s.target, s.scenario, s.runId ?? '', s.findingCounts);
    const counts: Record<string, number> = {};
    for (const [kind, n] of Object.entries(s.findingCounts)) {
      const k = Object.hasOwn(FINDING_KINDS, kind) ? kind : 'unknown';
      counts[k] = (counts[k] ?? 0) + n;
    }
    setLastRunFindings(m, s.target, s.scenario, counts);
  }
  const at = Date.parse(s.at);
  if (Number.isFinite(at)) m.lastRunTimestamp.set({ target: s.target, scenario: s.scenario }, at / 1000);
  for (const outcome of OUTCOMES) m.lastRunOutcome.set({ target: s.target, scenario: s.scenario, outcome: outcomeLabel(outcome) }, outcome === s.outcome ? 1 : 0);
  m.streaks.set(key(s.target, s.scenario), s.inconclusiveStreak);
  m.inconclusiveStreak.set({ target: s.target, scenario: s.scenario }, s.inconclusiveStreak);
}

/** Removes every series of a target (it left the config), so it neither lingers on dashboards nor alerts as stale. */
export async function forgetTarget(m: Metrics, target: string): Promise<void> {
  const all = [m.probeRuns, m.probeCycles, m.findings, m.findingsAcknowledged, m.probeDuration, m.requestDuration, m.timeToFirstToken, m.requests,
    m.tokensSent, m.tokensBilled, m.lastRunTimestamp, m.lastRunOutcome, m.inconclusiveStreak, m.lastRunFindings, m.contextLimit, m.poolCapacity,
    m.targetUp, m.runsSkipped, m.budgetRemaining, m.targetVerdict] as const;
  for (const metric of all) {
    const { values } = await metric.get();
    const seen = new Set<string>();
    for (const v of values) {
      if (v.labels.target !== target) continue;
      // Histogram values carry `le`; removal is by the metric's own label set.
      const { le: _le, ...labels } = v.labels as Record<string, string | number>;
      const id = JSON.stringify(labels);
      if (seen.has(id)) continue;
      seen.add(id);
      (metric as unknown as { remove(labels: Record<string, string | number>): void }).remove(labels);
    }
  }
  for (const k of [...m.streaks.keys()]) if (k.startsWith(`${target}\u0000`)) m.streaks.delete(k);
  for (const k of [...m.lastRunKinds.keys()]) if (k.startsWith(`${target}\u0000`)) m.lastRunKinds.delete(k);
  m.open.forget(target);
}

/** Unacknowledged findings per kind (unknown kinds as `unknown`, as kvcanary_findings_total counts them). */
export function countByKind(findings: readonly Finding[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const f of findings) {
    if (f.acknowledged !== undefined) continue;
    const kind = Object.hasOwn(FINDING_KINDS, f.kind) ? f.kind : 'unknown';
    counts[kind] = (counts[kind] ?? 0) + 1;
  }
  return counts;
}

/** kvcanary_last_run_findings for one scenario run: its counts, and 0 for every kind an earlier run had. */
function setLastRunFindings(m: Metrics, target: string, scenario: string, counts: Readonly<Record<string, number>>): void {
  const k = key(target, scenario);
  const kinds = m.lastRunKinds.get(k) ?? new Set<string>();
  for (const kind of Object.keys(counts)) kinds.add(kind);
  for (const kind of kinds) m.lastRunFindings.set({ target, scenario, kind }, counts[kind] ?? 0);
  if (kinds.size > 0) m.lastRunKinds.set(k, kinds);
}

/** Counts findings (also those that arrive after their cycle was recorded). */
export function observeFindings(m: Metrics, target: string, findings: readonly Finding[]): void {
  for (const f of findings) {
    const kind: FindingKind | 'unknown' = Object.hasOwn(FINDING_KINDS, f.kind) ? f.kind : 'unknown';
    (f.acknowledged === undefined ? m.findings : m.findingsAcknowledged).inc({ target, scenario: f.scenario, kind, severity: f.severity });
  }
}

/** Sets the target's standing (a state set over every standing). */
export function observeVerdict(m: Metrics, target: string, standing: TargetStanding): void {
  for (const s of TARGET_STANDINGS) m.targetVerdict.set({ target, outcome: outcomeLabel(s) }, s === standing ? 1 : 0);
}

/** Updates every metric from one completed probe cycle. */
export function observeRun(m: Metrics, run: ProbeRun): void {
  const target = run.target;
  m.open.observeRun(run);
  m.probeCycles.inc({ target, outcome: outcomeLabel(run.outcome) });
  m.targetUp.set({ target }, run.up ? 1 : 0);
  // A cycle that reached the endpoint and learnt nothing means the fact is no longer exposed; a cycle that
  // did not reach it says nothing, so the last known value stays.
  const capacity: [Gauge<'target'>, number | undefined][] = [[m.contextLimit, run.capacity.contextTokens], [m.poolCapacity, run.capacity.poolTokens]];
  for (const [gauge, value] of capacity) {
    if (value !== undefined && Number.isFinite(value)) gauge.set({ target }, value);
    else if (run.up) gauge.remove({ target });
  }
  const finishedAt = Date.parse(run.finishedAt);
  for (const s of run.scenarios) {
    const scenario = s.name;
    m.probeRuns.inc({ target, scenario, outcome: outcomeLabel(s.outcome) });
    if (Number.isFinite(s.durationMs) && s.durationMs >= 0) m.probeDuration.observe({ target, scenario }, s.durationMs / 1000);
    if (s.tokens.sent > 0) m.tokensSent.inc({ target, scenario }, s.tokens.sent);
    if (s.tokens.billed > 0) m.tokensBilled.inc({ target, scenario }, s.tokens.billed);
    if (Number.isFinite(finishedAt)) m.lastRunTimestamp.set({ target, scenario }, finishedAt / 1000);
    for (const outcome of OUTCOMES) m.lastRunOutcome.set({ target, scenario, outcome: outcomeLabel(outcome) }, outcome === s.outcome ? 1 : 0);
    const k = key(target, scenario);
    const streak = s.outcome === 'inconclusive' ? (m.streaks.get(k) ?? 0) + 1 : 0;
    m.streaks.set(k, streak);
    m.inconclusiveStreak.set({ target, scenario }, streak);
    observeFindings(m, target, s.findings);
    setLastRunFindings(m, target, scenario, countByKind(s.findings));
    for (const r of s.requests) {
      const role = roleLabel(r.role);
      const transport = (TRANSPORTS as readonly string[]).includes(r.transport) ? r.transport : 'malformed';
      m.requests.inc({ target, role, transport });
      if (r.latencyMs !== undefined && Number.isFinite(r.latencyMs) && r.latencyMs >= 0) m.requestDuration.observe({ target, role }, r.latencyMs / 1000);
      if (r.ttftMs !== undefined && Number.isFinite(r.ttftMs) && r.ttftMs >= 0) m.timeToFirstToken.observe({ target, role }, r.ttftMs / 1000);
    }
  }
}
