import { describe, expect, it } from 'vitest';
import { KvMemory, MIXED_WRITERS, NEVER_WRITTEN, NO_OWNER, PageState } from '../../engine-under-test/src/kv-memory.js';
import { KvPool, KvPoolError, type PageTable } from '../../engine-under-test/src/kv-pool.js';
import { InductionModel } from '../../engine-under-test/src/model.js';
import { mulberry32 } from '../../engine-under-test/src/hash.js';

describe('KV pool', () => {
  it('hands out pages in fifo order: freed pages go to the back of the line', () => {
    const pool = new KvPool({ numPages: 8, freeList: 'fifo' });
    const a = pool.createTable(1);
    expect(pool.allocate(a, 3)).toMatchObject({ ok: true, pages: Int32Array.of(0, 1, 2) });
    pool.release(a);
    const b = pool.createTable(2);
    expect(pool.allocate(b, 6)).toMatchObject({ ok: true, pages: Int32Array.of(3, 4, 5, 6, 7, 0) });
  });

  it('hands out pages in lifo order: a just-freed page is reused first', () => {
    const pool = new KvPool({ numPages: 8, freeList: 'lifo' });
    const a = pool.createTable(1);
    pool.allocate(a, 3);
    expect(Array.from(a.pages)).toEqual([7, 6, 5]);
    pool.release(a);
    const b = pool.createTable(2);
    pool.allocate(b, 2);
    expect(Array.from(b.pages)).toEqual([5, 6]);
  });

  it('reports exhaustion as a result and takes nothing', () => {
    const pool = new KvPool({ numPages: 4 });
    const a = pool.createTable(1);
    pool.allocate(a, 3);
    const b = pool.createTable(2);
    const result = pool.allocate(b, 2);
    expect(result).toEqual({ ok: false, code: 'KV_POOL_EXHAUSTED', requested: 2, free: 1 });
    expect(pool.freePages).toBe(1);
    expect(b.length).toBe(0);
    expect(pool.checkInvariants()).toEqual([]);
  });

  it('tracks owner, generation and state per page; reuse does not zero by default', () => {
    const pool = new KvPool({ numPages: 2 });
    const m = pool.memory;
    const a = pool.createTable(10);
    pool.allocate(a, 1);
    expect([m.owner[0], m.generation[0], m.state[0]]).toEqual([10, 1, PageState.allocated]);
    m.writeKv(0, 0, new Float32Array(64).fill(0.5), 0, new Float32Array(64).fill(0.25), 0, 10, 1);
    pool.release(a);
    expect([m.owner[0], m.state[0]]).toEqual([NO_OWNER, PageState.free]);
    const b = pool.createTable(11);
    pool.allocate(b, 2); // pages 1, then 0 again
    expect(m.generation[0]).toBe(2);
    expect(m.data[m.keyOffset(0, 0)]).toBe(0.5); // stale data still there
    expect(m.slotWriter[0]).toBe(10); // and still names its author
  });

  it('zeroes data and writer tags on release when asked to', () => {
    const pool = new KvPool({ numPages: 1, zeroOnRelease: true });
    const m = pool.memory;
    const a = pool.createTable(1);
    pool.allocate(a, 1);
    m.writeKv(0, 3, new Float32Array(64).fill(1), 0, new Float32Array(64).fill(1), 0, 1, 1);
    pool.release(a);
    expect(m.data.every((x) => x === 0)).toBe(true);
    expect(m.slotWriter[3]).toBe(NEVER_WRITTEN);
    expect(m.pageWriter[0]).toBe(NEVER_WRITTEN);
  });

  it('refuses to release a page its table does not own, and a second table for one owner', () => {
    const pool = new KvPool({ numPages: 4 });
    const a = pool.createTable(1);
    pool.allocate(a, 2);
    pool.memory.owner[a.pages[1] as number] = 99; // corrupt ownership behind the allocator's back
    expect(() => pool.release(a)).toThrow(KvPoolError);
    expect(() => pool.createTable(1)).toThrow(/already has a page table/);
  });

  it('detects a page with two owners and a leaked page', () => {
    const pool = new KvPool({ numPages: 4 });
    const a = pool.createTable(1);
    pool.allocate(a, 2);
    const b = pool.createTable(2);
    pool.allocate(b, 1);
    (b as unknown as { append(p: number): void }).append(a.pages[0] as number);
    expect(pool.checkInvariants().some((p) => p.includes('two owners'))).toBe(true);

    const fresh = new KvPool({ numPages: 4 });
    const c = fresh.createTable(3);
    fresh.allocate(c, 2);
    (c as unknown as { clear(): void }).clear(); // the table forgets its pages: nobody can free them
    expect(fresh.checkInvariants().filter((p) => p.includes('leaked'))).toHaveLength(2);
  });

  it('keeps its invariants through a randomised workload with aborts, and ends with every page free', () => {
    const pageSize = 16;
    const pool = new KvPool({ numPages: 200, pageSize });
    const model = new InductionModel(pool.memory);
    const random = mulberry32(1234);
    const live = new Map<number, { table: PageTable; tokens: Uint16Array; written: number }>();
    let nextOwner = 1;
    let refused = 0;
    for (let op = 0; op < 3000; op++) {
      const r = random();
      if (r < 0.35) {
        const length = 1 + Math.floor(random() * 700);
        const table = pool.createTable(nextOwner);
        const result = pool.allocate(table, pool.pagesFor(length));
        if (!result.ok) {
          refused++;
          pool.release(table);
          continue;
        }
        const tokens = Uint16Array.from({ length }, () => Math.floor(random() * 256));
        live.set(nextOwner++, { table, tokens, written: 0 });
      } else if (r < 0.8 && live.size > 0) {
        // write part of some sequence (a prefill chunk)
        const entries = [...live.entries()];
        const [owner, s] = entries[Math.floor(random() * entries.length)] as [number, { table: PageTable; tokens: Uint16Array; written: number }];
        const to = Math.min(s.tokens.length, s.written + 1 + Math.floor(random() * 200));
        model.writeKv(s.table.pages, s.tokens, s.written, to, owner);
        s.written = to;
      } else if (live.size > 0) {
        // finish or abort (mid-write or not): pages go back at once
        const entries = [...live.keys()];
        const owner = entries[Math.floor(random() * entries.length)] as number;
        pool.release((live.get(owner) as { table: PageTable }).table);
        live.delete(owner);
      }
      if (op % 100 === 0) expect(pool.checkInvariants()).toEqual([]);
    }
    expect(refused).toBeGreaterThan(0); // the workload did press against capacity
    for (const { table } of live.values()) pool.release(table);
    expect(pool.checkInvariants()).toEqual([]);
    expect(pool.freePages).toBe(200);
    const stats = pool.stats();
    expect(stats.allocatedPagesTotal).toBe(stats.releasedPagesTotal);
  });
});

