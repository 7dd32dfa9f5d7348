/**
 * The disaggregated mode's parts on their own, with time driven by hand: the shared-memory copy primitive
 * and its ground truth, page tags, deferred release, the KV transfer engine, and the host-offload tier.
 */
import { describe, expect, it } from 'vitest';
import { KvMemory, NEVER_WRITTEN, PageState } from '../../engine-under-test/src/kv-memory.js';
import { KvPool } from '../../engine-under-test/src/kv-pool.js';
import { InductionModel } from '../../engine-under-test/src/model.js';
import { TransferEngine } from '../../engine-under-test/src/disagg/transfer.js';
import { HostTier } from '../../engine-under-test/src/disagg/host-tier.js';
import { HostCopies } from '../../engine-under-test/src/disagg/host-copies.js';
import type { Timers } from '../../engine-under-test/src/disagg/timers.js';

/** Timers that fire only when the test says so, in due order. */
function manualTimers(): Timers & { runAll(): number; runNext(): boolean; pending(): number } {
  let now = 0;
  const queue: { at: number; fn: () => void }[] = [];
  const runNext = (): boolean => {
    queue.sort((a, b) => a.at - b.at);
    const next = queue.shift();
    if (next === undefined) return false;
    now = Math.max(now, next.at);
    next.fn();
    return true;
  };
  return {
    setTimeout: (fn, ms) => queue.push({ at: now + ms, fn }),
    now: () => now,
    runNext,
    runAll: () => {
      let n = 0;
      while (runNext()) n++;
      return n;
    },
    pending: () => queue.length,
  };
}

const P = 16;
const tokens = (n: number, seed = 1): Uint16Array => Uint16Array.from({ length: n }, (_, i) => 97 + ((i * 7 + seed) % 26));

describe('KV memory: copies and page tags', () => {
  it('carries ground-truth writer tags with the bytes and stamps the page tag for the copier', () => {
    const src = KvMemory.create({ numPages: 2, pageSize: P });
    const dst = KvMemory.create({ numPages: 2, pageSize: P });
    const k = new Float32Array(64).fill(0.5);
    for (let s = 0; s < 4; s++) src.writeKv(0, s, k, 0, k, 0, 7, 3);
    src.writeKv(0, 4, k, 0, k, 0, 9, 3); // a slot from someone else
    dst.copySlots(src, 0, 1, 0, 5, 42, 11);
    expect(Array.from(dst.slotWriter.subarray(P, P + 6))).toEqual([7, 7, 7, 7, 9, NEVER_WRITTEN]);
    expect([dst.tagWriter[1], dst.pageWriterGen[1], dst.tokensWritten[1]]).toEqual([42, 11, 5]);
    expect(dst.data[dst.keyOffset(1, 2)]).toBe(0.5);
    expect(dst.foreignReads(Int32Array.of(1), 5, 7)).toEqual({ pages: [1], writers: [9] });
    // A host-cache load: the entry's origin becomes the loader; anyone else keeps their tag.
    dst.copySlots(src, 0, 0, 0, 5, 42, 11, { from: 7, to: 42 });
    expect(Array.from(dst.slotWriter.subarray(0, 5))).toEqual([42, 42, 42, 42, 9]);
  });

  it('verifies page tags: only pages the reader wrote under their current allocation pass', () => {
    const pool = new KvPool({ numPages: 4, pageSize: P });
    const m = pool.memory;
    const model = new InductionModel(m, { kernel: 'js' });
    const a = pool.createTable(1);
    pool.allocate(a, 2);
    model.writeKv(a.pages, tokens(20), 0, 20, 1);
    expect(m.verifyTags(a.pages, 20, 1)).toBeUndefined();
    expect(m.verifyTags(a.pages, 20, 2)).toEqual({ index: 0, page: a.pages[0] });
    pool.release(a);
    const b = pool.createTable(2);
    pool.allocate(b, 4); // fifo: two fresh pages, then a's two stale ones
    model.writeKv(b.pages, tokens(40, 3), 0, 40, 2);
    expect(m.verifyTags(b.pages, 40, 2)).toBeUndefined();
    expect(m.verifyTags(b.pages, 64, 2)).toEqual({ index: 3, page: b.pages[3] }); // never written by b
  });
});

