/**
 * The single-node engine: admission, a KV pool, the model and the scheduler on one thread.
 * A request is checked against both limits before anything is allocated; an admitted one waits for
 * pages, runs, and releases its pages the moment it finishes or is aborted.
 */
import { checkAdmission } from './admission.js';
import { defenseBlocks } from './defenses.js';
import { systemClock, type Clock } from './clock.js';
import type { EngineConfig } from './config.js';
import type { Engine, EngineEvent, EngineInfo, EngineStats, GenerationRequest, RequestHandle, SubmitResult } from './engine.js';
import { EventChannel } from './event-channel.js';
import { ExposureLog } from './exposure-log.js';
import { KvPool } from './kv-pool.js';
import { InductionModel } from './model.js';
import { PrefixCache, prefixCacheOptions } from './prefix-cache.js';
import { Scheduler } from './scheduler.js';
import { Sequence } from './sequence.js';

export interface EngineDeps {
  clock?: Clock;
  /** How steps are deferred. @default setImmediate */
  defer?: (fn: () => void) => void;
}

export function createSingleNodeEngine(config: EngineConfig, deps: EngineDeps = {}): Engine {
  const clock = deps.clock ?? systemClock;
  let cache: PrefixCache | undefined;
  const pool = new KvPool({
    numPages: config.numPages,
    pageSize: config.pageSize,
    freeList: config.freeList,
    zeroOnRelease: config.zeroOnRelease,
    onReuse: (page) => cache?.invalidate(page),
    isCached: (page) => cache?.holds(page) === true,
  });
  if (config.prefixCache) {
    cache = new PrefixCache(pool.memory, prefixCacheOptions(config, pool.pageSize, pool.numPages));
  }
  const exposures = new ExposureLog(clock);
  const model = new InductionModel(pool.memory, {
    config: config.model,
    kernel: config.kernel,
    attention: config.attention,
    onForeignRead: (reader, read) => {
      // A same-tenant read of a page cached for the same tokens is the cache working, not a leak.
      const foreign = cache === undefined ? read : cache.screen(reader, read);
      if (foreign !== undefined) exposures.record(reader, foreign);
    },
  });
  const scheduler = new Scheduler(
    pool,
    model,
    { chunkTokens: config.chunkTokens, decodePositionsPerStep: config.decodePositionsPerStep, maxRunning: config.maxRunning },
    deps.defer,
    cache,
  );
  const rejectedTotal: Record<string, number> = {};
  const startedAt = Math.floor(clock.now() / 1000);
  let nextId = 1;

  const info: EngineInfo = {
    mode: 'single',
    preset: config.preset,
    modelId: config.modelId,
    contextTokens: config.contextTokens,
    poolTokens: pool.capacityTokens,
    pageSize: pool.pageSize,
    numPages: pool.numPages,
    freeList: pool.policy,
    zeroOnRelease: pool.zeroOnRelease,
    prefixCache: cache !== undefined,
    chunkTokens: config.chunkTokens,
    maxRunning: config.maxRunning,
    kernel: model.kernel.name,
    startedAt,
    faults: [...config.faults],
    defenses: [...config.defenses],
  };

  function submit(request: GenerationRequest): SubmitResult {
    const promptTokens = request.promptTokens.length;
    if (promptTokens < 1) throw new RangeError('a request needs at least one prompt token (BOS)');
    if (!Number.isInteger(request.maxTokens) || request.maxTokens < 1) throw new RangeError('maxTokens must be an integer >= 1');
    const rejection = checkAdmission(
      { promptTokens, maxTokens: request.maxTokens, promptKind: request.promptKind ?? 'prompt' },
      { contextTokens: config.contextTokens, poolTokens: pool.capacityTokens },
    );
    if (rejection !== undefined) {
      rejectedTotal[rejection.code] = (rejectedTotal[rejection.code] ?? 0) + 1;
      return { ok: false, rejection };
    }
    if (scheduler.waitingCount >= config.maxWaiting) {
      rejectedTotal['engine_overloaded'] = (rejectedTotal['engine_overloaded'] ?? 0) + 1;
      return {
        ok: false,
        overloaded: { code: 'engine_overloaded', message: `The engine has ${scheduler.waitingCount} requests waiting; try again later.` },
      };
    }
    const id = nextId++;
    let seq: Sequence | undefined;
    const channel = new EventChannel<EngineEvent>(() => {
      if (seq !== undefined) scheduler.abort(seq);
    });
    seq = new Sequence(id, request, channel);
    const admitted = seq;
    const handle: RequestHandle = {
      id,
      promptTokens,
      get cachedTokens() {
        return cache === undefined ? undefined : admitted.cachedTokens;
      },
      events: channel,
      abort: () => scheduler.abort(seq),
    };
    scheduler.enqueue(seq);
    return { ok: true, request: handle };
  }

  function stats(): EngineStats {
    const { prefilling, pendingTokens } = scheduler.prefillState();
    const c = scheduler.counters;
    const prefix = cache?.stats();
    const poolStats = pool.stats();
    return {
      waiting: scheduler.waitingCount,
      running: scheduler.runningCount,
      prefilling,
      prefillTokensPending: pendingTokens,
      pool: poolStats,
      promptTokensTotal: c.promptTokensTotal,
      generationTokensTotal: c.generationTokensTotal,
      finishedTotal: { ...c.finishedTotal },
      rejectedTotal: { ...rejectedTotal },
      foreignPageReadsTotal: exposures.total,
      steps: c.steps,
      ...(prefix !== undefined ? { prefixCache: prefix } : {}),
      defenseBlocks: defenseBlocks({ 'zero-on-release': poolStats.zeroedPagesTotal, ...prefix?.blocked }),
    };
  }

  return {
    info: () => ({ ...info }),
    submit,
    stats,
    exposures: () => exposures.snapshot(),
    checkInvariants: () => pool.checkInvariants(),
    ...(cache !== undefined ? { flushPrefixCache: () => (cache as PrefixCache).flush() } : {}),
    close: async () => scheduler.close(),
  };
}
