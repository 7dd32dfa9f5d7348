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
 * - Sharing (the prefix cache): `share` puts pages another sequence computed at the head of a fresh table.
 *   A page then has a reference count (tables holding it) and the owner SHARED_OWNER; it returns to the free
 *   list only when its last holder releases it. Free pages may still be cached (their keys are kept until
 *   the allocator hands them out again, when `onReuse` tells the cache), so sharing can take a page back
 *   off the free list.
 * - Ownership changes happen under the page's lock (see kv-memory.ts), so a checked copy on another
 *   thread sees owner and generation either before or after a reallocation, never half of it.
 */
import { KvMemory, NEVER_WRITTEN, NO_OWNER, PageState } from './kv-memory.js';

/** Owner tag of a page held through the prefix cache (by one table or several). */
export const SHARED_OWNER = -3;
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
  /** Called when a free page's contents stop being what they were: handed out again, or zeroed. */
  onReuse?: (page: number) => void;
  /**
   * Whether a page holds a prefix-cache entry. With `zeroOnRelease`, such a page is zeroed when it is handed
   * out again rather than when released (zeroing it at release would empty the cache); either way no new
   * owner ever sees its data.
   */
  isCached?: (page: number) => boolean;
}

export type AllocationResult =
  | { ok: true; pages: Int32Array }
  | { ok: false; code: 'KV_POOL_EXHAUSTED'; requested: number; free: number };

export class KvPoolError extends Error {
  constructor(readonly code: 'KV_TABLE_EXISTS' | 'KV_TABLE_RELEASED' | 'KV_PAGE_NOT_OWNED' | 'KV_SHARE_INVALID', message: string) {
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
  /** zeroOnRelease: pages zeroed while they still held a request's data (monotonic). */
  zeroedPagesTotal: number;
  /** Pages currently held by more than one table (pools with a prefix cache). */
  sharedPages?: number;
  /** Page references handed out by `share` (monotonic). */
  sharedPagesTotal?: number;
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
  /** Tables holding each page (main thread only). */
  private readonly refs: Int32Array;
  private readonly onReuse: ((page: number) => void) | undefined;
  private readonly isCached: ((page: number) => boolean) | undefined;
  /** Free pages whose zeroing was deferred until they are handed out (cached pages, zeroOnRelease). */
  private readonly zeroPending: Uint8Array;
  private sharedTotal = 0;
  private allocatedTotal = 0;
  private releasedTotal = 0;
  private parkedTotal = 0;
  private zeroedTotal = 0;

  constructor(options: KvPoolOptions) {
    this.memory = options.memory ?? KvMemory.create({ numPages: options.numPages, pageSize: options.pageSize ?? 16 });
    this.numPages = this.memory.numPages;
    this.pageSize = this.memory.pageSize;
    this.policy = options.freeList ?? 'fifo';
    this.zeroOnRelease = options.zeroOnRelease ?? false;
    this.deferRelease = options.deferRelease ?? false;
    this.refs = new Int32Array(this.numPages);
    this.onReuse = options.onReuse;
    this.isCached = options.isCached;
    this.zeroPending = new Uint8Array(this.numPages);
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
      zeroedPagesTotal: this.zeroedTotal,
      sharedPages: this.refs.reduce((n, r) => (r > 1 ? n + 1 : n), 0),
      sharedPagesTotal: this.sharedTotal,
    };
  }

  createTable(owner: number, capacityPages = 16): PageTable {
    if (!Number.isInteger(owner) || owner < 0 || owner > 0x7fffffff) throw new RangeError(`owner must be an int32 >= 0, got ${owner}`);
    if (this.tables.has(owner)) throw new KvPoolError('KV_TABLE_EXISTS', `owner ${owner} already has a page table`);
    const table = new PageTable(owner, capacityPages);
    this.tables.set(owner, table);
    return table;
  }

  /** The page is on the free list (possibly still cached). */
  isFree(page: number): boolean {
    return this.free.has(page);
  }

  /** Whether `share` can take the page: free (its contents kept), or held by some table (not parked). */
  canShare(page: number): boolean {
    return this.free.has(page) || ((this.refs[page] as number) > 0 && this.memory.state[page] === PageState.allocated);
  }

