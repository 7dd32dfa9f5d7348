/**
 * Runs the probe against every configured target, forever, within bounds of time, tokens and concurrency:
 * one loop per target (target-loop.ts: when cycles are due, whether one may start), budgets
 * (target-budgets.ts), the cycle itself (cycle-runner.ts) and what is done with its result (run-recording.ts).
 *
 * A probe that ignored its abort and was abandoned keeps its target busy until it really ends: the next cycles
 * are skipped with reason "overlap", because two probes racing each other on one endpoint would muddle both.
 * Findings it returns later are still recorded and counted.
 *
 * Runs that do not start are counted in kvcanary_runs_skipped_total by reason, and stored (`report` lists
 * them): budget (see budget.ts), overlap (the previous cycle of the target is still going), shutdown (queued
 * when stop() was called).
 *
 * Time comes from an injected clock, so tests drive the schedule with fake timers.
 */
import { randomUUID } from 'node:crypto';
import PQueue from 'p-queue';
import type { Logger } from 'pino';
import { systemClock, type Clock } from './clock.js';
import type { ServiceConfig, TargetConfig } from './config.js';
import { startCycle, type CycleResult } from './cycle-runner.js';
import { forgetTarget, initTargetMetrics, observeVerdict, type Metrics, type SkipReason } from './metrics.js';
import type { ProbeFn } from '../probe/probe-fn.js';
import type { ProbeRun } from '../probe/result.js';
import { createRecorder } from './run-recording.js';
import type { HealthReport, LoopState } from './server.js';
import type { Store } from './store.js';
import { createTargetBudgets, sizeBudget } from './target-budgets.js';
import { admit, createLoopTimers, holdForAbandoned, loopState, loopVerdict, newLoop, noteResults, noteSkip, skipRecord, type Loop } from './target-loop.js';

export { systemClock, type Clock } from './clock.js';

