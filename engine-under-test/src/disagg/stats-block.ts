/**
 * Counters a worker publishes for the router, in a SharedArrayBuffer: the Engine contract's `stats()` is
 * synchronous (metrics scrapes, tests), and the pools live in their workers. Each worker writes its own
 * block after every step and message; the router only reads. A value may be a step old, never torn: each
 * is one aligned float64, written and read whole.
 */

export const STAT_FIELDS = [
  'waiting',
  'running',
  'prefilling',
  'prefillTokensPending',
  'poolNumPages',
  'poolPageSize',
  'poolFreePages',
  'poolUsedPages',
  'poolAllocatedPagesTotal',
  'poolReleasedPagesTotal',
  'poolTables',
  'poolPendingReleasePages',
  'poolParkedPagesTotal',
  'poolZeroedPagesTotal',
  'promptTokensTotal',
  'generationTokensTotal',
  'steps',
  'batchesLanded',
  'lateBatchesLanded',
  'tokensLanded',
  'transferBusyMs',
  'staleBatchesDropped',
  'pageTagMismatches',
  'staleCopiesDropped',
  'hostEntries',
  'hostPagesWrittenBack',
  'hostPagesLoaded',
  'hostHitPages',
  'hostBlockedSalt',
  'prefixEntries',
  'prefixHitRequests',
  'prefixLookups',
  'prefixCachedTokensTotal',
  'prefixEvictions',
  'prefixStaleRestoresRefused',
  'prefixBlockedSalt',
  'prefixBlockedTokens',
  'prefixBlockedRestore',
] as const;
export type StatField = (typeof STAT_FIELDS)[number];

const INDEX = Object.fromEntries(STAT_FIELDS.map((f, i) => [f, i])) as Record<StatField, number>;

export class StatsBlock {
  private readonly values: Float64Array;

  constructor(readonly buffer: SharedArrayBuffer) {
    this.values = new Float64Array(buffer);
  }

  static create(): StatsBlock {
    return new StatsBlock(new SharedArrayBuffer(8 * STAT_FIELDS.length));
  }

  set(field: StatField, value: number): void {
    this.values[INDEX[field]] = value;
  }

  get(field: StatField): number {
    return this.values[INDEX[field]] as number;
  }
}
