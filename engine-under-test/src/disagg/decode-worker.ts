/**
 * The decode worker: decode's KV pool (in shared memory, so prefill can write into it), the reservations,
 * the model, and the token-by-token decode loop. Output streams from here to the router.
 *
 * A request waits until the pool holds its whole reservation (prompt + max_tokens, allocated up front, FIFO),
 * then decode leases the pages the transfer may write and bootstraps prefill with them. When prefill
 * signals completion decode takes it as readiness of the whole prompt (as the incident's decode did) and
 * attends over every prompt position: that is correct exactly when admission let only complete transfers
 * signal completion. Decode computes every output token, the first included; prefill never attends.
 *
 * "Stop computing", "stop writing", "stop reading" and "safe to reallocate" come apart here. An abort stops
 * reading and ends the response at once; the pages go back to the pool only when nothing can still write or
 * copy them: after prefill reports the room's transfer drained (`closed`/`transferred`), and after host
 * copies are done. The `late-write` fault releases at once despite a transfer in flight; the
 * `offload-release-race` fault releases at once despite host copies in flight; each on a rated fraction of
 * such releases, drawn once per request (`--fault-rate`). `deferred-release` parks such
 * pages until their leases are gone, whatever this protocol decided; `page-tags` checks every page's tag
 * before each read and fails the request closed on a mismatch.
 *
 * The prefix cache (prefix-cache.ts) lives here, on decode's pool, where pages are read: at admission the
 * prompt's cached run is shared into the new table and prefill is bootstrapped to start after it
 * (`skipTokens`), so prefill computes and transfers only the rest. A room's prompt pages become entries
 * once prefill reports them landed. Under `page-tags`, a shared page is checked against the generation it
 * had when it was shared (it is SHARED, not the reader's), the rest as before.
 */
import type { KernelName } from '../attention/kernel.js';
import type { MessagePort } from 'node:worker_threads';
import type { DisaggregatedConfig, EngineConfig } from '../config.js';
import { KvMemory } from '../kv-memory.js';
import { KvPool, SHARED_OWNER, type PageTable } from '../kv-pool.js';
import { PrefixCache, prefixCacheOptions, type PrefixPlan } from '../prefix-cache.js';
import { InductionModel } from '../model.js';
import { createSampler, type Sampler, type SamplingParams } from '../sampler.js';
import { HostCopies } from './host-copies.js';
import { HostTier } from './host-tier.js';
import type { DecodeEvent, DecodeToPrefill, FromDecode, PrefillToDecode, ToDecode, WorkerInit } from './protocol.js';
import { StatsBlock } from './stats-block.js';
import { answerSync } from './sync-call.js';
import { realTimers, type Timers } from './timers.js';
import { reserveWithPrefix } from '../prefix-reservation.js';
import { faultTrigger } from '../faults.js';

type EndReason = 'length' | 'aborted' | 'error';

class DecodeSequence {
  readonly promptLength: number;
  readonly tokens: Uint16Array;
  readonly sample: Sampler;
  phase: 'waiting' | 'reserved' | 'decode' | 'ending' = 'waiting';
  table: PageTable | undefined;
  /** Tokens known (prompt + generated) and positions whose KV decode considers present. */
  length: number;
  kvWritten = 0;
  generated = 0;
  lastStep = -1;
  bootstrapped = false;
  transferDone = false;
  /** No transfer batch of this room can land any more. */
  transferClosed = false;
  loading = false;
  writingBack = false;
  /** The prompt's KV was complete when it ended (so it may be written back). */
  promptComplete = false;
  prefix: PrefixPlan | undefined;
  /** Generations of the shared pages at the head of the table, when they were shared. */
  sharedGens: Int32Array = new Int32Array(0);
  /** Prompt positions prefill was told to skip (shared or loaded from the host tier). */
  skipTokens = 0;
  /** The race faults' draws for this request, made at its first eligible release (undefined: not yet). */
  releaseDespiteTransfer: boolean | undefined;
  releaseDespiteCopies: boolean | undefined;

  constructor(
    readonly id: number,
    prompt: Uint16Array,
    readonly maxTokens: number,
    sampling: SamplingParams,
    readonly cacheSalt: string | undefined,
  ) {
    this.promptLength = prompt.length;
    this.tokens = new Uint16Array(prompt.length + maxTokens);
    this.tokens.set(prompt);
    this.length = prompt.length;
    this.sample = createSampler(sampling);
  }
}

