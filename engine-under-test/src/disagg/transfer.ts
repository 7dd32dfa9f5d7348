/**
 * KV transfer from prefill's pool into decode's: one-sided writes into decode's shared memory, like RDMA.
 *
 * Each room has a stream. Prefill posts the positions it has computed (a chunk at a time); they queue on the
 * room's stream, which sends them in batches of up to `batchTokens` (contiguous queued positions coalesce,
 * so a link slower than prefill still moves full batches). A stream has one batch in flight at a time; its flight
 * time is random with mean `latencyMs` (the batches of a room arrive in order, like writes on one queue
 * pair; different rooms' streams run side by side and do not keep pace with one another). What was posted
 * cannot be recalled (transfers are posted asynchronously, as NIXL does): aborting a room stops prefill from
 * computing and posting more, not what it already posted. That is the "stop writing" that "stop computing"
 * does not imply, and why decode must not reuse a room's pages before prefill reports the stream drained.
 *
 * Landing copies the batch's slots from prefill's pages (the source must stay put until the stream drains)
 * to decode's, carrying ground-truth writer tags and stamping decode's page tag with the room and the page
 * generation decode announced at bootstrap. With `integrity` (the `transfer-integrity` defense) a batch
 * carries that room id, those generations and a checksum of its source; it lands only if, under the target
 * pages' locks, every page is still allocated to the room under the announced generation and the source
 * still matches the checksum. Otherwise it is dropped and counted.
 */
import { PageState, type KvMemory } from '../kv-memory.js';
import { slotsChecksum } from './checksum.js';
import { flightTimes, type Timers } from './timers.js';

export interface TransferOptions {
  /** Mean flight time of one batch (exponentially distributed; see timers.ts). */
  latencyMs: number;
  /** Seeds the flight times. */
  seed: number;
  batchTokens: number;
  integrity: boolean;
}

export interface TransferTarget {
  room: number;
  /** Decode's page table for the room, and each page's generation at bootstrap. */
  pages: Int32Array;
  gens: Int32Array;
  /** Prefill's pages holding the room's computed KV (same position -> page-index mapping). */
  source: Int32Array;
}

interface Batch {
  from: number;
  to: number;
  checksum: number;
}

interface Stream {
  target: TransferTarget;
  /** Posted, not yet sent: contiguous [from, to) ranges in position order. */
  queue: { from: number; to: number }[];
  busy: boolean;
  closing: boolean;
  landedTokens: number;
  onDrained: ((landedTokens: number) => void) | undefined;
}

export interface TransferCounters {
  batchesLanded: number;
  /** Ground truth: batches that landed on a page its room no longer held (a late write). */
  lateBatchesLanded: number;
  tokensLanded: number;
  staleBatchesDropped: number;
  busyMs: number;
}

export class TransferEngine {
  private readonly streams = new Map<number, Stream>();
  private active = 0;
  private busySince = 0;
  private readonly flight: () => number;
  readonly counters: TransferCounters = { batchesLanded: 0, lateBatchesLanded: 0, tokensLanded: 0, staleBatchesDropped: 0, busyMs: 0 };

  constructor(
    private readonly dst: KvMemory,
    private readonly src: KvMemory,
    private readonly options: TransferOptions,
    private readonly timers: Timers,
    /** Called after each batch lands or is dropped (the caller republishes its stats). */
    private readonly onProgress: () => void = () => {},
  ) {
    if (dst.pageSize !== src.pageSize) throw new RangeError('prefill and decode pools must share a page size');
    this.flight = flightTimes(options.latencyMs, options.seed);
  }

  open(target: TransferTarget): void {
    if (this.streams.has(target.room)) throw new Error(`room ${target.room} already has a transfer stream`);
    this.streams.set(target.room, { target, queue: [], busy: false, closing: false, landedTokens: 0, onDrained: undefined });
  }

  has(room: number): boolean {
    return this.streams.has(room);
  }

  /** Queues positions [from, to) of the room for landing. */
  post(room: number, from: number, to: number): void {
    const stream = this.stream(room);
    if (stream.closing) throw new Error(`room ${room}: post after finish`);
    if (to > from) stream.queue.push({ from, to });
    this.pump(stream);
  }

