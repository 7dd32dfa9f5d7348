/**
 * One cycle of one target: every due scenario, one probe call each, all under one run id, within the cycle's
 * timeout and the target's budget. Returns what happened as data (the assembled run, the skips, the probes it
 * abandoned); counting, recording and the loop's state are the scheduler's.
 *
 * Each call holds a slot in the target's queue (`concurrency.per_target`) and in the global queue
 * (`concurrency.global`). The timeout counts from when the cycle was due and covers waiting for slots. When it
 * hits, the cycle's AbortSignal fires; probes get a grace to hand back what they found (a finding made before
 * the timeout is kept, but a scenario that had not finished is never a pass: it is inconclusive). A probe that
 * ignores its abort past the grace is abandoned: the cycle ends without it, and its late findings arrive
 * through `abandoned[].late`. Nothing is retried: a failure is an outcome.
 */
import type PQueue from 'p-queue';
import type { Logger } from 'pino';
import { costOf, type TokenBudget } from './budget.js';
import type { Clock } from './clock.js';
import { formatDuration, type TargetConfig } from './config.js';
import type { SkipReason } from './metrics.js';
import type { Finding } from '../probe/findings.js';
import type { ProbeFn } from '../probe/probe-fn.js';
import { combineOutcomes, type ProbeRun, type ScenarioResult } from '../probe/result.js';
import type { CancelReason } from './target-loop.js';

export interface CycleDeps {
  probe: ProbeFn;
  clock: Clock;
  logger: Logger;
  /** How long a probe may take to hand back results after its abort. */
  graceMs: number;
  globalQueue: PQueue;
  /** A probe's spend was charged to the budget (so the gauge can follow). */
  onSpend: () => void;
}

export interface CycleInput {
  target: TargetConfig;
  /** The target's own queue (concurrency.per_target). */
  queue: PQueue;
  budget: TokenBudget;
  runId: string;
  due: readonly string[];
}

/** A skip that happened during the cycle, at `at` (unix ms), with the fields its log line carries. */
export interface CycleSkip { reason: SkipReason; at: number; fields: Record<string, unknown> }

export interface AbandonedProbe {
  scenario: string;
  /** The findings the probe returns if it ever ends ([] if it throws). */
  late: Promise<Finding[]>;
}

export interface CycleResult {
  /** Undefined when no scenario ran (all cancelled at shutdown). */
  run: ProbeRun | undefined;
  skips: CycleSkip[];
  abandoned: AbandonedProbe[];
}

export interface RunningCycle {
  /** Cancels the calls still waiting for a slot (in flight ones are not touched). */
  cancel(reason: CancelReason): void;
  result: Promise<CycleResult>;
}

type CallResult =
  | { kind: 'ran'; results: ScenarioResult[]; run: ProbeRun | undefined }
  | { kind: 'skipped'; reason: SkipReason; scenario: string };

class CancelledError extends Error {
  constructor(readonly reason: CancelReason) { super(reason); }
}

interface Cycle {
  deps: CycleDeps;
  input: CycleInput;
  signal: AbortSignal;
  /** The cycle's scenarios not yet started: each one's budget grant is a share of what they are expected to cost. */
  unstarted: Set<string>;
  cancellers: Set<(reason: CancelReason) => void>;
  skips: CycleSkip[];
  abandoned: AbandonedProbe[];
}

const MAX_ERROR_NOTE = 200;

function inconclusive(name: string, note: string, durationMs: number): ScenarioResult {
  return { name, outcome: 'inconclusive', findings: [], requests: [], notes: [note], tokens: { sent: 0, billed: 0 }, durationMs };
}