export interface DecodePorts {
  post(message: FromDecode): void;
  peer: { postMessage(message: DecodeToPrefill): void };
}

export class DecodeWorker {
  private readonly config: EngineConfig;
  private readonly disagg: DisaggregatedConfig;
  readonly pool: KvPool;
  private readonly model: InductionModel;
  private readonly tier: HostTier | undefined;
  private readonly cache: PrefixCache | undefined;
  private readonly copies: HostCopies | undefined;
  private readonly sequences = new Map<number, DecodeSequence>();
  private readonly waiting: DecodeSequence[] = [];
  private readonly active: DecodeSequence[] = [];
  private readonly events: DecodeEvent[] = [];
  private readonly logits = new Float32Array(256);
  /** The race faults: whether this eligible release goes ahead at once (see faults.ts, faultTrigger). */
  private readonly releaseAtOnceDespiteTransfer: () => boolean;
  private readonly releaseAtOnceDespiteCopies: () => boolean;
  private readonly pageTags: boolean;
  private scheduled = false;
  private reclaimTimer = false;
  private decodeCursor = 0;
  private steps = 0;
  private generationTokensTotal = 0;
  private pageTagMismatches = 0;
  private hitPages = 0;

  constructor(
    init: Pick<WorkerInit, 'config' | 'decodeMemory'>,
    private readonly ports: DecodePorts,
    private readonly stats: StatsBlock | undefined,
    private readonly timers: Timers = realTimers,
    private readonly defer: (fn: () => void) => void = setImmediate,
  ) {
    const c = init.config;
    if (c.disaggregated === undefined) throw new Error('the decode worker needs a disaggregated configuration');
    this.config = c;
    this.disagg = c.disaggregated;
    const memory = KvMemory.attach({ numPages: this.disagg.decodeNumPages, pageSize: c.pageSize }, init.decodeMemory);
    this.pool = new KvPool({
      memory,
      numPages: memory.numPages,
      pageSize: c.pageSize,
      freeList: c.freeList,
      zeroOnRelease: c.zeroOnRelease,
      deferRelease: c.defenses.includes('deferred-release'),
      onReuse: (page) => this.cache?.invalidate(page),
      isCached: (page) => this.cache?.holds(page) === true,
    });
    this.cache = c.prefixCache ? new PrefixCache(memory, prefixCacheOptions(c, c.pageSize, memory.numPages)) : undefined;
    this.model = new InductionModel(memory, {
      config: c.model,
      kernel: c.kernel,
      attention: c.attention,
      fenceReads: true,
      onForeignRead: (reader, r) => {
        // A same-tenant read of a page cached for the same tokens is the cache working, not a leak.
        const read = this.cache === undefined ? r : this.cache.screen(reader, r);
        if (read !== undefined) this.events.push({ k: 'foreign', reader, pages: read.pages, writers: read.writers });
      },
    });
    this.releaseAtOnceDespiteTransfer = faultTrigger(c, 'late-write');
    this.releaseAtOnceDespiteCopies = faultTrigger(c, 'offload-release-race');
    this.pageTags = c.defenses.includes('page-tags');
    if (this.disagg.hostOffload) {
      const capacityPages = Math.max(1, Math.floor(this.disagg.hostCacheTokens / c.pageSize));
      const ignore = c.faults.includes('host-tier-ignores-salt');
      this.tier = new HostTier(c.pageSize, capacityPages, { ignore, check: !ignore || c.defenses.includes('salted-host-tier') });
      this.copies = new HostCopies(
        memory,
        this.tier,
        {
          latencyMs: this.disagg.transferLatencyMs,
          seed: c.defaultSeed ^ 0x2545f491,
          pagesPerBatch: Math.max(1, Math.floor(this.disagg.transferBatchTokens / c.pageSize)),
          integrity: c.defenses.includes('transfer-integrity'),
          maxQueuedPages: capacityPages,
        },
        timers,
        () => this.afterAsync(),
      );
    }
    this.publish();
  }

  onRouterMessage(message: ToDecode, reply?: SharedArrayBuffer): void {
    switch (message.t) {
      case 'add': {
        const seq = new DecodeSequence(message.id, message.prompt, message.maxTokens, message.sampling, message.cacheSalt);
        this.sequences.set(seq.id, seq);
        this.waiting.push(seq);
        break;
      }
      case 'abort':
        this.abort(message.id);
        break;
      case 'check':
        if (reply !== undefined) answerSync(reply, this.checkInvariants(), (v) => (v as string[]).slice(0, 100));
        return;
    }
    this.afterAsync();
  }

