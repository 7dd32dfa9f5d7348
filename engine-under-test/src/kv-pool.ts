/**
 * The KV pool's allocator: pages of a `KvMemory` handed to sequences through page tables.
 *
 * - One page table per owner (a request id, or a bootstrap room id in the disaggregated mode). A page
 *   is in exactly one place: the free list or one owner's table. `checkInvariants()` verifies it.
 * - Allocation takes pages from the free list in its policy's order, increments each page's generation
 *   and marks it allocated. It never throws for lack of pages: it returns `{ok: false}` and takes nothing,
 *   so a caller cannot end up holding half a reservation.
 * - Release returns a table's pages to the free list at once. Data and writer tags stay as they were
 *   unless `zeroOnRelease` is set: real engines do not clear reused KV memory, which is what makes a read
 *   of the wrong page a leak rather than a read of zeros.
 * - With `deferRelease` (the `deferred-release` defense), a released page that still has leases (a transfer
 *   or host copy that may still touch it, counted in shared memory by whoever issued it) is parked in a
 *   pending set instead; `reclaim()` frees parked pages whose leases are gone. Whatever the caller's own
 *   protocol gets wrong about "safe to reallocate", a page cannot be handed out while a write may land.
 * - Ownership changes happen under the page's lock (see kv-memory.ts), so a checked copy on another
 *   thread sees owner and generation either before or after a reallocation, never half of it.
 */
import { KvMemory, NO_OWNER, PageState } from './kv-memory.js';
import { FreeList, type FreeListPolicy } from './free-list.js';

export interface KvPoolOptions {
  numPages: number;
  /** Slots per page (multiple of 4). @default 16 */
  pageSize?: number;
  /** @default 'fifo' */
  freeList?: FreeListPolicy;
  /** Zero a page's data and writer tags when it is released. @default false */
  zeroOnRelease?: boolean;
  /** Build the pool over an existing memory instead of allocating one (its metadata must be fresh). */
  memory?: KvMemory;
  /** Keep released pages with leases off the free list until the leases are gone. @default false */
  deferRelease?: boolean;
}

export type AllocationResult =
  | { ok: true; pages: Int32Array }
  | { ok: false; code: 'KV_POOL_EXHAUSTED'; requested: number; free: number };

export class KvPoolError extends Error {
  constructor(readonly code: 'KV_TABLE_EXISTS' | 'KV_TABLE_RELEASED' | 'KV_PAGE_NOT_OWNED', message: string) {
    super(message);
    this.name = 'KvPoolError';
  }
}

/** The pages one owner holds, in sequence order: position i lives in pages[floor(i / pageSize)]. */
export class PageTable {
  private table: Int32Array;
  private count = 0;
  released = false;

  constructor(readonly owner: number, capacity = 16) {
    this.table = new Int32Array(Math.max(1, capacity));
  }

  get length(): number {
    return this.count;
  }

  /** A view of the live entries (valid until the table grows). */
  get pages(): Int32Array {
    return this.table.subarray(0, this.count);
  }

  /** @internal used by KvPool */
  append(page: number): void {
    if (this.count === this.table.length) {
      const grown = new Int32Array(this.table.length * 2);
      grown.set(this.table);
      this.table = grown;
    }
    this.table[this.count++] = page;
  }

  /** @internal used by KvPool */
  clear(): void {
    this.count = 0;
  }
}

export interface KvPoolStats {
  numPages: number;
  pageSize: number;
  capacityTokens: number;
  freePages: number;
  usedPages: number;
  /** Pages handed out since creation (monotonic). */
  allocatedPagesTotal: number;
  /** Pages returned since creation (monotonic). */
  releasedPagesTotal: number;
  tables: number;
  /** Released pages held back until no copy or transfer can touch them (deferred release). */
  pendingReleasePages: number;
  /** Pages ever held back that way (monotonic): shows deferred release engaged. */
  parkedPagesTotal: number;
}

export class KvPool {
  readonly memory: KvMemory;
  readonly numPages: number;
  readonly pageSize: number;
  readonly policy: FreeListPolicy;
  readonly zeroOnRelease: boolean;
  readonly deferRelease: boolean;
  private readonly free: FreeList;
  /** Pages released while leased, in release order (deferRelease only). */
  private pending: number[] = [];
  private readonly tables = new Map<number, PageTable>();
  private allocatedTotal = 0;
  private releasedTotal = 0;
  private parkedTotal = 0;

  constructor(options: KvPoolOptions) {
    this.memory = options.memory ?? KvMemory.create({ numPages: options.numPages, pageSize: options.pageSize ?? 16 });
    this.numPages = this.memory.numPages;
    this.pageSize = this.memory.pageSize;
    this.policy = options.freeList ?? 'fifo';
    this.zeroOnRelease = options.zeroOnRelease ?? false;
    this.deferRelease = options.deferRelease ?? false;
    this.free = new FreeList(this.numPages, this.policy);
    for (let p = 0; p < this.numPages; p++) this.free.push(p);
  }

  get freePages(): number {
    return this.free.size;
  }

  get capacityTokens(): number {
    return this.numPages * this.pageSize;
  }

  pagesFor(tokens: number): number {
    return Math.ceil(tokens / this.pageSize);
  }

