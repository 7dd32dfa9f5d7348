/**
 * The prefill worker: admission against prefill's own KV pool, chunked prefill into that pool, and the
 * KV transfer into decode's pool (transfer.ts).
 *
 * A request arrives from the router and waits for decode's bootstrap (its reserved pages). Admission
 * happens as it leaves that queue, which is where the incident lived:
 * - on arrival, a prompt longer than prefill's pool is given a pending rejection and replaced by a
 *   one-token placeholder, so that it drains through batching like any request (as SGLang does);
 * - at the queue's exit a request that must not run is stopped: one that is finished (aborted) or, in a
 *   correct engine, one with a pending rejection, which is then returned to the client (400) and decode
 *   is told to free the reservation unread. With the `admission-checks-finished` fault only finished
 *   requests are stopped: the placeholder is prefilled, its one token transferred, and completion signalled
 *   to decode, which takes it as readiness of the whole prompt; the pending rejection is never delivered.
 *
 * Prefill owns the room until its transfer stream drains: on abort it stops computing at once, lets the
 * batches already posted land, then tells decode `closed` and drops decode's leases on the room's pages.
 */
import type { MessagePort } from 'node:worker_threads';
import { checkAdmission, type PromptKind, type Rejection } from '../admission.js';
import type { EngineConfig, DisaggregatedConfig } from '../config.js';
import { KvMemory } from '../kv-memory.js';
import { KvPool, type PageTable } from '../kv-pool.js';
import { InductionModel } from '../model.js';
import { PLACEHOLDER } from '../tokenizer.js';
import type { DecodeToPrefill, FromPrefill, PrefillToDecode, ToPrefill, WorkerInit } from './protocol.js';
import { StatsBlock } from './stats-block.js';
import { answerSync } from './sync-call.js';
import { realTimers, type Timers } from './timers.js';
import { TransferEngine } from './transfer.js';

type Bootstrap = Extract<DecodeToPrefill, { t: 'bootstrap' }>;

interface PrefillRequest {
  room: number;
  tokens: Uint16Array;
  /** Tokens prefill will compute and transfer (1 for a placeholder). */
  promptLength: number;
  pendingRejection: Rejection | undefined;
  /** Aborted by the router. */
  finished: boolean;
  bootstrap: Bootstrap | undefined;
  table: PageTable | undefined;
  /** Next position to compute. */
  written: number;
  phase: 'queued' | 'prefill' | 'draining';
}

export interface PrefillPorts {
  /** To the router. */
  post(message: FromPrefill): void;
  /** To decode. */
  peer: { postMessage(message: PrefillToDecode): void };
}

export class PrefillWorker {
  private readonly config: EngineConfig;
  private readonly disagg: DisaggregatedConfig;
  readonly pool: KvPool;
  private readonly model: InductionModel;
  private readonly decodeMemory: KvMemory;
  private readonly transfer: TransferEngine;
  private readonly requests = new Map<number, PrefillRequest>();
  private readonly queue: PrefillRequest[] = [];
  private readonly running: PrefillRequest[] = [];
  /** Bootstraps and drops that arrived (over the peer channel) before the router's add. */
  private readonly early = new Map<number, Bootstrap | 'dropped'>();
  private readonly checksFinishedOnly: boolean;
  private scheduled = false;
  private promptTokensTotal = 0;
  private steps = 0;

  constructor(
    init: Pick<WorkerInit, 'config' | 'decodeMemory'>,
    private readonly ports: PrefillPorts,
    private readonly stats: StatsBlock | undefined,
    timers: Timers = realTimers,
    private readonly defer: (fn: () => void) => void = setImmediate,
  ) {
    this.config = init.config;
    if (init.config.disaggregated === undefined) throw new Error('the prefill worker needs a disaggregated configuration');
    this.disagg = init.config.disaggregated;
    const c = init.config;
    this.pool = new KvPool({
      memory: KvMemory.create({ numPages: c.numPages, pageSize: c.pageSize, shared: false }),
      numPages: c.numPages,
      pageSize: c.pageSize,
      freeList: c.freeList,
      zeroOnRelease: c.zeroOnRelease,
    });
    // Prefill never attends (decode computes every token), so the plain kernel: nothing to compile.
    this.model = new InductionModel(this.pool.memory, { config: c.model, kernel: 'js' });
    this.decodeMemory = KvMemory.attach({ numPages: this.disagg.decodeNumPages, pageSize: c.pageSize }, init.decodeMemory);
    this.transfer = new TransferEngine(
      this.decodeMemory,
      this.pool.memory,
      { latencyMs: this.disagg.transferLatencyMs, seed: c.defaultSeed ^ 0x7f4a7c15, batchTokens: this.disagg.transferBatchTokens, integrity: c.defenses.includes('transfer-integrity') },
      timers,
      () => this.publish(),
    );
    this.checksFinishedOnly = c.faults.includes('admission-checks-finished');
    this.publish();
  }

