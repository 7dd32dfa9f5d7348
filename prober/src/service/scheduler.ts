/**
 * Runs the probe against every configured target, forever, within bounds of time, tokens and concurrency.
 *
 * One loop per target. The first cycle starts after a random delay in [0, jitter) so targets do not fire
 * together; after that each cycle is due `interval + [0, jitter)` after the previous one was due (anchored to
 * when cycles were due, not when they ended, so slow cycles do not drift the schedule).
 *
 * A cycle runs every scenario of the target, one probe call per scenario, all under the same run id. Each
 * call holds a slot in the target's queue (`concurrency.per_target`) and in the global queue
 * (`concurrency.global`). The cycle's timeout counts from when it was due and covers waiting for slots:
 * with timeout < interval a cycle is over before the next one is due. When it hits, the cycle's AbortSignal
 * fires; probes get a short grace to hand back what they found (a finding made before the timeout is kept,
 * but a scenario that had not finished is never a pass: it is recorded inconclusive). A probe that ignores
 * its abort past the grace is abandoned: the cycle is recorded without it, and the target counts as busy
 * until it really ends (the next cycle is skipped with reason "overlap"), because two probes racing each
 * other on one endpoint would muddle both. Findings it returns later are still recorded and counted.
 *
 * Nothing is retried: a failure is an outcome. Runs that do not start are counted in
 * kvcanary_runs_skipped_total by reason: budget (see budget.ts), overlap (the previous cycle of the target
 * is still going), shutdown (queued when stop() was called).
 *
 * Time comes from an injected clock, so tests drive the schedule with fake timers.
 */
import { randomUUID } from 'node:crypto';
import PQueue from 'p-queue';
import type { Logger } from 'pino';
import { TokenBudget, WINDOW_MS, costOf } from './budget.js';
import { budgetWarning } from './cycle-cost.js';
import type { SkipRecord } from './server.js';
import { formatDuration, type ServiceConfig, type TargetConfig } from './config.js';
import { levelForSeverity } from './logger.js';
import type { Finding } from '../probe/findings.js';
import { forgetTarget, initTargetMetrics, observeFindings, observeRun, type Metrics, type SkipReason } from './metrics.js';
import type { ProbeFn } from '../probe/probe-fn.js';
import { combineOutcomes, type Outcome, type ProbeRun, type ScenarioResult } from '../probe/result.js';
import type { HealthReport, LoopState } from './server.js';
import type { Store } from './store.js';
import { dueScenarios } from './scenario-schedule.js';

export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Looks the timer functions up at call time, so vitest's fake timers apply to it too. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export interface SchedulerOptions {
  config: ServiceConfig;
  probe: ProbeFn;
  /** recordRun and addFindings are required; tokenSpend and latestPerTarget, when present, seed budgets at start. */
  store: Pick<Store, 'recordRun' | 'addFindings'> & Partial<Pick<Store, 'tokenSpend' | 'latestPerTarget'>>;
  metrics: Metrics;
  logger: Logger;
  /** @default systemClock */
  clock?: Clock;
  /** Source of jitter. @default Math.random */
  random?: () => number;
  /** Called after each cycle is recorded (the CLI prints findings from it). Errors are logged, not thrown. */
  onRun?: (run: ProbeRun) => void | Promise<void>;
  /** How long a probe may take to return partial results after its run's timeout aborted it. @default 5000 */
  abortGraceMs?: number;
  /** @default crypto.randomUUID */
  newRunId?: () => string;
}

export interface Scheduler {
  start(): void;
  /** Stops scheduling, cancels queued work (skipped: shutdown), and resolves once in-flight cycles are recorded. */
  stop(): Promise<void>;
  /** Applies a new (already validated) config; unchanged targets keep their timers, budgets and state. */
  reload(config: ServiceConfig): void;
  states(): LoopState[];
  health(): HealthReport;
  /** Resolves when no cycle is in flight. */
  idle(): Promise<void>;
}