describe('KV pool: deferred release', () => {
  it('parks a released page while it is leased and frees it (zeroed, if asked) once the lease is gone', () => {
    const pool = new KvPool({ numPages: 4, pageSize: P, deferRelease: true, zeroOnRelease: true });
    const m = pool.memory;
    const a = pool.createTable(1);
    pool.allocate(a, 2);
    const [leased, free] = [a.pages[0] as number, a.pages[1] as number];
    m.writeKv(leased, 0, new Float32Array(64).fill(1), 0, new Float32Array(64).fill(1), 0, 1, 1);
    Atomics.add(m.leases, leased, 1);
    pool.release(a);
    expect(pool.stats()).toMatchObject({ freePages: 3, pendingReleasePages: 1 });
    expect([m.state[leased], m.owner[leased], m.state[free]]).toEqual([PageState.pendingRelease, 1, PageState.free]);
    expect(pool.checkInvariants()).toEqual([]);
    expect(pool.reclaim()).toBe(0);
    Atomics.sub(m.leases, leased, 1);
    expect(pool.reclaim()).toBe(1);
    expect(pool.stats()).toMatchObject({ freePages: 4, pendingReleasePages: 0 });
    expect(m.slotWriter[leased * P]).toBe(NEVER_WRITTEN);
    expect(pool.checkInvariants()).toEqual([]);
  });

  it('without deferRelease, frees a leased page at once', () => {
    const pool = new KvPool({ numPages: 2, pageSize: P });
    const a = pool.createTable(1);
    pool.allocate(a, 1);
    Atomics.add(pool.memory.leases, a.pages[0] as number, 1);
    pool.release(a);
    expect(pool.stats()).toMatchObject({ freePages: 2, pendingReleasePages: 0 });
  });
});

describe('KV transfer engine', () => {
  function setup(integrity: boolean) {
    const timers = manualTimers();
    const prefill = new KvPool({ numPages: 8, pageSize: P });
    const decode = new KvPool({ numPages: 8, pageSize: P });
    const model = new InductionModel(prefill.memory, { kernel: 'js' });
    const transfer = new TransferEngine(decode.memory, prefill.memory, { latencyMs: 4, seed: 1, batchTokens: 16, integrity }, timers);
    const src = prefill.createTable(5);
    prefill.allocate(src, 3);
    model.writeKv(src.pages, tokens(40), 0, 40, 5);
    const dst = decode.createTable(5);
    decode.allocate(dst, 3);
    const gens = dst.pages.map((p) => decode.memory.generation[p] as number);
    transfer.open({ room: 5, pages: dst.pages.slice(), gens, source: src.pages });
    return { timers, decode, transfer, dst };
  }

  it('lands posted batches one at a time, in order, tagged for the room, then reports the stream drained', () => {
    const { timers, decode, transfer, dst } = setup(false);
    transfer.post(5, 0, 40);
    let drained: number | undefined;
    transfer.finish(5, (landed) => (drained = landed));
    expect(timers.pending()).toBe(1); // one batch in flight per room
    timers.runNext();
    expect(decode.memory.tagWriter[dst.pages[0] as number]).toBe(5);
    expect(decode.memory.tagWriter[dst.pages[1] as number]).toBe(NEVER_WRITTEN);
    expect(drained).toBeUndefined();
    timers.runAll();
    expect(drained).toBe(40);
    expect(decode.memory.verifyTags(dst.pages, 40, 5)).toBeUndefined();
    expect(decode.memory.foreignReads(dst.pages, 40, 5)).toBeUndefined();
    expect(transfer.counters).toMatchObject({ batchesLanded: 3, tokensLanded: 40, lateBatchesLanded: 0 });
  });

  it('keeps landing posted batches after the room let its pages go: a late write into the next owner', () => {
    const { timers, decode, transfer, dst } = setup(false);
    transfer.post(5, 0, 40);
    transfer.finish(5, () => {});
    timers.runNext();
    decode.release(dst); // freed at once while two batches are still on the wire
    const next = decode.createTable(6);
    decode.allocate(next, 8);
    timers.runAll();
    expect(transfer.counters.lateBatchesLanded).toBe(2);
    const read = decode.memory.foreignReads(next.pages, 8 * P, 6);
    expect(read?.writers).toEqual([5]);
  });

  it('with integrity, drops a batch whose pages changed owner or generation, and writes nothing', () => {
    const { timers, decode, transfer, dst } = setup(true);
    transfer.post(5, 0, 40);
    let drained: number | undefined;
    transfer.finish(5, (landed) => (drained = landed));
    timers.runNext();
    const landedInTime = dst.pages[0];
    decode.release(dst);
    const next = decode.createTable(6);
    decode.allocate(next, 8);
    timers.runAll();
    expect(transfer.counters).toMatchObject({ batchesLanded: 1, staleBatchesDropped: 2, lateBatchesLanded: 0 });
    expect(drained).toBe(16);
    expect(decode.memory.foreignReads(next.pages, 8 * P, 6)?.pages).toEqual([landedInTime]); // only the batch that landed in time
  });
});

