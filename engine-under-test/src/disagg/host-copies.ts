/**
 * Copies between decode's KV pool and the host tier (host-tier.ts), issued asynchronously like DMA on a
 * copy stream, one batch of pages at a time, each taking a random time of mean `latencyMs`:
 * - write-back: when a request ends, its full prompt pages are copied to host memory. Write-backs share
 *   one background stream and run one after another; a batch reads the pages when it completes (as a DMA
 *   does), not when it was issued;
 * - load: on a prefix hit, host pages are copied into the new request's pages, on a stream of its own
 *   (it is on the request's critical path).
 * Every page a copy may touch is leased from issue until the copy is done with it. When the pages may be
 * released is the caller's decision: the fence (release after the copy) is the correct one, releasing at
 * issue is the `offload-release-race` fault, and the leases let `deferred-release` fence them anyway.
 *
 * With `integrity` (`transfer-integrity`) a copy carries the owner and page generations it was issued for
 * and checks them under the page locks when each batch completes; a stale copy is dropped and counted
 * (a write-back then inserts nothing).
 */
import { FLOATS_PER_SLOT, PageState, type KvMemory } from '../kv-memory.js';
import { HostPage, type HostTier } from './host-tier.js';
import { flightTimes, type Timers } from './timers.js';

export interface HostCopyOptions {
  /** Mean flight time of one batch (exponentially distributed; see timers.ts). */
  latencyMs: number;
  seed: number;
  pagesPerBatch: number;
  integrity: boolean;
  /** Write-backs queued beyond this many pages are skipped (the stream is a bounded resource). */
  maxQueuedPages: number;
}

export interface WriteBackJob {
  owner: number;
  /** The pages to copy, in prompt order, and their generations at issue. */
  pages: Int32Array;
  gens: Int32Array;
  tokens: Uint16Array;
  salt: string | undefined;
}

export interface LoadJob {
  owner: number;
  /** The loader's `cache_salt`. */
  salt: string | undefined;
  pages: Int32Array;
  gens: Int32Array;
  hits: readonly HostPage[];
}

export interface HostCopyCounters {
  pagesWrittenBack: number;
  pagesLoaded: number;
  staleCopiesDropped: number;
}

interface QueuedWriteBack {
  job: WriteBackJob;
  onDone: () => void;
}

export class HostCopies {
  readonly counters: HostCopyCounters = { pagesWrittenBack: 0, pagesLoaded: 0, staleCopiesDropped: 0 };
  private readonly writeBacks: QueuedWriteBack[] = [];
  private writeBackBusy = false;
  private queuedPages = 0;
  private readonly flight: () => number;

  constructor(
    private readonly memory: KvMemory,
    private readonly tier: HostTier,
    private readonly options: HostCopyOptions,
    private readonly timers: Timers,
    /** Called after every batch (the caller reclaims pages and republishes stats). */
    private readonly onProgress: () => void,
  ) {
    this.flight = flightTimes(options.latencyMs, options.seed);
  }

  get idle(): boolean {
    return !this.writeBackBusy && this.writeBacks.length === 0;
  }

  /** Queues a write-back; false (and nothing leased) if the stream is too far behind to take it. */
  writeBack(job: WriteBackJob, onDone: () => void): boolean {
    if (job.pages.length === 0 || this.queuedPages + job.pages.length > this.options.maxQueuedPages) return false;
    for (const page of job.pages) Atomics.add(this.memory.leases, page, 1);
    this.queuedPages += job.pages.length;
    this.writeBacks.push({ job, onDone });
    this.pumpWriteBacks();
    return true;
  }

