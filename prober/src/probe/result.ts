/**
 * What one scenario run returns. Scenarios return data; the CLI, store, metrics and logger consume it.
 * Outcomes: `pass` only when isolation was positively established; anything the prober could not
 * establish is `inconclusive`, never a pass. `not-applicable`: the endpoint demonstrably lacks the
 * mechanism the scenario stresses (no prefix reuse at all, say), with the evidence in the notes. It is
 * never a pass of its own scenario, and is judged afresh every run (a cache switched on later is judged).
 */
import type { Finding } from './findings.js';

export type Outcome = 'pass' | 'fail' | 'inconclusive' | 'not-applicable';

export const OUTCOMES: readonly Outcome[] = ['pass', 'fail', 'inconclusive', 'not-applicable'];

/**
 * A whole run's (or `serve` cycle's) outcome: a scenario's four, plus `partial` — every scenario it ran that
 * applied passed, but no behavioural scenario passed in it (a cycle of cheap checks only, or
 * `run --scenario prefix-isolation`). Partial is never a pass: isolation was not established by this run.
 */
export type RunOutcome = Outcome | 'partial';

export const RUN_OUTCOMES: readonly RunOutcome[] = [...OUTCOMES, 'partial'];

/**
 * Scenarios that judge isolation by the endpoint's behaviour under stress. A run passes only if at least one
 * of them passed: the others (configuration audit, prefix-cache scenarios) may be not-applicable.
 */
export const BEHAVIOURAL_SCENARIOS: readonly string[] = ['overlimit-handoff', 'abort-race', 'concurrent-interleave'];

/**
 * What a race scenario's pass is worth: `trials` race windows that can show a race, correlated ones counted
 * once, and a statement that a race fault of rate at least `detectableRate` is caught with probability
 * `confidence`. `basis` says where the confidence comes from: `measured` — per-run recall on the bundled
 * engine with its race faults firing on a fraction `detectableRate` of their eligible events, the Wilson 95%
 * lower bound (bench/race-calibration*.json; scenarios/race-power.ts); `scaled` — that measurement scaled
 * down for a run cut short of the measured workload; `model` (or absent, in older records) — a fault that
 * shows in at least a fraction `detectableRate` of `trials` windows assumed independent, 1 - (1 - r)^trials.
 */
export interface Power {
  trials: number;
  detectableRate: number;
  confidence: number;
  basis?: 'measured' | 'scaled' | 'model';
}

/** Why a scenario did not conclude, where it was not the endpoint's doing. */
export type InconclusiveReason = 'budget' | 'deadline' | 'unreachable' | 'power';

/** How one HTTP exchange with the target ended, as data. */
export type TransportClass =
  | 'ok'          // 2xx with a well-formed body
  | 'http-4xx'
  | 'http-5xx'
  | 'refused'     // ECONNREFUSED, DNS failure
  | 'reset'       // socket closed mid-exchange
  | 'timeout'
  | 'aborted'     // we aborted it on purpose
  | 'malformed'   // 2xx but the body or stream did not parse
  | 'too-large';  // the response exceeded the byte bound

export interface RequestRecord {
  requestId: string;
  role: string;           // planter | overlimit | reader | control | ...
  tenant: string;
  transport: TransportClass;
  status?: number;
  promptTokens?: number;  // as the prober estimated
  usagePromptTokens?: number;
  usageCompletionTokens?: number;
  cachedTokens?: number;
  latencyMs?: number;
  ttftMs?: number;
  finishReason?: string;
  /** Bounded error text from the target (never request bodies). */
  error?: string;
}

export interface ScenarioResult {
  name: string;
  outcome: Outcome;
  findings: Finding[];
  requests: RequestRecord[];
  /** Why the outcome is what it is, one short line each (reasons for inconclusive, what was established). */
  notes: string[];
  tokens: { sent: number; billed: number };
  durationMs: number;
  /** Race scenarios: what a pass (or the attempt) is worth. */
  power?: Power;
  /** Inconclusive for a reason of the prober's own (budget, deadline) rather than the endpoint's. */
  reason?: InconclusiveReason;
  /**
   * A failed scenario: what it established apart from its findings (`inconclusive` when it stopped at the
   * first one). Used when findings are set aside (`--fail-on`, silences): see outcomeWithoutFindings.
   */
  withoutFindings?: Exclude<Outcome, 'fail'>;
}