describe('KV memory', () => {
  it('summarises a page written by one request and marks a partly overwritten page as mixed', () => {
    const m = KvMemory.create({ numPages: 2, pageSize: 4 });
    const k = new Float32Array(64);
    for (let s = 0; s < 4; s++) m.writeKv(0, s, k, 0, k, 0, 7, 1);
    expect(m.pageWriter[0]).toBe(7);
    m.writeKv(0, 0, k, 0, k, 0, 8, 2);
    expect(m.pageWriter[0]).toBe(MIXED_WRITERS);
    expect(m.tokensWritten[0]).toBe(4);
    for (let s = 1; s < 4; s++) m.writeKv(0, s, k, 0, k, 0, 8, 2);
    expect(m.pageWriter[0]).toBe(8);
  });

  it('reports exactly the foreign slots a read covers', () => {
    const m = KvMemory.create({ numPages: 3, pageSize: 4 });
    const k = new Float32Array(64);
    for (let s = 0; s < 4; s++) m.writeKv(0, s, k, 0, k, 0, 1, 1); // page 0: request 1
    for (let s = 0; s < 4; s++) m.writeKv(1, s, k, 0, k, 0, 2, 1); // page 1: request 2
    m.writeKv(2, 0, k, 0, k, 0, 1, 1); // page 2: slot 0 by 1, slots 1-3 by 3
    for (let s = 1; s < 4; s++) m.writeKv(2, s, k, 0, k, 0, 3, 1);
    const table = Int32Array.of(0, 2, 1);
    expect(m.foreignReads(table, 4, 1)).toBeUndefined();
    expect(m.foreignReads(table, 5, 1)).toBeUndefined(); // only slot 0 of page 2
    expect(m.foreignReads(table, 6, 1)).toEqual({ pages: [2], writers: [3] });
    expect(m.foreignReads(table, 12, 1)).toEqual({ pages: [2, 1], writers: [3, 2] });
  });

  it('can be attached from its shared buffer or its WebAssembly.Memory, seeing the same bytes and tags', () => {
    const m = KvMemory.create({ numPages: 8, pageSize: 16 });
    expect(m.buffer).toBeInstanceOf(SharedArrayBuffer);
    const viaBuffer = KvMemory.attach({ numPages: 8, pageSize: 16 }, m.buffer as SharedArrayBuffer);
    const viaMemory = KvMemory.attach({ numPages: 8, pageSize: 16 }, m.wasmMemory as WebAssembly.Memory);
    const v = new Float32Array(64).fill(3);
    viaBuffer.writeKv(5, 2, v, 0, v, 0, 42, 9); // e.g. a prefill worker writing into decode's pool
    expect(m.data[m.keyOffset(5, 2)]).toBe(3);
    expect(m.slotWriter[5 * 16 + 2]).toBe(42);
    expect(m.pageWriterGen[5]).toBe(9);
    expect(viaMemory.wasmMemory).toBeDefined();
    expect(() => KvMemory.attach({ numPages: 9, pageSize: 16 }, m.buffer as SharedArrayBuffer)).toThrow(/was not created as a KV memory/);
    const pool = new KvPool({ numPages: 8, memory: m });
    expect(pool.freePages).toBe(8);
  });

  it('rejects layouts the kernel cannot serve', () => {
    expect(() => KvMemory.create({ numPages: 1, pageSize: 6 })).toThrow(/multiple of 4/);
    expect(() => KvMemory.create({ numPages: 0, pageSize: 16 })).toThrow(/numPages/);
    expect(() => KvMemory.create({ numPages: 10_000_000, pageSize: 16 })).toThrow(/4 GiB/);
  });
});