/** Starts the cycle now, when it is due: its timeout and its startedAt count from here. */
export function startCycle(deps: CycleDeps, input: CycleInput): RunningCycle {
  const { target, runId } = input;
  const startedAt = deps.clock.now();
  const abort = new AbortController();
  const cycle: Cycle = { deps, input, signal: abort.signal, unstarted: new Set(input.due), cancellers: new Set(), skips: [], abandoned: [] };
  const cancel = (reason: CancelReason): void => { for (const c of cycle.cancellers) c(reason); };
  const timeoutTimer = deps.clock.setTimeout(() => {
    deps.logger.warn({ target: target.name, runId, timeoutMs: target.schedule.timeoutMs }, 'probe run timed out: aborting');
    abort.abort(new Error(`run timed out after ${formatDuration(target.schedule.timeoutMs)}`));
    cancel('timeout');
  }, target.schedule.timeoutMs);

  const result = (async (): Promise<CycleResult> => {
    let calls: CallResult[];
    try {
      calls = await Promise.all(input.due.map((s) => queued(cycle, s)));
    } finally {
      deps.clock.clearTimeout(timeoutTimer);
    }
    const now = deps.clock.now();
    for (const c of calls) if (c.kind === 'skipped') cycle.skips.push({ reason: c.reason, at: now, fields: { runId, scenario: c.scenario } });
    return { run: assembleRun(target, runId, startedAt, now, calls), skips: cycle.skips, abandoned: cycle.abandoned };
  })();
  return { cancel, result };
}

/** One scenario through the target's and the global queue; cancelled while waiting, it never runs. */
function queued(cycle: Cycle, scenario: string): Promise<CallResult> {
  const wait = new AbortController();
  let running = false;
  const cancel = (reason: CancelReason): void => { if (!running) wait.abort(new CancelledError(reason)); };
  cycle.cancellers.add(cancel);
  return cycle.input.queue.add(() => cycle.deps.globalQueue.add(() => {
    running = true;
    cycle.cancellers.delete(cancel);
    return callProbe(cycle, scenario);
  }, { signal: wait.signal }), { signal: wait.signal }).catch((err: unknown) => {
    const cancelled = err instanceof CancelledError ? err : wait.signal.reason instanceof CancelledError ? wait.signal.reason : undefined;
    if (cancelled === undefined) throw err;
    cycle.unstarted.delete(scenario);
    if (cancelled.reason === 'shutdown') return { kind: 'skipped', reason: 'shutdown', scenario } as const;
    return {
      kind: 'ran', run: undefined,
      results: [inconclusive(scenario, `timed out after ${formatDuration(cycle.input.target.schedule.timeoutMs)} before a probe slot was free (concurrency limits)`, 0)],
    } as const;
  });
}

async function callProbe(cycle: Cycle, scenario: string): Promise<CallResult> {
  const { deps, input: { target, budget, runId }, signal } = cycle;
  const { clock } = deps;
  const t0 = clock.now();
  if (signal.aborted) throw new CancelledError('timeout');
  const grant = budget.grant(scenario, [...cycle.unstarted], t0);
  cycle.unstarted.delete(scenario);
  if (budget.available(t0) <= 0) {
    // A skip, and recorded: the cycle did not establish this scenario (never a silent pass).
    cycle.skips.push({ reason: 'budget', at: t0, fields: { runId, scenario, neededTokens: budget.costEstimate(scenario) ?? 0, availableTokens: 0 } });
    return { kind: 'ran', run: undefined, results: [{ ...inconclusive(scenario, 'not run: the token budget for this hour is spent (the prober\'s limit, not the endpoint\'s fault)', 0), reason: 'budget' }] };
  }
  const lease = budget.reserve(grant);
  // Beyond its grant, the scenario may draw what the cycle's unstarted scenarios are not expected to need.
  const spare = (): number => budget.spare([...cycle.unstarted], cycle.input.due.length, clock.now());
  const moreBudget = {
    spare,
    take: (tokens: number): boolean => {
      if (tokens > spare()) return false;
      lease.grow(tokens);
      return true;
    },
  };
  const call = Promise.resolve().then(() => deps.probe({ target, scenarios: [scenario], runId, signal, tokenBudget: grant, moreBudget }));
  call.then((run) => {
    let spent = 0;
    for (const s of run.scenarios) {
      const c = costOf(s.tokens);
      spent += c;
      budget.noteCost(s.name, c);
    }
    lease.settle(spent, clock.now());
    deps.onSpend();
  }, () => { lease.settle(0, clock.now()); deps.onSpend(); });

  const settled = await settleWithinGrace(call, signal, clock, deps.graceMs);
  const durationMs = clock.now() - t0;
  const timedOut = `timed out after ${formatDuration(target.schedule.timeoutMs)}`;
  if (settled.kind === 'abandoned') {
    deps.logger.error({ target: target.name, runId, scenario, graceMs: deps.graceMs }, 'probe ignored its abort: abandoned (target held until it ends)');
    cycle.abandoned.push({ scenario, late: call.then((run) => run.scenarios.flatMap((s) => s.findings), () => []) });
    return { kind: 'ran', results: [inconclusive(scenario, `${timedOut}; the probe did not stop within ${formatDuration(deps.graceMs)} of its abort`, durationMs)], run: undefined };
  }
  if (settled.kind === 'error') {
    const message = settled.err instanceof Error ? settled.err.message : String(settled.err);
    deps.logger.error({ err: settled.err, target: target.name, runId, scenario }, 'probe threw (a bug in the probe: target faults should be outcomes)');
    return { kind: 'ran', results: [inconclusive(scenario, `probe error: ${message.slice(0, MAX_ERROR_NOTE)}`, durationMs)], run: undefined };
  }
  const run = settled.run;
  let results = run.scenarios.filter((s) => s.name === scenario);
  if (results.length === 0) results = [inconclusive(scenario, 'the probe returned no result for this scenario', durationMs)];
  if (settled.afterAbort) {
    // Findings made before the timeout stand; anything short of a finding was not established.
    results = results.map((s) => s.outcome === 'fail' ? s : {
      ...s, outcome: 'inconclusive' as const,
      notes: [...s.notes, `${timedOut}: isolation not established`],
    });
  }
  return { kind: 'ran', results, run };
}