/** One line a person reads: what the power statement says, by its basis. */
export function describePower(p: Power): string {
  const pct = `${Math.round(p.detectableRate * 100)}%`;
  const c = p.confidence.toFixed(3);
  switch (p.basis) {
    case 'measured':
      return `power (measured): ${p.trials} independent race windows; a race fault firing on ≥${pct} of its eligible events was caught in ≥${c} of runs (Wilson 95% lower bound, npm run bench:race-calibration)`;
    case 'scaled':
      return `power (scaled, short of the measured workload): ${p.trials} independent race windows; a race fault firing on ≥${pct} of its eligible events caught with probability ${c}`;
    default:
      return `power (model, windows assumed independent): ${p.trials} race windows, a fault showing in ≥${pct} of them caught with probability ${c}`;
  }
}

/** c = 1 - (1 - r)^N. */
export function powerOf(trials: number, detectableRate: number): Power {
  const confidence = trials <= 0 ? 0 : 1 - Math.pow(1 - detectableRate, trials);
  return { trials, detectableRate, confidence: Math.round(confidence * 10_000) / 10_000, basis: 'model' };
}

/** The fewest independent windows for `detectableRate` to be caught with probability `confidence`. */
export function trialsFor(detectableRate: number, confidence: number): number {
  return Math.ceil(Math.log(1 - confidence) / Math.log(1 - detectableRate));
}

/**
 * The one overall rule, for a run or a cycle (the target's standing in `serve` adds freshness on top:
 * service/target-verdict.ts): fail beats inconclusive; `pass` needs at least one behavioural scenario
 * passed and every other applicable one passed. Everything applicable passed but no behavioural pass among
 * them (none was run, or the ones run were not applicable) is `partial`, never a pass. Not-applicable never
 * counts as a pass; a run of nothing but not-applicable scenarios is not-applicable.
 */
export function combineOutcomes(scenarios: readonly { name: string; outcome: Outcome }[]): RunOutcome {
  const outcomes = scenarios.map((s) => s.outcome);
  if (outcomes.includes('fail')) return 'fail';
  if (outcomes.length === 0 || outcomes.includes('inconclusive')) return 'inconclusive';
  if (!outcomes.includes('pass')) return 'not-applicable';
  return scenarios.some((s) => s.outcome === 'pass' && BEHAVIOURAL_SCENARIOS.includes(s.name)) ? 'pass' : 'partial';
}

/**
 * What a failed scenario counts as once its findings are set aside (below `--fail-on`, or acknowledged by a
 * silence): what the scenario itself established apart from them (`withoutFindings`), which is never a pass
 * for a scenario that stopped at its first finding (the race scenarios: their power was not reached).
 * Unknown (a result from elsewhere) is inconclusive.
 */
export function outcomeWithoutFindings(s: Pick<ScenarioResult, 'outcome' | 'withoutFindings'>): Exclude<Outcome, 'fail'> {
  return s.outcome === 'fail' ? s.withoutFindings ?? 'inconclusive' : s.outcome;
}

/** One probe cycle against one target: what `run` prints and what `serve` stores and exports. */
export interface ProbeRun {
  runId: string;
  /** The target's configured name (a low-cardinality label), e.g. "prod-glm". */
  target: string;
  baseUrl: string;
  model: string;
  startedAt: string;   // ISO 8601
  finishedAt: string;
  outcome: RunOutcome;
  scenarios: ScenarioResult[];
  /** What introspection learnt about the target (absent fields: not exposed). */
  capacity: {
    contextTokens?: number; poolTokens?: number; pageSize?: number;
    /** The pool where requests reserve their pages (decode's when disaggregated), and the largest pool exposed. */
    reservationPoolTokens?: number; largestPoolTokens?: number;
  };
  /** Was the endpoint reachable at all this cycle. */
  up: boolean;
}
