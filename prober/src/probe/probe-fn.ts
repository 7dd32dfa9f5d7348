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
  /** Remaining token budget the probe may spend (the probe reports what it spent in tokens.sent/billed). */
  tokenBudget: number;
}

export type ProbeFn = (req: ProbeRequest) => Promise<ProbeRun>;