  onPeerMessage(message: PrefillToDecode): void {
    const seq = this.sequences.get(message.room);
    if (seq === undefined) return; // released already (a fault released it early); nothing to update
    seq.transferClosed = true;
    if (message.t === 'transferred') {
      seq.transferDone = true;
      this.registerLanded(seq, message.tokens);
      this.maybeReady(seq);
    } else if (message.t === 'rejected' && seq.phase !== 'ending') {
      // Prefill's admission refused it; the router answers the client. Free the reservation, unread.
      this.end(seq, 'aborted', undefined, true);
    }
    if (seq.phase === 'ending') this.tryRelease(seq);
    this.afterAsync();
  }

  private abort(id: number): void {
    const seq = this.sequences.get(id);
    if (seq === undefined || seq.phase === 'ending') return;
    if (seq.phase === 'waiting') {
      this.waiting.splice(this.waiting.indexOf(seq), 1);
      this.sequences.delete(id);
      this.ports.peer.postMessage({ t: 'dropped', room: id });
      this.events.push({ k: 'end', id, reason: 'aborted', promptTokens: seq.promptLength, completionTokens: 0 });
      return;
    }
    this.end(seq, 'aborted');
  }

  /** After a message or an async copy: reclaim, republish, flush events, keep stepping if there is work. */
  private afterAsync(): void {
    this.pool.reclaim();
    // Counters first, then events: a client that sees a request end (a page-tags 500) finds its count published.
    this.publish();
    this.flush();
    this.schedule();
  }

  private schedule(): void {
    if (!this.scheduled && this.hasWork()) {
      this.scheduled = true;
      this.defer(() => this.step());
    }
    // Parked pages come back when their leases go, which another thread decides: poll while any are parked.
    if (!this.reclaimTimer && this.pool.stats().pendingReleasePages > 0) {
      this.reclaimTimer = true;
      this.timers.setTimeout(() => {
        this.reclaimTimer = false;
        this.afterAsync();
      }, 1);
    }
  }

  private hasWork(): boolean {
    if (this.active.some((s) => s.phase === 'decode')) return true;
    const head = this.waiting[0];
    return head !== undefined && this.active.length < this.config.maxRunning && this.pool.pagesFor(head.promptLength + head.maxTokens) <= this.pool.freePages;
  }

  private step(): void {
    this.scheduled = false;
    const step = ++this.steps;
    this.admit();
    this.decode(step);
    this.pool.reclaim();
    this.publish();
    this.flush();
    this.schedule();
  }

  private admit(): void {
    const P = this.config.pageSize;
    while (this.waiting.length > 0 && this.active.length < this.config.maxRunning) {
      const seq = this.waiting[0] as DecodeSequence;
      const total = this.pool.pagesFor(seq.promptLength + seq.maxTokens);
      const reserved = reserveWithPrefix(this.pool, this.cache, seq, total);
      if (reserved === undefined) return;
      const { table, hits: shared } = reserved;
      this.waiting.shift();
      seq.table = table;
      seq.phase = 'reserved';
      this.active.push(seq);
      const pages = table.pages.slice();
      const gens = pages.map((p) => this.pool.memory.generation[p] as number);
      seq.sharedGens = gens.slice(0, shared.length);
      if (this.cache !== undefined && seq.prefix !== undefined) this.cache.borrowed(seq.id, seq.prefix, shared);
      // A prefix hit in the host tier (when the cache had none): those pages are loaded, prefill starts after
      // them (at least one token is transferred).
      const hits = shared.length > 0 ? [] : (this.tier?.lookup(seq.tokens, Math.floor((seq.promptLength - 1) / P), seq.cacheSalt) ?? []);
      // Cached tokens count both paths: shared pages and pages loaded from the host tier.
      if ((this.cache !== undefined && seq.prefix !== undefined) || this.tier !== undefined) this.events.push({ k: 'cached', id: seq.id, tokens: (shared.length + hits.length) * P });
      const skipTokens = (shared.length + hits.length) * P;
      seq.skipTokens = skipTokens;
      const leases = this.pool.memory.leases;
      for (let i = skipTokens / P, end = Math.ceil(seq.promptLength / P); i < end; i++) Atomics.add(leases, pages[i] as number, 1);
      seq.bootstrapped = true;
      this.ports.peer.postMessage({ t: 'bootstrap', room: seq.id, pages, gens, skipTokens, promptTokens: seq.promptLength });
      if (hits.length > 0 && this.copies !== undefined) {
        seq.loading = true;
        this.hitPages += hits.length;
        this.copies.load({ owner: seq.id, salt: seq.cacheSalt, pages, gens, hits }, () => {
          seq.loading = false;
          this.maybeReady(seq);
          if (seq.phase === 'ending') this.tryRelease(seq);
        });
      }
    }
  }

