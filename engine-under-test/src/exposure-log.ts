/**
 * Ground truth for measuring the prober: every attention read that covered pages holding another
 * request's data. Counts every such page read and keeps the last `capacity` reads in a ring (with at most
 * `maxPagesPerEntry` page indices each), so memory stays bounded however long a leak lasts. The prober
 * never reads this; tests and benchmarks compare its findings against it.
 */
import type { Clock } from './clock.js';
import type { ForeignRead } from './model.js';

export interface Exposure {
  /** Request id of the sequence that attended. */
  reader: number;
  /** Request ids whose data it attended over. */
  writers: number[];
  /** Pool page indices read (truncated to maxPagesPerEntry; see pageCount). */
  pages: number[];
  pageCount: number;
  /** ISO 8601 time of the read. */
  at: string;
}

export interface ExposureSnapshot {
  /** Foreign page reads since start (one per page per attention read). */
  total: number;
  /** Most recent reads first are last: oldest first, newest last. */
  exposures: Exposure[];
}

export class ExposureLog {
  private readonly ring: (Exposure | undefined)[];
  private next = 0;
  private pageReads = 0;

  constructor(private readonly clock: Clock, readonly capacity = 1000, readonly maxPagesPerEntry = 64) {
    this.ring = new Array<Exposure | undefined>(capacity);
  }

  get total(): number {
    return this.pageReads;
  }

  record(reader: number, read: ForeignRead): void {
    this.pageReads += read.pages.length;
    this.ring[this.next] = {
      reader,
      writers: [...read.writers].sort((a, b) => a - b),
      pages: read.pages.slice(0, this.maxPagesPerEntry),
      pageCount: read.pages.length,
      at: new Date(this.clock.now()).toISOString(),
    };
    this.next = (this.next + 1) % this.capacity;
  }

  snapshot(): ExposureSnapshot {
    const exposures: Exposure[] = [];
    for (let i = 0; i < this.capacity; i++) {
      const e = this.ring[(this.next + i) % this.capacity];
      if (e !== undefined) exposures.push(e);
    }
    return { total: this.pageReads, exposures };
  }
}