type Settled =
  | { kind: 'ok'; run: ProbeRun; afterAbort: boolean }
  | { kind: 'error'; err: unknown; afterAbort: boolean }
  | { kind: 'abandoned' };

/** The call's result, or 'abandoned' if it has not ended `graceMs` after the signal aborted. */
function settleWithinGrace(call: Promise<ProbeRun>, signal: AbortSignal, clock: Clock, graceMs: number): Promise<Settled> {
  return new Promise<Settled>((resolve) => {
    let grace: unknown;
    const onAbort = (): void => { grace = clock.setTimeout(() => resolve({ kind: 'abandoned' }), graceMs); };
    call.then(
      (run) => resolve({ kind: 'ok', run, afterAbort: signal.aborted }),
      (err: unknown) => resolve({ kind: 'error', err, afterAbort: signal.aborted }),
    ).finally(() => {
      if (grace !== undefined) clock.clearTimeout(grace);
      signal.removeEventListener('abort', onAbort);
    });
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** The cycle's run from its calls: undefined when none ran; capacity and model from the probes that answered. */
function assembleRun(target: TargetConfig, runId: string, startedAt: number, finishedAt: number, calls: readonly CallResult[]): ProbeRun | undefined {
  const scenarios = calls.flatMap((c) => c.kind === 'ran' ? c.results : []);
  if (scenarios.length === 0) return undefined;
  const runs = calls.flatMap((c) => c.kind === 'ran' && c.run !== undefined ? [c.run] : []);
  const capacity: ProbeRun['capacity'] = {};
  for (const r of runs) {
    capacity.contextTokens ??= r.capacity.contextTokens;
    capacity.poolTokens ??= r.capacity.poolTokens;
    capacity.pageSize ??= r.capacity.pageSize;
    capacity.reservationPoolTokens ??= r.capacity.reservationPoolTokens;
    capacity.largestPoolTokens ??= r.capacity.largestPoolTokens;
  }
  for (const k of Object.keys(capacity) as (keyof typeof capacity)[]) if (capacity[k] === undefined) delete capacity[k];
  return {
    runId,
    target: target.name,
    baseUrl: target.baseUrl,
    model: runs.find((r) => r.model !== '')?.model ?? target.model ?? '',
    startedAt: new Date(startedAt).toISOString(),
    finishedAt: new Date(finishedAt).toISOString(),
    outcome: combineOutcomes(scenarios),
    scenarios,
    capacity,
    up: runs.some((r) => r.up),
  };
}