  onRouterMessage(message: ToPrefill, reply?: SharedArrayBuffer): void {
    switch (message.t) {
      case 'add':
        this.add(message.id, message.prompt, message.promptKind);
        break;
      case 'abort':
        this.abort(message.id);
        break;
      case 'check':
        if (reply !== undefined) answerSync(reply, this.checkInvariants(), (v) => (v as string[]).slice(0, 100));
        return;
    }
    this.publish();
    this.schedule();
  }

  onPeerMessage(message: DecodeToPrefill): void {
    const req = this.requests.get(message.room);
    if (req === undefined) {
      this.early.set(message.room, message.t === 'bootstrap' ? message : 'dropped');
      return;
    }
    if (message.t === 'bootstrap') req.bootstrap = message;
    else this.forget(req); // decode dropped it before bootstrap: nothing was reserved
    this.publish();
    this.schedule();
  }

  private add(room: number, prompt: Uint16Array, promptKind: PromptKind): void {
    const early = this.early.get(room);
    this.early.delete(room);
    if (early === 'dropped') return;
    const req: PrefillRequest = {
      room,
      tokens: prompt,
      promptLength: prompt.length,
      pendingRejection: undefined,
      finished: false,
      bootstrap: early,
      table: undefined,
      written: 0,
      phase: 'queued',
    };
    const rejection = checkAdmission(
      { promptTokens: prompt.length, maxTokens: 0, promptKind },
      { contextTokens: Number.POSITIVE_INFINITY, poolTokens: this.pool.capacityTokens },
    );
    if (rejection !== undefined) {
      // SGLang's way: mark it rejected and let a one-token placeholder drain through batching.
      req.pendingRejection = rejection;
      req.tokens = Uint16Array.of(PLACEHOLDER);
      req.promptLength = 1;
    }
    this.requests.set(room, req);
    this.queue.push(req);
  }

  private abort(room: number): void {
    const req = this.requests.get(room);
    if (req === undefined || req.finished) return;
    req.finished = true;
    if (req.phase === 'prefill') {
      // Stop computing now; batches already posted still land.
      this.running.splice(this.running.indexOf(req), 1);
      this.drain(req);
    }
    // Queued: stopped at the queue's exit once decode bootstraps or drops it.
  }

  private schedule(): void {
    if (this.scheduled || !this.hasWork()) return;
    this.scheduled = true;
    this.defer(() => this.step());
  }

  /** Something to compute, or a bootstrapped request at the head of the pool line that can move. */
  private hasWork(): boolean {
    if (this.running.length > 0) return true;
    for (const req of this.queue) {
      if (req.bootstrap === undefined) continue;
      return req.finished || req.pendingRejection !== undefined || this.pool.pagesFor(req.promptLength) <= this.pool.freePages;
    }
    return false;
  }

  private step(): void {
    this.scheduled = false;
    this.steps++;
    this.admit();
    this.prefill();
    this.publish();
    this.schedule();
  }

  private admit(): void {
    for (let i = 0; i < this.queue.length && this.running.length < this.config.maxRunning; ) {
      const req = this.queue[i] as PrefillRequest;
      if (req.bootstrap === undefined) {
        i++; // bootstrap queue: a request waits for decode, others may pass it
        continue;
      }
      const mustStop = this.checksFinishedOnly ? req.finished : req.finished || req.pendingRejection !== undefined;
      if (mustStop) {
        this.queue.splice(i, 1);
        this.stop(req);
        continue;
      }
      const needed = this.pool.pagesFor(req.promptLength);
      if (needed > this.pool.freePages) return; // FIFO on the pool: a large request is not starved
      const table = this.pool.createTable(req.room, needed);
      const result = this.pool.allocate(table, needed);
      if (!result.ok) {
        this.pool.release(table);
        return;
      }
      this.queue.splice(i, 1);
      req.table = table;
      req.phase = 'prefill';
      req.written = Math.min(req.bootstrap.skipTokens, req.promptLength);
      this.transfer.open({ room: req.room, pages: req.bootstrap.pages, gens: req.bootstrap.gens, source: table.pages });
      this.running.push(req);
    }
  }