  private pumpWriteBacks(): void {
    if (this.writeBackBusy) return;
    const next = this.writeBacks.shift();
    if (next === undefined) return;
    this.writeBackBusy = true;
    const { job } = next;
    const copies: HostPage[] = [];
    let index = 0;
    let stale = false;
    const batch = (): void => {
      const end = Math.min(job.pages.length, index + this.options.pagesPerBatch);
      if (!stale) stale = !this.withChecked(job.owner, job.pages, job.gens, index, end, false, () => this.readPages(job, index, end, copies));
      for (let i = index; i < end; i++) Atomics.sub(this.memory.leases, job.pages[i] as number, 1);
      this.queuedPages -= end - index;
      index = end;
      if (index < job.pages.length) {
        this.timers.setTimeout(batch, this.flight());
      } else {
        if (stale) this.counters.staleCopiesDropped++;
        else {
          this.tier.insert(this.tier.keys(job.tokens, job.pages.length, job.salt), copies);
          this.counters.pagesWrittenBack += copies.length;
        }
        this.writeBackBusy = false;
        next.onDone();
        this.pumpWriteBacks();
      }
      this.onProgress();
    };
    this.timers.setTimeout(batch, this.flight());
  }

  private readPages(job: WriteBackJob, from: number, to: number, into: HostPage[]): void {
    const m = this.memory;
    const P = m.pageSize;
    const floats = P * FLOATS_PER_SLOT;
    for (let i = from; i < to; i++) {
      const page = job.pages[i] as number;
      const copy = new HostPage(P, job.tokens.slice(i * P, (i + 1) * P), job.owner, job.salt);
      copy.data.set(m.data.subarray(page * floats, (page + 1) * floats));
      copy.slotWriter.set(m.slotWriter.subarray(page * P, (page + 1) * P));
      into.push(copy);
    }
  }

  /** Loads `hits` into the first pages of the job, one batch per latency; `onDone` when all have landed. */
  load(job: LoadJob, onDone: () => void): void {
    const m = this.memory;
    const P = m.pageSize;
    for (let i = 0; i < job.hits.length; i++) Atomics.add(m.leases, job.pages[i] as number, 1);
    let index = 0;
    const batch = (): void => {
      const end = Math.min(job.hits.length, index + this.options.pagesPerBatch);
      const ok = this.withChecked(job.owner, job.pages, job.gens, index, end, true, () => {
        for (let i = index; i < end; i++) {
          const hit = job.hits[i] as HostPage;
          // Ground truth: data the entry's origin computed for these very tokens (confirmed at lookup) under the
          // loader's own salt is the loader's own, as a legitimate prefix-cache hit is; anything else, another
          // tenant's copy included, keeps its author and counts as foreign when read.
          const own = hit.salt === job.salt ? { from: hit.origin, to: job.owner } : undefined;
          m.copySlots(hit, 0, job.pages[i] as number, 0, P, job.owner, job.gens[i] as number, own);
        }
      });
      if (ok) this.counters.pagesLoaded += end - index;
      else this.counters.staleCopiesDropped++;
      for (let i = index; i < end; i++) Atomics.sub(m.leases, job.pages[i] as number, 1);
      index = end;
      if (index < job.hits.length) this.timers.setTimeout(batch, this.flight());
      else onDone();
      this.onProgress();
    };
    if (job.hits.length === 0) onDone();
    else this.timers.setTimeout(batch, this.flight());
  }

  /**
   * Runs `copy` on pages [from, to) of the job. With integrity, only if every page still belongs to `owner`
   * under the generation the copy was issued for (allocated, or for a read also parked pending release),
   * checked and copied under the page locks; returns whether it ran.
   */
  private withChecked(owner: number, pages: Int32Array, gens: Int32Array, from: number, to: number, writing: boolean, copy: () => void): boolean {
    if (!this.options.integrity) {
      copy();
      return true;
    }
    const m = this.memory;
    const locked = Array.from(pages.subarray(from, to)).sort((a, b) => a - b);
    for (const page of locked) m.lockPage(page);
    let fresh = true;
    for (let i = from; i < to && fresh; i++) {
      const page = pages[i] as number;
      const state = m.state[page];
      fresh =
        m.owner[page] === owner &&
        m.generation[page] === gens[i] &&
        (state === PageState.allocated || (!writing && state === PageState.pendingRelease));
    }
    if (fresh) copy();
    for (const page of locked) m.unlockPage(page);
    return fresh;
  }
}
