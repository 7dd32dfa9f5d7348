/**
 * One target's loop in the scheduler: its state (queue, timer, the cycle in flight, abandoned probes, what it
 * skipped), when its next cycle is due, and whether a due cycle may start.
 *
 * The first cycle is due after a random delay in [0, jitter) so targets do not fire together; after that each
 * is due `interval + [0, jitter)` after the previous one was due (the anchor), not after it ended, so slow
 * cycles do not drift the schedule.
 */
import PQueue from 'p-queue';
import type { TokenBudget } from './budget.js';
import type { Clock } from './clock.js';
import type { TargetConfig } from './config.js';
import type { SkipReason } from './metrics.js';
import type { Finding } from '../probe/findings.js';
import type { RunOutcome } from '../probe/result.js';
import type { AbandonedProbe } from './cycle-runner.js';
import { dueScenarios, freshnessMs } from './scenario-schedule.js';
import { targetVerdict, type ScenarioStanding, type TargetVerdict } from './target-verdict.js';
import type { LoopState, SkipRecord } from './server.js';

export type CancelReason = 'timeout' | 'shutdown';

export interface Loop {
  target: TargetConfig;
  queue: PQueue;
  timer: unknown;
  /** When the next cycle is due (unix ms), while a timer is pending. */
  nextAt: number | undefined;
  /** When the last cycle was due: the schedule's anchor. */
  anchor: number | undefined;
  cycle: Promise<void> | undefined;
  cancelQueued: ((reason: CancelReason) => void) | undefined;
  abandoned: number;
  lastRunAt: string | undefined;
  lastOutcome: RunOutcome | undefined;
  removed: boolean;
  /** When each scenario last started (cost tiers: scenario-schedule.ts). */
  scenarioStarted: Map<string, number>;
  /** Each scenario's latest result: what the target's standing is judged on (target-verdict.ts). */
  scenarioLatest: Map<string, ScenarioStanding>;
  /** The sizes and limit the budget warning was last checked at. */
  budgetWarned?: string;
  /** Cycles (or scenarios of a cycle) not run, by reason, since this loop started; and the latest. */
  skipped: Record<string, number>;
  lastSkip?: SkipRecord;
}

export function newLoop(target: TargetConfig, perTargetConcurrency: number): Loop {
  return {
    target, queue: new PQueue({ concurrency: perTargetConcurrency }), timer: undefined, nextAt: undefined,
    anchor: undefined, cycle: undefined, cancelQueued: undefined, abandoned: 0, lastRunAt: undefined, lastOutcome: undefined,
    removed: false, scenarioStarted: new Map(), scenarioLatest: new Map(), skipped: {},
  };
}

/** When the next cycle is due: jitter after now for a loop never run, else interval + jitter after the anchor (never in the past). */
export function nextDue(loop: Pick<Loop, 'anchor' | 'target'>, now: number, random: () => number): number {
  const jitter = Math.floor(random() * loop.target.schedule.jitterMs);
  return loop.anchor === undefined ? now + jitter : Math.max(now, loop.anchor + loop.target.schedule.intervalMs + jitter);
}

export interface LoopTimers {
  /** (Re)arms the loop's timer for its next due time. */
  schedule(loop: Loop): void;
  /** Disarms it: no cycle is due until the next schedule(). */
  cancel(loop: Loop): void;
  /** A cycle is due now: it becomes the anchor, and the next one is scheduled from it. */
  anchor(loop: Loop, now: number): void;
}

/** `onDue` runs when a loop's timer fires (the timer already cleared). */
export function createLoopTimers(clock: Clock, random: () => number, onDue: (loop: Loop) => void): LoopTimers {
  const timers: LoopTimers = {
    schedule(loop) {
      if (loop.timer !== undefined) clock.clearTimeout(loop.timer);
      const now = clock.now();
      const due = nextDue(loop, now, random);
      loop.nextAt = due;
      loop.timer = clock.setTimeout(() => {
        loop.timer = undefined;
        loop.nextAt = undefined;
        onDue(loop);
      }, due - now);
    },
    cancel(loop) {
      if (loop.timer !== undefined) clock.clearTimeout(loop.timer);
      loop.timer = undefined;
      loop.nextAt = undefined;
    },
    anchor(loop, now) {
      loop.anchor = now;
      timers.schedule(loop);
    },
  };
  return timers;
}