describe('host-offload tier', () => {
  it('finds the longest run of leading full pages, confirmed token by token, and evicts least recently used', () => {
    const tier = new HostTier(P, 3);
    const memory = KvMemory.create({ numPages: 4, pageSize: P });
    const timers = manualTimers();
    const copies = new HostCopies(memory, tier, { latencyMs: 1, seed: 1, pagesPerBatch: 2, integrity: false, maxQueuedPages: 16 }, timers, () => {});
    const prompt = tokens(3 * P + 5);
    const done: string[] = [];
    expect(copies.writeBack({ owner: 1, pages: Int32Array.of(0, 1, 2), gens: Int32Array.of(1, 1, 1), tokens: prompt.slice(0, 3 * P), salt: undefined }, () => done.push('wb'))).toBe(true);
    expect(Array.from(memory.leases.subarray(0, 3))).toEqual([1, 1, 1]);
    timers.runAll();
    expect(done).toEqual(['wb']);
    expect(Array.from(memory.leases.subarray(0, 3))).toEqual([0, 0, 0]);
    expect(tier.lookup(prompt, 3, undefined)).toHaveLength(3);
    const other = prompt.slice();
    other[P + 3] = 1; // differs inside page 1: only page 0 matches
    expect(tier.lookup(other, 3, undefined)).toHaveLength(1);
    tier.insert(tier.keys(tokens(P, 9), 1, undefined), tier.lookup(prompt, 1, undefined)); // a 4th key evicts the least recently used
    expect(tier.size).toBe(3);
  });

  it('honours cache_salt, and a load of another tenant\'s copy keeps its writer, so reading it counts as foreign', () => {
    const pool = new KvPool({ numPages: 8, pageSize: P });
    const tier = new HostTier(P, 8);
    const timers = manualTimers();
    const copies = new HostCopies(pool.memory, tier, { latencyMs: 1, seed: 1, pagesPerBatch: 4, integrity: false, maxQueuedPages: 16 }, timers, () => {});
    const prompt = tokens(2 * P + 3);
    const a = pool.createTable(1);
    pool.allocate(a, 2);
    for (const page of a.pages) for (let slot = 0; slot < P; slot++) pool.memory.writeKv(page, slot, new Float32Array(64), 0, new Float32Array(64), 0, 1, pool.memory.generation[page] as number);
    copies.writeBack({ owner: 1, pages: a.pages.slice(), gens: a.pages.map((p) => pool.memory.generation[p] as number), tokens: prompt.slice(0, 2 * P), salt: 'tenant-a' }, () => {});
    timers.runAll();
    expect(tier.lookup(prompt, 2, 'tenant-b')).toHaveLength(0);
    expect(tier.lookup(prompt, 2, undefined)).toHaveLength(0);
    const hits = tier.lookup(prompt, 2, 'tenant-a');
    expect(hits).toHaveLength(2);
    // The same tenant loading its own prefix: the copy becomes the loader's, nothing foreign.
    const own = pool.createTable(2);
    pool.allocate(own, 2);
    copies.load({ owner: 2, salt: 'tenant-a', pages: own.pages.slice(), gens: own.pages.map((p) => pool.memory.generation[p] as number), hits }, () => {});
    timers.runAll();
    expect(pool.memory.foreignReads(own.pages, 2 * P, 2)).toBeUndefined();
    // Had another tenant been handed the copy (a tier that shared across salts), ground truth names the writer.
    const other = pool.createTable(3);
    pool.allocate(other, 2);
    copies.load({ owner: 3, salt: 'tenant-b', pages: other.pages.slice(), gens: other.pages.map((p) => pool.memory.generation[p] as number), hits }, () => {});
    timers.runAll();
    expect(pool.memory.foreignReads(other.pages, 2 * P, 3)).toEqual({ pages: Array.from(other.pages), writers: [1] });
  });

  it('with integrity, drops a write-back whose pages were released and reused before the copy read them', () => {
    const pool = new KvPool({ numPages: 4, pageSize: P });
    const tier = new HostTier(P, 8);
    const timers = manualTimers();
    const copies = new HostCopies(pool.memory, tier, { latencyMs: 1, seed: 1, pagesPerBatch: 4, integrity: true, maxQueuedPages: 16 }, timers, () => {});
    const a = pool.createTable(1);
    pool.allocate(a, 2);
    const gens = a.pages.map((p) => pool.memory.generation[p] as number);
    copies.writeBack({ owner: 1, pages: a.pages.slice(), gens, tokens: tokens(2 * P), salt: undefined }, () => {});
    pool.release(a); // released when the copy was issued, not when it is done
    pool.allocate(pool.createTable(2), 4);
    timers.runAll();
    expect(copies.counters).toMatchObject({ staleCopiesDropped: 1, pagesWrittenBack: 0 });
    expect(tier.size).toBe(0);
  });
});
