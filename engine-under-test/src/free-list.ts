/**
 * The pool's free list: page indices in a doubly linked list over two Int32Arrays, with a named order
 * policy. The order decides which stale pages the next sequence inherits, so it is configuration, not an
 * implementation detail:
 * - `fifo`: freed pages go to the tail, allocation takes from the head (SGLang's token-level allocator,
 *   page size 1, hands out freed slots this way), so a freed page is reused only after every older free page;
 * - `lifo`: freed pages go on top and are handed out first, so a just-freed page is reused immediately (SGLang's
 *   paged allocator prepends freed pages; in PD mode it parks them and merges them, sorted by index, when
 *   its free list runs dry, which reuses them late, much as fifo does).
 * The prefix cache keeps released pages' keys while they sit here (vLLM's free block queue), so a cache hit
 * takes a page out of the middle: `remove` is O(1). With `fifo` the list is the cache's LRU order.
 */

export const FREE_LIST_POLICIES = ['fifo', 'lifo'] as const;
export type FreeListPolicy = (typeof FREE_LIST_POLICIES)[number];

const NONE = -1;

export class FreeList {
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  private readonly member: Uint8Array;
  private head = NONE;
  private tail = NONE;
  private count = 0;

  constructor(readonly capacity: number, readonly policy: FreeListPolicy) {
    this.prev = new Int32Array(capacity).fill(NONE);
    this.next = new Int32Array(capacity).fill(NONE);
    this.member = new Uint8Array(capacity);
  }

  get size(): number {
    return this.count;
  }

  has(page: number): boolean {
    return this.member[page] === 1;
  }

  push(page: number): void {
    if (this.member[page] === 1 || this.count === this.capacity) throw new RangeError('free list overflow: a page was freed twice');
    this.member[page] = 1;
    this.prev[page] = this.tail;
    this.next[page] = NONE;
    if (this.tail === NONE) this.head = page;
    else this.next[this.tail] = page;
    this.tail = page;
    this.count++;
  }

  /** Removes and returns the next page to hand out, or -1 when empty. */
  pop(): number {
    if (this.count === 0) return -1;
    const page = this.policy === 'lifo' ? this.tail : this.head;
    this.remove(page);
    return page;
  }

  /** Takes a page out wherever it is; false if it was not on the list. */
  remove(page: number): boolean {
    if (this.member[page] !== 1) return false;
    const p = this.prev[page] as number;
    const n = this.next[page] as number;
    if (p === NONE) this.head = n;
    else this.next[p] = n;
    if (n === NONE) this.tail = p;
    else this.prev[n] = p;
    this.prev[page] = NONE;
    this.next[page] = NONE;
    this.member[page] = 0;
    this.count--;
    return true;
  }

  /** Pages in hand-out order (for invariant checks and tests). */
  toArray(): number[] {
    const out: number[] = [];
    for (let p = this.head; p !== NONE; p = this.next[p] as number) out.push(p);
    return this.policy === 'lifo' ? out.reverse() : out;
  }
}
