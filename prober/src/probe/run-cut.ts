/**
 * A run cut short from outside the scenarios: its deadline passed (`run --deadline`, a target's `deadline:`,
 * the shutdown grace), or the endpoint stopped answering. The cycle's AbortSignal carries a RunCut as its
 * reason; every request in flight is aborted with it, and the scenarios it cut are recorded inconclusive with
 * the reason, keeping any finding made before the cut (a leak seen is a leak, however the run ended).
 */
import type { InconclusiveReason, ScenarioResult } from './result.js';

export type CutReason = Extract<InconclusiveReason, 'deadline' | 'unreachable'>;

export class RunCut extends Error {
  override readonly name = 'RunCut';
  constructor(readonly reason: CutReason, message: string) {
    super(message);
  }
}

export function cutOf(signal: AbortSignal): RunCut | undefined {
  return signal.aborted && signal.reason instanceof RunCut ? signal.reason : undefined;
}

/** The scenario as the cut leaves it: a finding stands; anything short of one was not established. */
export function markCut(result: ScenarioResult, cut: RunCut): ScenarioResult {
  if (result.outcome === 'fail') return { ...result, notes: [...result.notes, cut.message] };
  return { ...result, outcome: 'inconclusive', reason: cut.reason, notes: [cut.message, ...result.notes] };
}

/** A scenario the cut left unstarted. */
export function cutSkipped(name: string, cut: RunCut): ScenarioResult {
  return { name, outcome: 'inconclusive', reason: cut.reason, findings: [], requests: [], notes: [cut.message], tokens: { sent: 0, billed: 0 }, durationMs: 0 };
}