  /** A request leaves at the queue's exit without running: nothing was written into decode's pages. */
  private stop(req: PrefillRequest): void {
    this.dropLeases(req);
    this.requests.delete(req.room);
    if (!req.finished && req.pendingRejection !== undefined) {
      this.ports.post({ t: 'rejected', id: req.room, rejection: req.pendingRejection });
      this.ports.peer.postMessage({ t: 'rejected', room: req.room });
    } else {
      this.ports.peer.postMessage({ t: 'closed', room: req.room });
    }
  }

  private forget(req: PrefillRequest): void {
    const i = this.queue.indexOf(req);
    if (i >= 0) this.queue.splice(i, 1);
    this.requests.delete(req.room);
  }

  private prefill(): void {
    let budget = this.config.chunkTokens;
    for (const req of [...this.running]) {
      if (budget <= 0) break;
      const table = req.table as PageTable;
      const n = Math.min(budget, req.promptLength - req.written);
      if (n > 0) {
        this.model.writeKv(table.pages, req.tokens, req.written, req.written + n, req.room);
        this.transfer.post(req.room, req.written, req.written + n);
        req.written += n;
        budget -= n;
        this.promptTokensTotal += n;
      }
      if (req.written === req.promptLength) {
        this.running.splice(this.running.indexOf(req), 1);
        this.drain(req);
      }
    }
  }

  private drain(req: PrefillRequest): void {
    req.phase = 'draining';
    this.transfer.finish(req.room, (landed) => {
      this.pool.release(req.table as PageTable);
      this.dropLeases(req);
      this.requests.delete(req.room);
      // Completion metadata: the room and the tokens written. Decode takes it as readiness.
      this.ports.peer.postMessage(req.finished ? { t: 'closed', room: req.room } : { t: 'transferred', room: req.room, tokens: landed });
      this.publish();
      this.schedule();
    });
  }

  /** Decode leased every page the transfer could write; no batch of this room can land any more. */
  private dropLeases(req: PrefillRequest): void {
    const b = req.bootstrap;
    if (b === undefined) return;
    const P = this.config.pageSize;
    const leases = this.decodeMemory.leases;
    for (let i = Math.floor(b.skipTokens / P), end = Math.ceil(b.promptTokens / P); i < end; i++) Atomics.sub(leases, b.pages[i] as number, 1);
  }

  checkInvariants(): string[] {
    return this.pool.checkInvariants().map((p) => `prefill pool: ${p}`);
  }

  private publish(): void {
    const s = this.stats;
    if (s === undefined) return;
    const p = this.pool.stats();
    let pending = 0;
    for (const r of this.running) pending += r.promptLength - r.written;
    s.set('waiting', this.queue.length);
    s.set('running', this.running.length);
    s.set('prefilling', this.running.length);
    s.set('prefillTokensPending', pending);
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
    s.set('promptTokensTotal', this.promptTokensTotal);
    s.set('steps', this.steps);
    const t = this.transfer.counters;
    s.set('batchesLanded', t.batchesLanded);
    s.set('lateBatchesLanded', t.lateBatchesLanded);
    s.set('tokensLanded', t.tokensLanded);
    s.set('transferBusyMs', t.busyMs);
    s.set('staleBatchesDropped', t.staleBatchesDropped);
  }
}

/** Worker entry (see worker-entry.js). */
export function runWorker(init: WorkerInit, parent: MessagePort): void {
  const worker = new PrefillWorker(init, { post: (m) => parent.postMessage(m), peer: init.peer }, new StatsBlock(init.stats));
  parent.on('message', (m: ToPrefill) => worker.onRouterMessage(m, init.reply));
  init.peer.on('message', (m: DecodeToPrefill) => worker.onPeerMessage(m));
  parent.postMessage({ t: 'ready' } satisfies FromPrefill);
}