  private maybeReady(seq: DecodeSequence): void {
    if (seq.phase !== 'reserved' || !seq.transferDone || seq.loading) return;
    seq.phase = 'decode';
    // Completion is taken as readiness of the whole prompt.
    seq.kvWritten = seq.promptLength;
  }

  private decode(step: number): void {
    const n = this.active.length;
    let budget = this.config.decodePositionsPerStep;
    let served = 0;
    for (let k = 0; k < n && (served === 0 || budget > 0); k++) {
      const index = (this.decodeCursor + k) % n;
      const seq = this.active[index];
      if (seq === undefined || seq.phase !== 'decode' || seq.lastStep === step) continue;
      this.decodeCursor = index + 1;
      const pages = (seq.table as PageTable).pages;
      try {
        // Write the previous token's KV, then attend over every position decode believes present.
        this.model.writeKv(pages, seq.tokens, seq.kvWritten, seq.length, seq.id);
        seq.kvWritten = seq.length;
        budget -= seq.length;
        served++;
        if (this.pageTags) {
          const bad = this.verifyTags(seq, pages);
          if (bad !== undefined) {
            this.pageTagMismatches++;
            this.end(
              seq,
              'error',
              `KV page tag mismatch: page ${bad.index} of this request's page table was not written by this request under its current allocation; the request was failed closed`,
            );
            continue;
          }
        }
        this.model.nextLogits(pages, seq.tokens, seq.length, seq.kvWritten, seq.id, this.logits);
        const token = seq.sample(this.logits);
        seq.tokens[seq.length++] = token;
        seq.generated++;
        seq.lastStep = step;
        this.generationTokensTotal++;
        this.events.push({ k: 'token', id: seq.id, token });
        if (seq.generated >= seq.maxTokens) this.end(seq, 'length');
      } catch (err) {
        this.end(seq, 'error', err instanceof Error ? err.message : String(err));
      }
    }
  }

  /**
   * page-tags: pages this request took from the cache must still be shared under the generation they had
   * when it took them; the rest must carry its own tag under their current generation, and be its own or
   * (once another request took them from the cache) shared.
   */
  private verifyTags(seq: DecodeSequence, pages: Int32Array): { index: number; page: number } | undefined {
    const m = this.pool.memory;
    const k = seq.sharedGens.length;
    const count = Math.ceil(seq.kvWritten / this.config.pageSize);
    for (let i = 0; i < count; i++) {
      const page = pages[i] as number;
      const ok =
        i < k
          ? m.owner[page] === SHARED_OWNER && m.generation[page] === seq.sharedGens[i]
          : (m.owner[page] === seq.id || m.owner[page] === SHARED_OWNER) && m.tagWriter[page] === seq.id && m.pageWriterGen[page] === m.generation[page];
      if (!ok) return { index: i, page };
    }
    return undefined;
  }

  /** Prompt pages the transfer filled in full become prefix-cache entries (and ground truth). */
  private registerLanded(seq: DecodeSequence, landed: number): void {
    const cache = this.cache;
    const plan = seq.prefix;
    const table = seq.table;
    if (cache === undefined || plan === undefined || table === undefined) return;
    const P = this.config.pageSize;
    const last = Math.min(Math.floor((seq.skipTokens + landed) / P), plan.keys.length);
    for (let b = seq.skipTokens / P; b < last; b++) {
      const page = table.pages[b] as number;
      cache.written(plan, b, page, seq.id);
      cache.register(plan, b, page);
    }
  }

  /** Ends the response now; the pages follow when nothing can still touch them (tryRelease). */
  private end(seq: DecodeSequence, reason: EndReason, message?: string, silent = false): void {
    if (seq.phase === 'ending') return;
    seq.promptComplete = seq.phase === 'decode';
    seq.phase = 'ending';
    const i = this.active.indexOf(seq);
    if (i >= 0) this.active.splice(i, 1);
    if (!silent) {
      this.events.push({ k: 'end', id: seq.id, reason, promptTokens: seq.promptLength, completionTokens: seq.generated, ...(message !== undefined ? { message } : {}) });
    }
    if (seq.promptComplete && reason !== 'error' && this.copies !== undefined && seq.table !== undefined) {
      const full = Math.floor(seq.promptLength / this.config.pageSize);
      const pages = seq.table.pages.slice(0, full);
      const gens = pages.map((p) => this.pool.memory.generation[p] as number);
      seq.writingBack = this.copies.writeBack({ owner: seq.id, pages, gens, tokens: seq.tokens.slice(0, full * this.config.pageSize), salt: seq.cacheSalt }, () => {
        seq.writingBack = false;
        this.tryRelease(seq);
      });
    }
    this.tryRelease(seq);
  }