  /** The next batch: contiguous queued positions, at most batchTokens; tagged when it goes on the wire. */
  private nextBatch(stream: Stream): Batch | undefined {
    const head = stream.queue[0];
    if (head === undefined) return undefined;
    const { batchTokens, integrity } = this.options;
    const from = head.from;
    let to = from;
    while (stream.queue.length > 0) {
      const range = stream.queue[0] as { from: number; to: number };
      if (range.from !== to || to - from >= batchTokens) break;
      const take = Math.min(range.to, from + batchTokens);
      to = take;
      if (take === range.to) stream.queue.shift();
      else range.from = take;
    }
    return { from, to, checksum: integrity ? slotsChecksum(this.src, stream.target.source, from, to) : 0 };
  }

  /** No more posts for the room; `onDrained` runs once every posted batch has landed (or been dropped). */
  finish(room: number, onDrained: (landedTokens: number) => void): void {
    const stream = this.stream(room);
    stream.closing = true;
    stream.onDrained = onDrained;
    this.pump(stream);
  }

  private stream(room: number): Stream {
    const stream = this.streams.get(room);
    if (stream === undefined) throw new Error(`room ${room} has no transfer stream`);
    return stream;
  }

  private pump(stream: Stream): void {
    if (stream.busy) return;
    const batch = this.nextBatch(stream);
    if (batch === undefined) {
      if (stream.closing) {
        this.streams.delete(stream.target.room);
        stream.onDrained?.(stream.landedTokens);
      }
      return;
    }
    stream.busy = true;
    if (this.active++ === 0) this.busySince = this.timers.now();
    this.timers.setTimeout(() => {
      this.land(stream, batch);
      stream.busy = false;
      if (--this.active === 0) this.counters.busyMs += this.timers.now() - this.busySince;
      this.onProgress();
      this.pump(stream);
    }, this.flight());
  }

  private land(stream: Stream, batch: Batch): void {
    const { target } = stream;
    const P = this.dst.pageSize;
    const first = Math.floor(batch.from / P);
    const last = Math.floor((batch.to - 1) / P);
    const dst = this.dst;
    /** Every page still the room's, under the generation it was announced with (parked pages count only if `held`). */
    const stillOurs = (held: boolean): boolean => {
      for (let i = first; i <= last; i++) {
        const page = target.pages[i] as number;
        const state = dst.state[page];
        if (dst.owner[page] !== target.room || dst.generation[page] !== target.gens[i]) return false;
        if (state !== PageState.allocated && !(held && state === PageState.pendingRelease)) return false;
      }
      return true;
    };
    // The batch lands under its pages' locks (one global order, ascending: no deadlock with another multi-page
    // locker), so a decode read, which takes the same locks (KvMemory.readFenced), sees it wholly or not at all.
    const locked: number[] = [];
    for (let i = first; i <= last; i++) locked.push(target.pages[i] as number);
    locked.sort((a, b) => a - b);
    const unique = locked.filter((page, i) => i === 0 || page !== locked[i - 1]);
    if (!this.options.integrity) {
      for (const page of unique) dst.lockPage(page);
      // Ground truth only (nothing here acts on it): did this one-sided write land on pages the room no longer holds?
      if (!stillOurs(true)) this.counters.lateBatchesLanded++;
      this.copy(target, batch);
      for (const page of unique) dst.unlockPage(page);
    } else {
      for (const page of unique) dst.lockPage(page);
      const fresh = stillOurs(false) && slotsChecksum(this.src, target.source, batch.from, batch.to) === batch.checksum;
      if (fresh) this.copy(target, batch);
      for (const page of unique) dst.unlockPage(page);
      if (!fresh) {
        this.counters.staleBatchesDropped++;
        return;
      }
    }
    this.counters.batchesLanded++;
    this.counters.tokensLanded += batch.to - batch.from;
    stream.landedTokens += batch.to - batch.from;
  }

  private copy(target: TransferTarget, batch: Batch): void {
    const P = this.dst.pageSize;
    for (let pos = batch.from; pos < batch.to; ) {
      const index = Math.floor(pos / P);
      const slot = pos - index * P;
      const n = Math.min(P - slot, batch.to - pos);
      this.dst.copySlots(this.src, target.source[index] as number, target.pages[index] as number, slot, n, target.room, target.gens[index] as number);
      pos += n;
    }
  }
}