  stats(): KvPoolStats {
    return {
      numPages: this.numPages,
      pageSize: this.pageSize,
      capacityTokens: this.capacityTokens,
      freePages: this.free.size,
      usedPages: this.numPages - this.free.size,
      allocatedPagesTotal: this.allocatedTotal,
      releasedPagesTotal: this.releasedTotal,
      tables: this.tables.size,
      pendingReleasePages: this.pending.length,
      parkedPagesTotal: this.parkedTotal,
    };
  }

  createTable(owner: number, capacityPages = 16): PageTable {
    if (!Number.isInteger(owner) || owner < 0 || owner > 0x7fffffff) throw new RangeError(`owner must be an int32 >= 0, got ${owner}`);
    if (this.tables.has(owner)) throw new KvPoolError('KV_TABLE_EXISTS', `owner ${owner} already has a page table`);
    const table = new PageTable(owner, capacityPages);
    this.tables.set(owner, table);
    return table;
  }

  /** Appends `count` pages to `table`, or takes nothing and reports why. */
  allocate(table: PageTable, count: number): AllocationResult {
    if (table.released) throw new KvPoolError('KV_TABLE_RELEASED', `page table of owner ${table.owner} was already released`);
    if (count > this.free.size) return { ok: false, code: 'KV_POOL_EXHAUSTED', requested: count, free: this.free.size };
    const m = this.memory;
    const pages = new Int32Array(count);
    for (let i = 0; i < count; i++) {
      const page = this.free.pop();
      m.lockPage(page);
      m.owner[page] = table.owner;
      m.generation[page] = ((m.generation[page] as number) + 1) | 0;
      m.state[page] = PageState.allocated;
      m.tokensWritten[page] = 0;
      m.unlockPage(page);
      table.append(page);
      pages[i] = page;
    }
    this.allocatedTotal += count;
    return { ok: true, pages };
  }

  /** Returns every page of `table` to the free list and retires the table. Returns the page count. */
  release(table: PageTable): number {
    if (table.released) return 0;
    const m = this.memory;
    const pages = table.pages;
    for (let i = 0; i < pages.length; i++) {
      const page = pages[i] as number;
      if (m.owner[page] !== table.owner) {
        throw new KvPoolError('KV_PAGE_NOT_OWNED', `page ${page} is owned by ${m.owner[page]}, not by ${table.owner}`);
      }
    }
    for (let i = 0; i < pages.length; i++) {
      const page = pages[i] as number;
      if (this.deferRelease && Atomics.load(m.leases, page) > 0) {
        m.state[page] = PageState.pendingRelease;
        this.pending.push(page);
        this.parkedTotal++;
      } else {
        this.freePage(page);
      }
    }
    const count = pages.length;
    this.releasedTotal += count;
    table.clear();
    table.released = true;
    this.tables.delete(table.owner);
    return count;
  }

  /** Frees parked pages whose leases are gone; returns how many. Cheap when nothing is parked. */
  reclaim(): number {
    if (this.pending.length === 0) return 0;
    const m = this.memory;
    const still: number[] = [];
    let freed = 0;
    for (const page of this.pending) {
      if (Atomics.load(m.leases, page) > 0) still.push(page);
      else {
        this.freePage(page);
        freed++;
      }
    }
    this.pending = still;
    return freed;
  }

  private freePage(page: number): void {
    const m = this.memory;
    m.lockPage(page);
    m.owner[page] = NO_OWNER;
    m.state[page] = PageState.free;
    if (this.zeroOnRelease) m.zeroPage(page);
    m.unlockPage(page);
    this.free.push(page);
  }

  /** The free list in hand-out order (tests, debugging). */
  freeListOrder(): number[] {
    return this.free.toArray();
  }

  /** Every violated invariant, as readable sentences; empty when the pool is consistent. */
  checkInvariants(): string[] {
    const problems: string[] = [];
    const m = this.memory;
    const where = new Int32Array(this.numPages).fill(-2); // -2 nowhere, -1 free list, else owner
    for (const page of this.free.toArray()) {
      if (where[page] !== -2) problems.push(`page ${page} is on the free list twice`);
      where[page] = -1;
      if (m.state[page] !== PageState.free) problems.push(`page ${page} is on the free list but in state ${m.state[page]}`);
      if (m.owner[page] !== NO_OWNER) problems.push(`page ${page} is on the free list but owned by ${m.owner[page]}`);
    }
    for (const [owner, table] of this.tables) {
      for (const page of table.pages) {
        const seen = where[page] as number;
        if (seen === -1) problems.push(`page ${page} is both free and in the table of ${owner}`);
        else if (seen !== -2) problems.push(`page ${page} has two owners: ${seen} and ${owner}`);
        where[page] = owner;
        if (m.owner[page] !== owner) problems.push(`page ${page} is in the table of ${owner} but tagged owner ${m.owner[page]}`);
        if (m.state[page] !== PageState.allocated) problems.push(`page ${page} is in a table but in state ${m.state[page]}`);
      }
    }
    for (const page of this.pending) {
      if (where[page] !== -2) problems.push(`page ${page} is pending release but also free or in a table`);
      where[page] = -3;
      if (m.state[page] !== PageState.pendingRelease) problems.push(`page ${page} is pending release but in state ${m.state[page]}`);
    }
    for (let p = 0; p < this.numPages; p++) if (where[p] === -2) problems.push(`page ${p} is neither free nor in any table (leaked)`);
    return problems;
  }
}
