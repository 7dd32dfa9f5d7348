/**
 * Reserving a sequence's pages with prefix-cache hits, shared by the single-node scheduler and the
 * disaggregated decode worker: the longest usable cached run is shared (pages parked by a deferred release
 * cannot be taken yet), the rest allocated, or nothing is taken at all.
 */
import type { KvPool, PageTable } from './kv-pool.js';
import type { PrefixCache, PrefixPlan } from './prefix-cache.js';

export interface PrefixReservable {
  readonly id: number;
  readonly tokens: Uint16Array;
  readonly promptLength: number;
  readonly cacheSalt: string | undefined;
  prefix?: PrefixPlan | undefined;
}

/** Reserves `totalPages` for `seq`, sharing cached pages first; undefined when the pool cannot hold it now. */
export function reserveWithPrefix(pool: KvPool, cache: PrefixCache | undefined, seq: PrefixReservable, totalPages: number): { table: PageTable; hits: number[] } | undefined {
  let hits: number[] = [];
  if (cache !== undefined) {
    seq.prefix ??= cache.plan(seq.tokens.subarray(0, seq.promptLength), seq.cacheSalt);
    hits = cache.lookup(seq.prefix);
    const unusable = hits.findIndex((p) => !pool.canShare(p));
    if (unusable >= 0) hits = hits.slice(0, unusable);
  }
  // Cached pages sitting on the free list come off it too.
  let revived = 0;
  for (const page of hits) if (pool.isFree(page)) revived++;
  const needed = totalPages - hits.length;
  if (needed + revived > pool.freePages) return undefined;
  const table = pool.createTable(seq.id, totalPages);
  pool.share(table, hits);
  if (!pool.allocate(table, needed).ok) {
    pool.release(table);
    return undefined;
  }
  return { table, hits };
}
