/**
 * The disaggregated engine's router, on the main thread: the Engine the HTTP server talks to, in front
 * of a prefill worker and a decode worker (worker threads).
 *
 * The router sends each admitted request to both workers under one room id (the request id). Decode
 * reserves the pages for prompt + max_tokens and bootstraps prefill with them over a direct channel;
 * prefill computes the prompt's KV and writes it straight into decode's pool memory (a SharedArrayBuffer
 * both attach to: a one-sided write, like RDMA), then signals completion; decode streams the output back
 * through the router.
 *
 * Admission here checks what the router can know without asking a worker: the context limit, and that the
 * reservation can ever fit decode's pool. The prefill pool is prefill's business (prefill-worker.ts), unless
 * the `reject-before-bootstrap` defense is on: then the router checks it too and answers 400 before any
 * bootstrap, allocation or transfer.
 *
 * Ground truth: decode reports every attention read of another request's data; the router keeps the
 * exposure log. stats() reads counters the workers publish in shared memory; checkInvariants() asks the
 * workers synchronously (sync-call.ts).
 */
import type { KernelName } from '../attention/kernel.js';
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';
import { checkAdmission } from '../admission.js';
import { defenseBlocks } from '../defenses.js';
import { systemClock, type Clock } from '../clock.js';
import type { EngineConfig } from '../config.js';
import type { Engine, EngineEvent, EngineInfo, EngineStats, GenerationRequest, RequestHandle, SubmitResult } from '../engine.js';
import { EventChannel } from '../event-channel.js';
import { ExposureLog } from '../exposure-log.js';
import { KvMemory } from '../kv-memory.js';
import type { KvPoolStats } from '../kv-pool.js';
import type { FromDecode, FromPrefill, ToDecode, ToPrefill, WorkerInit, WorkerRole } from './protocol.js';
import { StatsBlock } from './stats-block.js';
import { callSync, createReplyArea } from './sync-call.js';

export interface DisaggregatedDeps {
  clock?: Clock;
  /** Worker failures. @default stderr */
  log?: (line: string) => void;
}

interface Live {
  channel: EventChannel<EngineEvent>;
  promptTokens: number;
  /** Prompt tokens decode took from its prefix cache (undefined when the cache is off). */
  cachedTokens: number | undefined;
}

interface WorkerHandle {
  role: WorkerRole;
  worker: Worker;
  stats: StatsBlock;
  reply: SharedArrayBuffer;
}

const WORKER_ENTRY = new URL('./worker-entry.js', import.meta.url);

function spawn(role: WorkerRole, config: EngineConfig, decodeMemory: WebAssembly.Memory, peer: MessagePort): WorkerHandle {
  const stats = StatsBlock.create();
  const reply = createReplyArea();
  const init: WorkerInit = { role, config, decodeMemory, peer, stats: stats.buffer, reply };
  const worker = new Worker(WORKER_ENTRY, { workerData: init, transferList: [peer] });
  return { role, worker, stats, reply };
}

function ready(handle: WorkerHandle): Promise<FromDecode | FromPrefill> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: FromDecode | FromPrefill): void => {
      if (m.t !== 'ready') return;
      cleanup();
      resolve(m);
    };
    const onError = (err: Error): void => {
      cleanup();
      reject(new Error(`the ${handle.role} worker failed to start: ${err.message}`, { cause: err }));
    };
    const onExit = (code: number): void => {
      cleanup();
      reject(new Error(`the ${handle.role} worker exited with code ${code} while starting`));
    };
    const cleanup = (): void => {
      handle.worker.off('message', onMessage);
      handle.worker.off('error', onError);
      handle.worker.off('exit', onExit);
    };
    handle.worker.on('message', onMessage);
    handle.worker.once('error', onError);
    handle.worker.once('exit', onExit);
  });
}

function poolStats(s: StatsBlock): KvPoolStats {
  return {
    numPages: s.get('poolNumPages'),
    pageSize: s.get('poolPageSize'),
    capacityTokens: s.get('poolNumPages') * s.get('poolPageSize'),
    freePages: s.get('poolFreePages'),
    usedPages: s.get('poolUsedPages'),
    allocatedPagesTotal: s.get('poolAllocatedPagesTotal'),
    releasedPagesTotal: s.get('poolReleasedPagesTotal'),
    tables: s.get('poolTables'),
    pendingReleasePages: s.get('poolPendingReleasePages'),
    parkedPagesTotal: s.get('poolParkedPagesTotal'),
    zeroedPagesTotal: s.get('poolZeroedPagesTotal'),
  };
}