interface Loop {
  target: TargetConfig;
  queue: PQueue;
  timer: unknown;
  /** When the next cycle is due (unix ms), while a timer is pending. */
  nextAt: number | undefined;
  /** When the last cycle was due: the schedule's anchor. */
  anchor: number | undefined;
  cycle: Promise<void> | undefined;
  cancelQueued: ((reason: 'timeout' | 'shutdown') => void) | undefined;
  abandoned: number;
  lastRunAt: string | undefined;
  lastOutcome: Outcome | undefined;
  removed: boolean;
  /** When each scenario last started (cost tiers: scenario-schedule.ts). */
  scenarioStarted: Map<string, number>;
  /** The sizes and limit the budget warning was last checked at. */
  budgetWarned?: string;
  /** Cycles (or scenarios of a cycle) not run, by reason, since this loop started; and the latest. */
  skipped: Record<string, number>;
  lastSkip?: SkipRecord;
}

type CallResult =
  | { kind: 'ran'; results: ScenarioResult[]; run: ProbeRun | undefined }
  | { kind: 'skipped'; reason: SkipReason };

class CancelledError extends Error {
  constructor(readonly reason: 'timeout' | 'shutdown') { super(reason); }
}

const MAX_ERROR_NOTE = 200;

function inconclusive(name: string, note: string, durationMs: number): ScenarioResult {
  return { name, outcome: 'inconclusive', findings: [], requests: [], notes: [note], tokens: { sent: 0, billed: 0 }, durationMs };
}

const sameJson = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