export interface SchedulerOptions {
  config: ServiceConfig;
  probe: ProbeFn;
  /**
   * recordRun and addFindings are required; tokenSpend and latestPerTarget, when present, seed budgets at start;
   * recordSkip, when present, stores every skip.
   */
  store: Pick<Store, 'recordRun' | 'addFindings'> & Partial<Pick<Store, 'tokenSpend' | 'latestPerTarget' | 'recordSkip'>>;
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

const sameJson = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

export function createScheduler(opts: SchedulerOptions): Scheduler {
  const clock = opts.clock ?? systemClock;
  const newRunId = opts.newRunId ?? randomUUID;
  const { metrics, logger, store } = opts;
  let config = opts.config;
  let started = false;
  let stopping = false;
  let stopped: Promise<void> | undefined;
  const globalQueue = new PQueue({ concurrency: config.concurrency.global });
  const loops = new Map<string, Loop>();
  const budgets = createTargetBudgets({ metrics, clock, logger, configured: (name) => loops.get(name)?.removed === false });
  const recorder = createRecorder({ store, metrics, logger, clock, ...(opts.onRun === undefined ? {} : { onRun: opts.onRun }) });
  const timers = createLoopTimers(clock, opts.random ?? Math.random, (loop) => trigger(loop));
  const cycleDeps = { probe: opts.probe, clock, logger, graceMs: opts.abortGraceMs ?? 5000, globalQueue };

  function addLoop(t: TargetConfig): Loop {
    const loop = newLoop(t, config.concurrency.perTarget);
    loops.set(t.name, loop);
    budgets.of(t);
    initTargetMetrics(metrics, t.name, t.scenarios);
    budgets.show(t.name);
    showVerdict(loop);
    return loop;
  }

  for (const t of config.targets) addLoop(t);

  function skip(loop: Loop, reason: SkipReason, fields: Record<string, unknown>, at = clock.now()): void {
    const record = skipRecord(reason, new Date(at).toISOString(), fields);
    noteSkip(loop, record);
    recorder.recordSkip(loop.target.name, record, fields);
  }

  /** The target's standing, as the gauge shows it: refreshed at every due time and after every cycle (staleness needs no cycle). */
  function showVerdict(loop: Loop): void {
    if (!loop.removed) observeVerdict(metrics, loop.target.name, loopVerdict(loop, clock.now()).outcome);
  }

  function trigger(loop: Loop): void {
    if (stopping || loop.removed) return;
    const now = clock.now();
    timers.anchor(loop, now);
    showVerdict(loop);
    const admission = admit(loop, budgets.of(loop.target), now);
    if (admission.kind === 'run' || (admission.kind === 'skip' && admission.reason === 'budget')) budgets.show(loop.target.name);
    if (admission.kind === 'nothing-due') return;
    if (admission.kind === 'skip') { skip(loop, admission.reason, admission.fields); return; }
    for (const s of admission.due) loop.scenarioStarted.set(s, now);
    const name = loop.target.name;
    const running = startCycle({ ...cycleDeps, onSpend: () => budgets.show(name) },
      { target: loop.target, queue: loop.queue, budget: budgets.of(loop.target), runId: newRunId(), due: admission.due });
    loop.cancelQueued = running.cancel;
    loop.cycle = running.result.then((result) => finishCycle(loop, result)).catch((err: unknown) => {
      // Only a bug in the scheduler gets here: target faults are outcomes and the store/hook errors are caught.
      logger.error({ err, target: name }, 'probe cycle crashed');
    }).finally(() => {
      loop.cycle = undefined;
      loop.cancelQueued = undefined;
      retireIfDone(loop);
    });
  }

  /** Counts the cycle's skips, records its run, and holds the target while its abandoned probes still run. */
  async function finishCycle(loop: Loop, result: CycleResult): Promise<void> {
    for (const s of result.skips) skip(loop, s.reason, s.fields, s.at);
    const { run } = result;
    let stored: (ok: boolean) => void = () => undefined;
    const storedP = new Promise<boolean>((resolve) => { stored = resolve; });
    holdForAbandoned(loop, result.abandoned, async (findings) => {
      if (findings.length > 0 && await storedP && run !== undefined) recorder.recordLateFindings(loop.target.name, run.runId, findings);
    }, () => retireIfDone(loop));
    if (run === undefined) { stored(false); return; }
    sizeBudget(loop, run, budgets, logger);
    loop.lastRunAt = run.finishedAt;
    loop.lastOutcome = run.outcome;
    noteResults(loop, run.scenarios, run.finishedAt);
    showVerdict(loop);
    stored(await recorder.record(run));
  }

  function retireIfDone(loop: Loop): void {
    if (!loop.removed || loop.cycle !== undefined || loop.abandoned > 0) return;
    if (loops.get(loop.target.name) === loop) loops.delete(loop.target.name);
    forgetTarget(metrics, loop.target.name).catch((err: unknown) => logger.error({ err }, 'could not drop metrics of a removed target'));
  }

  function removeLoop(loop: Loop): void {
    loop.removed = true;
    timers.cancel(loop);
    // A discovered target (named SOURCE/HOST:PORT; configured names cannot hold '/') leaves when its source
    // stops listing it (or its discover entry leaves the config): say so, not "removed from config".
    if (loop.target.name.includes('/')) logger.info({ target: loop.target.name }, 'target removed by discovery: its source no longer lists it');
    else logger.info({ target: loop.target.name }, 'target removed from config');
    retireIfDone(loop);
  }

  /** A target still (or again) configured: takes its new config, rescheduled only if its schedule changed or it was revived. */
  function updateLoop(loop: Loop, t: TargetConfig): void {
    loop.queue.concurrency = config.concurrency.perTarget;
    const revived = loop.removed;
    loop.removed = false;
    if (!revived && sameJson(loop.target, t)) return;
    const scheduleChanged = !sameJson(loop.target.schedule, t.schedule);
    loop.target = t;
    budgets.of(t);
    initTargetMetrics(metrics, t.name, t.scenarios);
    budgets.show(t.name);
    showVerdict(loop);
    if (started && !stopping && (scheduleChanged || revived)) timers.schedule(loop);
    logger.info({ target: t.name, scheduleChanged }, 'target config changed');
  }

  const states = (): LoopState[] => [...loops.values()].filter((l) => !l.removed).map((l) => loopState(l, started && !stopping, clock.now()));

  return {
    start() {
      if (started) return;
      started = true;
      budgets.seed(store, (target, scenario, at, latest) => {
        const loop = loops.get(target);
        loop?.scenarioStarted.set(scenario, at);
        loop?.scenarioLatest.set(scenario, { scenario, outcome: latest.outcome, at: latest.at });
      });
      for (const loop of loops.values()) {
        budgets.show(loop.target.name);
        showVerdict(loop);
        timers.schedule(loop);
      }
      logger.info({ targets: [...loops.keys()] }, 'scheduler started');
    },

    stop() {
      stopped ??= (async () => {
        stopping = true;
        for (const loop of loops.values()) {
          timers.cancel(loop);
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
      for (const loop of loops.values()) if (!names.has(loop.target.name) && !loop.removed) removeLoop(loop);
      for (const t of next.targets) {
        const loop = loops.get(t.name);
        if (loop !== undefined) { updateLoop(loop, t); continue; }
        const added = addLoop(t);
        logger.info({ target: t.name }, 'target added');
        if (started && !stopping) timers.schedule(added);
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