  private tryRelease(seq: DecodeSequence): void {
    const table = seq.table;
    if (table === undefined || table.released) return;
    const transferInFlight = seq.bootstrapped && !seq.transferClosed;
    const copiesInFlight = seq.loading || seq.writingBack;
    // A request's first eligible release draws whether its fault fires; a later attempt keeps that draw.
    if (transferInFlight && !(seq.releaseDespiteTransfer ??= this.releaseAtOnceDespiteTransfer())) return;
    if (copiesInFlight && !(seq.releaseDespiteCopies ??= this.releaseAtOnceDespiteCopies())) return;
    this.pool.release(table);
    this.cache?.finished(seq.id);
    this.sequences.delete(seq.id);
  }

  get kernel(): KernelName {
    return this.model.kernel.name;
  }

  checkInvariants(): string[] {
    return this.pool.checkInvariants().map((p) => `decode pool: ${p}`);
  }

  private flush(): void {
    if (this.events.length === 0) return;
    this.ports.post({ t: 'events', events: this.events.splice(0) });
  }

  private publish(): void {
    const s = this.stats;
    if (s === undefined) return;
    const p = this.pool.stats();
    s.set('waiting', this.waiting.length);
    s.set('running', this.active.length);
    s.set('poolNumPages', p.numPages);
    s.set('poolPageSize', p.pageSize);
    s.set('poolFreePages', p.freePages);
    s.set('poolUsedPages', p.usedPages);
    s.set('poolAllocatedPagesTotal', p.allocatedPagesTotal);
    s.set('poolReleasedPagesTotal', p.releasedPagesTotal);
    s.set('poolTables', p.tables);
    s.set('poolPendingReleasePages', p.pendingReleasePages);
    s.set('poolParkedPagesTotal', p.parkedPagesTotal);
    s.set('poolZeroedPagesTotal', p.zeroedPagesTotal);
    s.set('generationTokensTotal', this.generationTokensTotal);
    s.set('steps', this.steps);
    s.set('pageTagMismatches', this.pageTagMismatches);
    const c = this.copies?.counters;
    s.set('staleCopiesDropped', c?.staleCopiesDropped ?? 0);
    s.set('hostEntries', this.tier?.size ?? 0);
    s.set('hostPagesWrittenBack', c?.pagesWrittenBack ?? 0);
    s.set('hostPagesLoaded', c?.pagesLoaded ?? 0);
    s.set('hostHitPages', this.hitPages);
    s.set('hostBlockedSalt', this.tier?.saltRefusals ?? 0);
    const pc = this.cache?.stats();
    s.set('prefixEntries', pc?.entries ?? 0);
    s.set('prefixHitRequests', pc?.hitRequests ?? 0);
    s.set('prefixLookups', pc?.lookups ?? 0);
    s.set('prefixCachedTokensTotal', pc?.cachedTokensTotal ?? 0);
    s.set('prefixEvictions', pc?.evictions ?? 0);
    s.set('prefixStaleRestoresRefused', pc?.staleRestoresRefused ?? 0);
    s.set('prefixBlockedSalt', pc?.blocked['salted-prefix-cache'] ?? 0);
    s.set('prefixBlockedTokens', pc?.blocked['strong-prefix-hash'] ?? 0);
    s.set('prefixBlockedRestore', pc?.blocked['restore-fencing'] ?? 0);
  }
}

/** Worker entry (see worker-entry.js). */
export function runWorker(init: WorkerInit, parent: MessagePort): void {
  const worker = new DecodeWorker(init, { post: (m) => parent.postMessage(m), peer: init.peer }, new StatsBlock(init.stats));
  parent.on('message', (m: ToDecode) => worker.onRouterMessage(m, init.reply));
  init.peer.on('message', (m: PrefillToDecode) => worker.onPeerMessage(m));
  parent.postMessage({ t: 'ready', kernel: worker.kernel } satisfies FromDecode);
}