export async function createDisaggregatedEngine(config: EngineConfig, deps: DisaggregatedDeps = {}): Promise<Engine> {
  if (config.mode !== 'disaggregated' || config.disaggregated === undefined) throw new Error('createDisaggregatedEngine needs a disaggregated configuration');
  const d = config.disaggregated;
  // Cached prompt tokens are reported whenever a prefix can be reused, through either path: pages shared by
  // the prefix cache and pages loaded from the host tier both spare prefill (SGLang's cached_tokens count
  // HiCache hits, vLLM's count a KV connector's).
  const reportsCached = config.prefixCache || d?.hostOffload === true;
  const clock = deps.clock ?? systemClock;
  const log = deps.log ?? ((line: string) => process.stderr.write(line + '\n'));
  const decodeMemory = KvMemory.create({ numPages: d.decodeNumPages, pageSize: config.pageSize });
  const { port1, port2 } = new MessageChannel();
  const decode = spawn('decode', config, decodeMemory.wasmMemory as WebAssembly.Memory, port1);
  const prefill = spawn('prefill', config, decodeMemory.wasmMemory as WebAssembly.Memory, port2);
  let kernel: KernelName = 'js';
  try {
    const [decodeReady] = await Promise.all([ready(decode), ready(prefill)]);
    if (decodeReady.t === 'ready' && 'kernel' in decodeReady) kernel = decodeReady.kernel;
  } catch (err) {
    await Promise.all([decode.worker.terminate(), prefill.worker.terminate()]);
    throw err;
  }

  const exposures = new ExposureLog(clock);
  const live = new Map<number, Live>();
  const rejectedTotal: Record<string, number> = {};
  const finishedTotal: Record<'length' | 'aborted' | 'error', number> = { length: 0, aborted: 0, error: 0 };
  const rejectBeforeBootstrap = config.defenses.includes('reject-before-bootstrap');
  let rejectedBeforeBootstrap = 0;
  let nextId = 1;
  let closed = false;
  let broken: string | undefined;

  const toDecode = (m: ToDecode): void => decode.worker.postMessage(m);
  const toPrefill = (m: ToPrefill): void => prefill.worker.postMessage(m);

  function endLive(id: number, event: Extract<EngineEvent, { type: 'end' }>): void {
    const entry = live.get(id);
    if (entry === undefined) return;
    live.delete(id);
    entry.channel.push(event);
    entry.channel.close();
  }

  decode.worker.on('message', (m: FromDecode) => {
    if (m.t !== 'events') {
      if (m.t === 'error') log(`kvcanary engine: decode worker: ${m.message}`);
      return;
    }
    for (const e of m.events) {
      if (e.k === 'foreign') exposures.record(e.reader, { pages: e.pages, writers: e.writers });
      else if (e.k === 'token') live.get(e.id)?.channel.push({ type: 'token', token: e.token });
      else if (e.k === 'cached') {
        const entry = live.get(e.id);
        if (entry !== undefined) entry.cachedTokens = e.tokens;
      }
      else if (live.has(e.id)) {
        finishedTotal[e.reason]++;
        endLive(e.id, {
          type: 'end',
          reason: e.reason,
          promptTokens: e.promptTokens,
          completionTokens: e.completionTokens,
          ...(reportsCached ? { cachedTokens: live.get(e.id)?.cachedTokens ?? 0 } : {}),
          ...(e.message !== undefined ? { message: e.message } : {}),
        });
      }
    }
  });
  prefill.worker.on('message', (m: FromPrefill) => {
    if (m.t === 'rejected') {
      const entry = live.get(m.id);
      if (entry === undefined) return;
      rejectedTotal[m.rejection.code] = (rejectedTotal[m.rejection.code] ?? 0) + 1;
      endLive(m.id, { type: 'end', reason: 'rejected', promptTokens: entry.promptTokens, completionTokens: 0, message: m.rejection.message, rejection: m.rejection });
    } else if (m.t === 'error') {
      log(`kvcanary engine: prefill worker: ${m.message}`);
    }
  });
  for (const w of [decode, prefill]) {
    w.worker.on('error', (err) => {
      broken = `the ${w.role} worker failed: ${err.message}`;
      log(`kvcanary engine: ${broken}`);
      for (const id of [...live.keys()]) {
        finishedTotal.error++;
        endLive(id, { type: 'end', reason: 'error', promptTokens: live.get(id)?.promptTokens ?? 0, completionTokens: 0, message: broken });
      }
    });
  }

  const info: EngineInfo = {
    mode: 'disaggregated',
    preset: config.preset,
    modelId: config.modelId,
    contextTokens: config.contextTokens,
    poolTokens: config.poolTokens,
    pageSize: config.pageSize,
    numPages: config.numPages,
    freeList: config.freeList,
    zeroOnRelease: config.zeroOnRelease,
    prefixCache: config.prefixCache,
    chunkTokens: config.chunkTokens,
    maxRunning: config.maxRunning,
    kernel,
    startedAt: Math.floor(clock.now() / 1000),
    faults: [...config.faults],
    defenses: [...config.defenses],
    details: {
      disaggregation_mode: 'prefill-decode',
      prefill: { max_total_num_tokens: config.poolTokens, num_pages: config.numPages },
      decode: { max_total_num_tokens: d.decodePoolTokens, num_pages: d.decodeNumPages },
      disaggregation_transfer: { batch_tokens: d.transferBatchTokens, latency_ms: d.transferLatencyMs },
      host_offload: d.hostOffload ? { capacity_tokens: d.hostCacheTokens } : null,
    },
  };

  function abort(id: number): void {
    if (!live.has(id)) return;
    toDecode({ t: 'abort', id });
    toPrefill({ t: 'abort', id });
  }

  function submit(request: GenerationRequest): SubmitResult {
    const promptTokens = request.promptTokens.length;
    if (promptTokens < 1) throw new RangeError('a request needs at least one prompt token (BOS)');
    if (!Number.isInteger(request.maxTokens) || request.maxTokens < 1) throw new RangeError('maxTokens must be an integer >= 1');
    const promptKind = request.promptKind ?? 'prompt';
    const input = { promptTokens, maxTokens: request.maxTokens, promptKind };
    const decodeRejection = checkAdmission(input, { contextTokens: config.contextTokens, poolTokens: d.decodePoolTokens });
    const rejection =
      decodeRejection ?? (rejectBeforeBootstrap ? checkAdmission(input, { contextTokens: config.contextTokens, poolTokens: config.poolTokens }) : undefined);
    // What only the defense refused: a prompt decode would have taken and bootstrapped (the incident's path).
    if (rejection !== undefined && decodeRejection === undefined) rejectedBeforeBootstrap++;
    if (rejection !== undefined) {
      rejectedTotal[rejection.code] = (rejectedTotal[rejection.code] ?? 0) + 1;
      return { ok: false, rejection };
    }
    const waiting = decode.stats.get('waiting');
    if (closed || broken !== undefined || waiting >= config.maxWaiting) {
      rejectedTotal['engine_overloaded'] = (rejectedTotal['engine_overloaded'] ?? 0) + 1;
      const message = broken ?? (closed ? 'The engine is shutting down.' : `The engine has ${waiting} requests waiting; try again later.`);
      return { ok: false, overloaded: { code: 'engine_overloaded', message } };
    }
    const id = nextId++;
    const channel = new EventChannel<EngineEvent>(() => abort(id));
    const entry: Live = { channel, promptTokens, cachedTokens: reportsCached ? 0 : undefined };
    live.set(id, entry);
    const prompt = Uint16Array.from(request.promptTokens);
    const salt = request.cacheSalt !== undefined ? { cacheSalt: request.cacheSalt } : {};
    toDecode({ t: 'add', id, prompt, maxTokens: request.maxTokens, sampling: request.sampling, ...salt });
    toPrefill({ t: 'add', id, prompt, promptKind });
    const handle: RequestHandle = {
      id,
      promptTokens,
      get cachedTokens() {
        return entry.cachedTokens;
      },
      events: channel,
      abort: () => abort(id),
    };
    return { ok: true, request: handle };
  }

  function stats(): EngineStats {
    const ds = decode.stats;
    const ps = prefill.stats;
    const decodePool = poolStats(ds);
    return {
      waiting: ds.get('waiting'),
      running: ds.get('running'),
      prefilling: ps.get('prefilling'),
      prefillTokensPending: ps.get('prefillTokensPending'),
      pool: decodePool,
      pools: { prefill: poolStats(ps), decode: decodePool },
      promptTokensTotal: ps.get('promptTokensTotal'),
      generationTokensTotal: ds.get('generationTokensTotal'),
      finishedTotal: { ...finishedTotal },
      rejectedTotal: { ...rejectedTotal },
      foreignPageReadsTotal: exposures.total,
      steps: ds.get('steps'),
      transfer: { batchesLanded: ps.get('batchesLanded'), lateBatchesLanded: ps.get('lateBatchesLanded'), tokensLanded: ps.get('tokensLanded'), busyMs: ps.get('transferBusyMs') },
      ...(d.hostOffload
        ? {
            hostOffload: {
              entries: ds.get('hostEntries'),
              pagesWrittenBack: ds.get('hostPagesWrittenBack'),
              pagesLoaded: ds.get('hostPagesLoaded'),
              hitPages: ds.get('hostHitPages'),
            },
          }
        : {}),
      ...(config.prefixCache
        ? {
            prefixCache: {
              entries: ds.get('prefixEntries'),
              hitRequests: ds.get('prefixHitRequests'),
              lookups: ds.get('prefixLookups'),
              cachedTokensTotal: ds.get('prefixCachedTokensTotal'),
              evictions: ds.get('prefixEvictions'),
              staleRestoresRefused: ds.get('prefixStaleRestoresRefused'),
              blocked: {
                'salted-prefix-cache': ds.get('prefixBlockedSalt'),
                'strong-prefix-hash': ds.get('prefixBlockedTokens'),
                'restore-fencing': ds.get('prefixBlockedRestore'),
              },
            },
          }
        : {}),
      defended: {
        pageTagMismatches: ds.get('pageTagMismatches'),
        staleBatchesDropped: ps.get('staleBatchesDropped'),
        staleCopiesDropped: ds.get('staleCopiesDropped'),
      },
      defenseBlocks: defenseBlocks({
        'reject-before-bootstrap': rejectedBeforeBootstrap,
        'deferred-release': ds.get('poolParkedPagesTotal'),
        'page-tags': ds.get('pageTagMismatches'),
        'zero-on-release': ds.get('poolZeroedPagesTotal') + ps.get('poolZeroedPagesTotal'),
        'transfer-integrity': ps.get('staleBatchesDropped') + ds.get('staleCopiesDropped'),
        'salted-prefix-cache': ds.get('prefixBlockedSalt'),
        'strong-prefix-hash': ds.get('prefixBlockedTokens'),
        'restore-fencing': ds.get('prefixBlockedRestore'),
        'salted-host-tier': ds.get('hostBlockedSalt'),
      }),
    };
  }

  function checkInvariants(): string[] {
    const problems: string[] = [];
    for (const w of [prefill, decode]) {
      const answer = callSync((m) => w.worker.postMessage(m), w.reply, { t: 'check' });
      if (answer === undefined) problems.push(`the ${w.role} worker did not answer the invariant check`);
      else problems.push(...(answer as string[]));
    }
    return problems;
  }

  let closing: Promise<void> | undefined;
  return {
    info: () => ({ ...info }),
    submit,
    stats,
    exposures: () => exposures.snapshot(),
    checkInvariants,
    close: () =>
      (closing ??= (async () => {
        closed = true;
        for (const id of [...live.keys()]) {
          finishedTotal.aborted++;
          endLive(id, { type: 'end', reason: 'aborted', promptTokens: live.get(id)?.promptTokens ?? 0, completionTokens: 0 });
        }
        await Promise.all([decode.worker.terminate(), prefill.worker.terminate()]);
      })()),
  };
}