/** Whether a due cycle starts, and if not why: the decision only; the caller counts and logs the skip. */
export type Admission =
  | { kind: 'run'; due: string[] }
  | { kind: 'nothing-due' }
  | { kind: 'skip'; reason: SkipReason; fields: Record<string, unknown> };

export function admit(loop: Loop, budget: TokenBudget, now: number): Admission {
  if (loop.cycle !== undefined || loop.abandoned > 0) {
    return { kind: 'skip', reason: 'overlap', fields: { abandonedProbes: loop.abandoned } };
  }
  const due = dueScenarios(loop.target, loop.scenarioStarted, now);
  if (due.length === 0) return { kind: 'nothing-due' };
  const fit = budget.fits(due, now);
  if (fit.ok) return { kind: 'run', due };
  return {
    kind: 'skip', reason: 'budget',
    fields: {
      neededTokens: fit.cost,
      availableTokens: fit.available,
      tokensPerHour: budget.tokensPerHour,
      ...(fit.cost > budget.tokensPerHour ? { overLimit: 'one cycle costs more than the hourly budget: it runs at most once an hour' } : {}),
    },
  };
}

/** What the status page shows of a skip: reason, time, and for the budget what was needed against what was left. */
export function skipRecord(reason: SkipReason, at: string, fields: Record<string, unknown>): SkipRecord & { reason: SkipReason } {
  return {
    reason, at,
    ...(typeof fields['neededTokens'] === 'number' ? { neededTokens: fields['neededTokens'] } : {}),
    ...(typeof fields['availableTokens'] === 'number' ? { availableTokens: fields['availableTokens'] } : {}),
    ...(typeof fields['scenario'] === 'string' ? { scenario: fields['scenario'] } : {}),
  };
}

export function noteSkip(loop: Loop, skip: SkipRecord): void {
  loop.skipped[skip.reason] = (loop.skipped[skip.reason] ?? 0) + 1;
  loop.lastSkip = skip;
}

/**
 * Holds the loop busy (its next cycles skip as overlap) until each abandoned probe really ends: two probes racing
 * each other on one endpoint would muddle both. `late` gets the findings each returns; `released` runs after each.
 */
export function holdForAbandoned(loop: Loop, abandoned: readonly AbandonedProbe[], late: (findings: Finding[]) => Promise<void>, released: () => void): void {
  for (const a of abandoned) {
    loop.abandoned++;
    a.late.then(late).finally(() => {
      loop.abandoned--;
      released();
    });
  }
}

/** The target's standing by the overall rule, from each scenario's latest result and its freshness. */
export function loopVerdict(l: Loop, now: number): TargetVerdict {
  return targetVerdict({ scenarios: l.target.scenarios, latest: [...l.scenarioLatest.values()], freshForMs: (s) => freshnessMs(l.target, s), now });
}

/** Each scenario's latest result, from a finished run (a scenario of the run replaces its older result). */
export function noteResults(l: Loop, scenarios: readonly { name: string; outcome: ScenarioStanding['outcome'] }[], at: string): void {
  for (const s of scenarios) l.scenarioLatest.set(s.name, { scenario: s.name, outcome: s.outcome, at });
}

/** The loop as /healthz and the status page show it; `scheduling` is false before start() and once stopping. */
export function loopState(l: Loop, scheduling: boolean, now: number): LoopState {
  const s: LoopState = {
    target: l.target.name,
    state: l.cycle !== undefined ? 'running' : scheduling ? 'idle' : 'stopped',
    abandoned: l.abandoned,
    verdict: loopVerdict(l, now),
  };
  if (l.lastRunAt !== undefined) s.lastRunAt = l.lastRunAt;
  if (l.lastOutcome !== undefined) s.lastOutcome = l.lastOutcome;
  if (l.nextAt !== undefined) s.nextRunAt = new Date(l.nextAt).toISOString();
  if (Object.keys(l.skipped).length > 0) s.skipped = { ...l.skipped };
  if (l.lastSkip !== undefined) s.lastSkip = l.lastSkip;
  return s;
}
