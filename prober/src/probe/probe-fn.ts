/**
 * The seam between the service and the probe. The scheduler calls a ProbeFn; `kvcanary run` calls the same
 * probe directly. The service never looks inside a probe: it schedules, bounds (time, tokens, concurrency)
 * and records what comes back.
 */
import type { ProbeTarget } from './probe-target.js';
import type { ProbeRun } from './result.js';

export interface ProbeRequest {
  target: ProbeTarget;
  /** Scenario names to run this call (the scheduler passes one scenario per call; `run` may pass several). */
  scenarios: string[];
  runId: string;
  /** Aborted when the run's timeout hits or the service shuts down: return promptly with what was found. */
  signal: AbortSignal;
  /**
   * Remaining token budget the probe may spend (the probe reports what it spent in tokens.sent/billed), or
   * `auto`: what its scenarios are expected to send at the endpoint's advertised sizes, with headroom
   * (scenarios/cost.ts runBudget), and AUTO_BUDGET_FALLBACK when no size is advertised.
   */
  tokenBudget: number | 'auto';
  /**
   * Beyond `tokenBudget`, what more the caller can grant now (the scheduler: what the target's hourly budget
   * has left over and above what the cycle's other scenarios are expected to need). A scenario is cut short
   * for the budget only when this is exhausted too.
   */
  moreBudget?: BudgetReserve;
}

export interface BudgetReserve {
  /** Tokens that could be granted now. */
  spare(): number;
  /** Takes `tokens` more for this probe; false (nothing taken) if they are not spare. */
  take(tokens: number): boolean;
}

export type ProbeFn = (req: ProbeRequest) => Promise<ProbeRun>;

/** `tokenBudget: 'auto'` when the endpoint advertises no size the scenarios' costs follow from. */
export const AUTO_BUDGET_FALLBACK = 5_000_000;
