/**
 * The pool's free list as a ring buffer of page indices, with a named order policy. The order decides
 * which stale pages the next sequence inherits, so it is configuration, not an implementation detail:
 * - `fifo`: freed pages go to the tail, allocation takes from the head (SGLang's token-level allocator,
 *   page size 1, hands out freed slots this way), so a freed page is reused only after every older free page;
 * - `lifo`: freed pages go on top and are handed out first, so a just-freed page is reused immediately (SGLang's
 *   paged allocator prepends freed pages; in PD mode it parks them and merges them, sorted by index, when
 *   its free list runs dry, which reuses them late, much as fifo does).
 */

export const FREE_LIST_POLICIES = ['fifo', 'lifo'] as const;
export type FreeListPolicy = (typeof FREE_LIST_POLICIES)[number];

export class FreeList {
  private readonly ring: Int32Array;
  private head = 0;
  private count = 0;

  constructor(readonly capacity: number, readonly policy: FreeListPolicy) {
    this.ring = new Int32Array(capacity);
  }

  get size(): number {
    return this.count;
  }

  push(page: number): void {
    if (this.count === this.capacity) throw new RangeError('free list overflow: a page was freed twice');
    this.ring[(this.head + this.count) % this.capacity] = page;
    this.count++;
  }

  /** Removes and returns the next page to hand out, or -1 when empty. */
  pop(): number {
    if (this.count === 0) return -1;
    if (this.policy === 'lifo') {
      this.count--;
      return this.ring[(this.head + this.count) % this.capacity] as number;
    }
    const page = this.ring[this.head] as number;
    this.head = (this.head + 1) % this.capacity;
    this.count--;
    return page;
  }

  /** Pages in hand-out order (for invariant checks and tests). */
  toArray(): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.count; i++) out.push(this.ring[(this.head + i) % this.capacity] as number);
    return this.policy === 'lifo' ? out.reverse() : out;
  }
}