  /**
   * Puts `pages` (cached pages: held by other tables, or free with their contents intact) at the head of an
   * empty `table` and pins them. Free ones come off the free list; the caller checked there is room.
   */
  share(table: PageTable, pages: readonly number[]): void {
    if (table.released) throw new KvPoolError('KV_TABLE_RELEASED', `page table of owner ${table.owner} was already released`);
    if (table.length !== 0) throw new KvPoolError('KV_SHARE_INVALID', `shared pages must come first; table of ${table.owner} already holds ${table.length}`);
    const m = this.memory;
    for (const page of pages) {
      if (this.free.remove(page)) {
        m.lockPage(page);
        m.state[page] = PageState.allocated;
        m.unlockPage(page);
      } else if ((this.refs[page] as number) < 1 || m.state[page] !== PageState.allocated) {
        throw new KvPoolError('KV_SHARE_INVALID', `page ${page} is neither free nor held; it cannot be shared`);
      }
      m.lockPage(page);
      m.owner[page] = SHARED_OWNER;
      m.unlockPage(page);
      this.refs[page] = (this.refs[page] as number) + 1;
      table.append(page);
      this.sharedTotal++;
    }
  }

  /** Appends `count` pages to `table`, or takes nothing and reports why. */
  allocate(table: PageTable, count: number): AllocationResult {
    if (table.released) throw new KvPoolError('KV_TABLE_RELEASED', `page table of owner ${table.owner} was already released`);
    if (count > this.free.size) return { ok: false, code: 'KV_POOL_EXHAUSTED', requested: count, free: this.free.size };
    const m = this.memory;
    const pages = new Int32Array(count);
    for (let i = 0; i < count; i++) {
      const page = this.free.pop();
      this.onReuse?.(page);
      this.refs[page] = 1;
      m.lockPage(page);
      if (this.zeroPending[page] === 1) {
        this.zero(page);
        this.zeroPending[page] = 0;
      }
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
      if (m.owner[page] !== table.owner && m.owner[page] !== SHARED_OWNER) {
        throw new KvPoolError('KV_PAGE_NOT_OWNED', `page ${page} is owned by ${m.owner[page]}, not by ${table.owner}`);
      }
    }
    let returned = 0;
    for (let i = 0; i < pages.length; i++) {
      const page = pages[i] as number;
      const refs = (this.refs[page] as number) - 1;
      this.refs[page] = refs;
      if (refs > 0) continue; // another table still holds it
      returned++;
      if (this.deferRelease && Atomics.load(m.leases, page) > 0) {
        m.state[page] = PageState.pendingRelease;
        this.pending.push(page);
        this.parkedTotal++;
      } else {
        this.freePage(page);
      }
    }
    const count = pages.length;
    this.releasedTotal += returned;
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
    if (this.zeroOnRelease) {
      if (this.isCached?.(page) === true) this.zeroPending[page] = 1;
      else {
        this.zero(page);
        this.onReuse?.(page);
      }
    }
    m.unlockPage(page);
    this.free.push(page);
  }

  /** Zeroes a page (the caller holds its lock), counting it when it still held someone's data. */
  private zero(page: number): void {
    if (this.memory.pageWriter[page] !== NEVER_WRITTEN) this.zeroedTotal++;
    this.memory.zeroPage(page);
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
    const holders = new Int32Array(this.numPages);
    for (const [owner, table] of this.tables) {
      for (const page of table.pages) {
        const seen = where[page] as number;
        if (seen === -1) problems.push(`page ${page} is both free and in the table of ${owner}`);
        else if (seen !== -2 && m.owner[page] !== SHARED_OWNER) problems.push(`page ${page} has two owners: ${seen} and ${owner}`);
        where[page] = owner;
        holders[page] = (holders[page] as number) + 1;
        if (m.owner[page] !== owner && m.owner[page] !== SHARED_OWNER) problems.push(`page ${page} is in the table of ${owner} but tagged owner ${m.owner[page]}`);
        if (m.state[page] !== PageState.allocated) problems.push(`page ${page} is in a table but in state ${m.state[page]}`);
      }
    }
    for (let p = 0; p < this.numPages; p++) {
      if (holders[p] !== this.refs[p] && !(holders[p] === 0 && this.refs[p] === 0)) {
        problems.push(`page ${p} is held by ${holders[p]} table(s) but its reference count is ${this.refs[p]}`);
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