export function createScheduler(opts: SchedulerOptions): Scheduler {
  const clock = opts.clock ?? systemClock;
  const random = opts.random ?? Math.random;
  const graceMs = opts.abortGraceMs ?? 5000;
  const newRunId = opts.newRunId ?? randomUUID;
  const { metrics, logger, store } = opts;
  let config = opts.config;
  let started = false;
  let stopping = false;
  let stopped: Promise<void> | undefined;
  const globalQueue = new PQueue({ concurrency: config.concurrency.global });
  const loops = new Map<string, Loop>();
  /** Survive a target's removal and re-adding: what was spent in the last hour was still spent. */
  const budgets = new Map<string, TokenBudget>();

  const iso = (ms: number): string => new Date(ms).toISOString();

  function budgetOf(t: TargetConfig): TokenBudget {
    let b = budgets.get(t.name);
    if (b === undefined) { b = new TokenBudget(t.budget.tokensPerHour); budgets.set(t.name, b); }
    b.setLimit(t.budget.tokensPerHour);
    return b;
  }

  function showBudget(name: string): void {
    const b = budgets.get(name);
    if (b !== undefined && loops.get(name)?.removed === false) metrics.budgetRemaining.set({ target: name }, b.remaining(clock.now()));
  }

  function addLoop(t: TargetConfig): Loop {
    const loop: Loop = {
      target: t, queue: new PQueue({ concurrency: config.concurrency.perTarget }), timer: undefined, nextAt: undefined,
      anchor: undefined, cycle: undefined, cancelQueued: undefined, abandoned: 0, lastRunAt: undefined, lastOutcome: undefined,
      removed: false, scenarioStarted: new Map(), skipped: {},
    };
    loops.set(t.name, loop);
    budgetOf(t);
    initTargetMetrics(metrics, t.name, t.scenarios);
    showBudget(t.name);
    return loop;
  }

  for (const t of config.targets) addLoop(t);

  function schedule(loop: Loop): void {
    if (loop.timer !== undefined) clock.clearTimeout(loop.timer);
    const now = clock.now();
    const jitter = Math.floor(random() * loop.target.schedule.jitterMs);
    const due = loop.anchor === undefined ? now + jitter : Math.max(now, loop.anchor + loop.target.schedule.intervalMs + jitter);
    loop.nextAt = due;
    loop.timer = clock.setTimeout(() => trigger(loop), due - now);
  }

  function skip(loop: Loop, reason: SkipReason, fields: Record<string, unknown> = {}): void {
    metrics.runsSkipped.inc({ target: loop.target.name, reason });
    loop.skipped[reason] = (loop.skipped[reason] ?? 0) + 1;
    loop.lastSkip = {
      reason, at: iso(clock.now()),
      ...(typeof fields['neededTokens'] === 'number' ? { neededTokens: fields['neededTokens'] } : {}),
      ...(typeof fields['availableTokens'] === 'number' ? { availableTokens: fields['availableTokens'] } : {}),
      ...(typeof fields['scenario'] === 'string' ? { scenario: fields['scenario'] } : {}),
    };
    const level = reason === 'shutdown' ? 'info' : 'warn';
    logger[level]({ target: loop.target.name, reason, ...fields }, `probe run skipped (${reason})`);
  }

  function trigger(loop: Loop): void {
    loop.timer = undefined;
    loop.nextAt = undefined;
    if (stopping || loop.removed) return;
    const now = clock.now();
    loop.anchor = now;
    schedule(loop);
    const name = loop.target.name;
    if (loop.cycle !== undefined || loop.abandoned > 0) {
      skip(loop, 'overlap', { abandonedProbes: loop.abandoned });
      return;
    }
    const due = dueScenarios(loop.target, loop.scenarioStarted, now);
    if (due.length === 0) return;
    const budget = budgetOf(loop.target);
    const fit = budget.fits(due, now);
    showBudget(name);
    if (!fit.ok) {
      skip(loop, 'budget', {
        neededTokens: fit.cost,
        availableTokens: fit.available,
        tokensPerHour: budget.tokensPerHour,
        ...(fit.cost > budget.tokensPerHour ? { overLimit: 'one cycle costs more than the hourly budget: it runs at most once an hour' } : {}),
      });
      return;
    }
    for (const s of due) loop.scenarioStarted.set(s, now);
    const cycle = runCycle(loop, now, due).catch((err: unknown) => {
      // Only a bug in this file gets here: target faults are outcomes and the store/hook errors are caught.
      logger.error({ err, target: name }, 'probe cycle crashed');
    }).finally(() => {
      loop.cycle = undefined;
      loop.cancelQueued = undefined;
      retireIfDone(loop);
    });
    loop.cycle = cycle;
  }

  async function runCycle(loop: Loop, dueAt: number, due: readonly string[]): Promise<void> {
    const target = loop.target;
    const budget = budgetOf(target);
    const runId = newRunId();
    const abort = new AbortController();
    const unstarted = new Set(due);
    const cancellers = new Set<(reason: 'timeout' | 'shutdown') => void>();
    let recorded: (ok: boolean) => void = () => undefined;
    const recordedP = new Promise<boolean>((resolve) => { recorded = resolve; });
    const cancelQueued = (reason: 'timeout' | 'shutdown'): void => { for (const c of cancellers) c(reason); };
    loop.cancelQueued = cancelQueued;
    const timeoutTimer = clock.setTimeout(() => {
      logger.warn({ target: target.name, runId, timeoutMs: target.schedule.timeoutMs }, 'probe run timed out: aborting');
      abort.abort(new Error(`run timed out after ${formatDuration(target.schedule.timeoutMs)}`));
      cancelQueued('timeout');
    }, target.schedule.timeoutMs);

    async function callProbe(scenario: string): Promise<CallResult> {
      const now = clock.now();
      if (abort.signal.aborted) throw new CancelledError('timeout');
      const grant = budget.grant(scenario, [...unstarted], now);
      unstarted.delete(scenario);
      if (budget.available(now) <= 0) {
        // Counted as a skip, and recorded: the cycle did not establish this scenario (never a silent pass).
        skip(loop, 'budget', { runId, scenario, neededTokens: budget.costEstimate(scenario) ?? 0, availableTokens: 0 });
        return { kind: 'ran', run: undefined, results: [{ ...inconclusive(scenario, 'not run: the token budget for this hour is spent (the prober\'s limit, not the endpoint\'s fault)', 0), reason: 'budget' }] };
      }
      const lease = budget.reserve(grant);
      const t0 = now;
      let afterAbort = false;
      let abandoned = false;
      const call = Promise.resolve().then(() => opts.probe({ target, scenarios: [scenario], runId, signal: abort.signal, tokenBudget: grant }));
      call.then((run) => {
        let spent = 0;
        for (const s of run.scenarios) {
          const c = costOf(s.tokens);
          spent += c;
          budget.noteCost(s.name, c);
        }
        lease.settle(spent, clock.now());
        showBudget(target.name);
      }, () => { lease.settle(0, clock.now()); showBudget(target.name); });

      const settled = await new Promise<{ kind: 'ok'; run: ProbeRun } | { kind: 'error'; err: unknown } | { kind: 'abandoned' }>((resolve) => {
        let grace: unknown;
        const onAbort = (): void => { grace = clock.setTimeout(() => resolve({ kind: 'abandoned' }), graceMs); };
        call.then(
          (run) => { afterAbort = abort.signal.aborted; resolve({ kind: 'ok', run }); },
          (err: unknown) => { afterAbort = abort.signal.aborted; resolve({ kind: 'error', err }); },
        ).finally(() => {
          if (grace !== undefined) clock.clearTimeout(grace);
          abort.signal.removeEventListener('abort', onAbort);
        });
        if (abort.signal.aborted) onAbort();
        else abort.signal.addEventListener('abort', onAbort, { once: true });
      });
      const durationMs = clock.now() - t0;

      if (settled.kind === 'abandoned') {
        abandoned = true;
        loop.abandoned++;
        logger.error({ target: target.name, runId, scenario, graceMs }, 'probe ignored its abort: abandoned (target held until it ends)');
        call.then(async (run) => {
          const late = run.scenarios.flatMap((s) => s.findings);
          if (late.length > 0 && await recordedP) recordLateFindings(target.name, runId, late);
        }, () => undefined).finally(() => {
          if (abandoned) loop.abandoned--;
          retireIfDone(loop);
        });
        return { kind: 'ran', results: [inconclusive(scenario, `timed out after ${formatDuration(target.schedule.timeoutMs)}; the probe did not stop within ${formatDuration(graceMs)} of its abort`, durationMs)], run: undefined };
      }
      if (settled.kind === 'error') {
        const message = settled.err instanceof Error ? settled.err.message : String(settled.err);
        logger.error({ err: settled.err, target: target.name, runId, scenario }, 'probe threw (a bug in the probe: target faults should be outcomes)');
        return { kind: 'ran', results: [inconclusive(scenario, `probe error: ${message.slice(0, MAX_ERROR_NOTE)}`, durationMs)], run: undefined };
      }
      const run = settled.run;
      let results = run.scenarios.filter((s) => s.name === scenario);
      if (results.length === 0) results = [inconclusive(scenario, 'the probe returned no result for this scenario', durationMs)];
      if (afterAbort) {
        // Findings made before the timeout stand; anything short of a finding was not established.
        results = results.map((s) => s.outcome === 'fail' ? s : {
          ...s, outcome: 'inconclusive' as const,
          notes: [...s.notes, `timed out after ${formatDuration(target.schedule.timeoutMs)}: isolation not established`],
        });
      }
      return { kind: 'ran', results, run };
    }

    function queued(scenario: string): Promise<CallResult> {
      const wait = new AbortController();
      let running = false;
      const cancel = (reason: 'timeout' | 'shutdown'): void => { if (!running) wait.abort(new CancelledError(reason)); };
      cancellers.add(cancel);
      return loop.queue.add(() => globalQueue.add(() => {
        running = true;
        cancellers.delete(cancel);
        return callProbe(scenario);
      }, { signal: wait.signal }), { signal: wait.signal }).catch((err: unknown) => {
        const cancelled = err instanceof CancelledError ? err : wait.signal.reason instanceof CancelledError ? wait.signal.reason : undefined;
        if (cancelled === undefined) throw err;
        unstarted.delete(scenario);
        if (cancelled.reason === 'shutdown') return { kind: 'skipped', reason: 'shutdown' } as const;
        return {
          kind: 'ran', run: undefined,
          results: [inconclusive(scenario, `timed out after ${formatDuration(target.schedule.timeoutMs)} before a probe slot was free (concurrency limits)`, 0)],
        } as const;
      });
    }

    let calls: CallResult[];
    try {
      calls = await Promise.all(due.map(queued));
    } finally {
      clock.clearTimeout(timeoutTimer);
    }
    for (const c of calls) if (c.kind === 'skipped') skip(loop, c.reason, { runId });

    const scenarios = calls.flatMap((c) => c.kind === 'ran' ? c.results : []);
    if (scenarios.length === 0) { recorded(false); return; }
    const runs = calls.flatMap((c) => c.kind === 'ran' && c.run !== undefined ? [c.run] : []);
    const capacity: ProbeRun['capacity'] = {};
    for (const r of runs) {
      capacity.contextTokens ??= r.capacity.contextTokens;
      capacity.poolTokens ??= r.capacity.poolTokens;
      capacity.pageSize ??= r.capacity.pageSize;
    }
    for (const k of Object.keys(capacity) as (keyof typeof capacity)[]) if (capacity[k] === undefined) delete capacity[k];
    const run: ProbeRun = {
      runId,
      target: target.name,
      baseUrl: target.baseUrl,
      model: runs.find((r) => r.model !== '')?.model ?? target.model ?? '',
      startedAt: iso(dueAt),
      finishedAt: iso(clock.now()),
      outcome: combineOutcomes(scenarios),
      scenarios,
      capacity,
      up: runs.some((r) => r.up),
    };
    warnBudget(loop, run);
    recorded(await record(loop, run));
  }

  /** Once per target and size: the hourly budget cannot fit one cycle at the endpoint's advertised size. */
  function warnBudget(loop: Loop, run: ProbeRun): void {
    const key = `${run.capacity.contextTokens}/${run.capacity.poolTokens}/${loop.target.budget.tokensPerHour}`;
    if (loop.budgetWarned === key) return;
    loop.budgetWarned = key;
    const warning = budgetWarning(loop.target, run.capacity, 'at the endpoint\'s advertised size');
    if (warning !== undefined) logger.warn({ target: loop.target.name, tokensPerHour: loop.target.budget.tokensPerHour }, warning);
  }

  async function record(loop: Loop, run: ProbeRun): Promise<boolean> {
    let stored = true;
    try {
      store.recordRun(run);
    } catch (err) {
      stored = false;
      logger.error({ err, target: run.target, runId: run.runId }, 'could not store probe run (metrics and logs still carry it)');
    }
    observeRun(metrics, run);
    loop.lastRunAt = run.finishedAt;
    loop.lastOutcome = run.outcome;
    const findings = run.scenarios.flatMap((s) => s.findings);
    logger.info({
      target: run.target, runId: run.runId, outcome: run.outcome, up: run.up, findings: findings.length,
      scenarios: Object.fromEntries(run.scenarios.map((s) => [s.name, s.outcome])),
      durationMs: Date.parse(run.finishedAt) - Date.parse(run.startedAt),
    }, `probe run ${run.outcome}: ${run.target}`);
    for (const f of findings) logFinding(run.target, run.runId, f);
    if (opts.onRun !== undefined) {
      try {
        await opts.onRun(run);
      } catch (err) {
        logger.error({ err, target: run.target, runId: run.runId }, 'onRun hook failed');
      }
    }
    return stored;
  }

  function logFinding(target: string, runId: string, f: Finding): void {
    // Kind, target and severity only: the evidence (someone else's data, perhaps) stays in the store.
    logger[levelForSeverity(f.severity)]({ target, runId, scenario: f.scenario, kind: f.kind, severity: f.severity, chance: f.chance },
      `finding ${f.kind} (${f.severity}) on ${target}`);
  }

  function recordLateFindings(target: string, runId: string, findings: Finding[]): void {
    try {
      store.addFindings({ runId, target }, findings, iso(clock.now()));
    } catch (err) {
      logger.error({ err, target, runId }, 'could not store late findings');
    }
    observeFindings(metrics, target, findings);
    for (const f of findings) logFinding(target, runId, f);
  }

  function retireIfDone(loop: Loop): void {
    if (!loop.removed || loop.cycle !== undefined || loop.abandoned > 0) return;
    if (loops.get(loop.target.name) === loop) loops.delete(loop.target.name);
    forgetTarget(metrics, loop.target.name).catch((err: unknown) => logger.error({ err }, 'could not drop metrics of a removed target'));
  }

  function seedBudgets(): void {
    const now = clock.now();
    try {
      for (const s of store.tokenSpend?.(now - WINDOW_MS) ?? []) budgets.get(s.target)?.charge(costOf(s.tokens), s.at);
      for (const t of store.latestPerTarget?.() ?? []) {
        for (const s of t.scenarios) {
          budgets.get(t.target)?.noteCost(s.scenario, costOf(s.tokens));
          const at = Date.parse(s.at);
          if (Number.isFinite(at)) loops.get(t.target)?.scenarioStarted.set(s.scenario, at);
        }
      }
    } catch (err) {
      logger.error({ err }, 'could not read past token spend from the store; budgets start empty');
    }
  }

  function states(): LoopState[] {
    return [...loops.values()].filter((l) => !l.removed).map((l) => {
      const s: LoopState = {
        target: l.target.name,
        state: l.cycle !== undefined ? 'running' : stopping || !started ? 'stopped' : 'idle',
        abandoned: l.abandoned,
      };
      if (l.lastRunAt !== undefined) s.lastRunAt = l.lastRunAt;
      if (l.lastOutcome !== undefined) s.lastOutcome = l.lastOutcome;
      if (l.nextAt !== undefined) s.nextRunAt = iso(l.nextAt);
      if (Object.keys(l.skipped).length > 0) s.skipped = { ...l.skipped };
      if (l.lastSkip !== undefined) s.lastSkip = l.lastSkip;
      return s;
    });
  }

  return {
    start() {
      if (started) return;
      started = true;
      seedBudgets();
      for (const loop of loops.values()) {
        showBudget(loop.target.name);
        schedule(loop);
      }
      logger.info({ targets: [...loops.keys()] }, 'scheduler started');
    },

    stop() {
      stopped ??= (async () => {
        stopping = true;
        for (const loop of loops.values()) {
          if (loop.timer !== undefined) clock.clearTimeout(loop.timer);
          loop.timer = undefined;
          loop.nextAt = undefined;
          loop.cancelQueued?.('shutdown');
        }
        await Promise.all([...loops.values()].map((l) => l.cycle));
        logger.info('scheduler stopped');
      })();
      return stopped;
    },

    reload(next) {
      config = next;
      globalQueue.concurrency = next.concurrency.global;
      const names = new Set(next.targets.map((t) => t.name));
      for (const loop of loops.values()) {
        if (names.has(loop.target.name) || loop.removed) continue;
        loop.removed = true;
        if (loop.timer !== undefined) clock.clearTimeout(loop.timer);
        loop.timer = undefined;
        loop.nextAt = undefined;
        logger.info({ target: loop.target.name }, 'target removed from config');
        retireIfDone(loop);
      }
      for (const t of next.targets) {
        const loop = loops.get(t.name);
        if (loop === undefined) {
          const added = addLoop(t);
          logger.info({ target: t.name }, 'target added');
          if (started && !stopping) schedule(added);
          continue;
        }
        loop.queue.concurrency = next.concurrency.perTarget;
        const revived = loop.removed;
        loop.removed = false;
        if (!revived && sameJson(loop.target, t)) continue;
        const scheduleChanged = !sameJson(loop.target.schedule, t.schedule);
        loop.target = t;
        budgetOf(t);
        initTargetMetrics(metrics, t.name, t.scenarios);
        showBudget(t.name);
        if (started && !stopping && (scheduleChanged || revived)) schedule(loop);
        logger.info({ target: t.name, scheduleChanged }, 'target config changed');
      }
    },

    states,

    health() {
      return { status: stopping ? 'stopping' : 'ok', loops: states() };
    },

    async idle() {
      while ([...loops.values()].some((l) => l.cycle !== undefined)) {
        await Promise.all([...loops.values()].map((l) => l.cycle));
      }
    },
  };
}
