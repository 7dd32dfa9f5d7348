/**
 * concurrent-interleave's sizes, from what the endpoint advertises: shared by the scenario and by cost.ts,
 * so that what a run is priced at is what it sends.
 *
 * A restore race (a prefix-cache entry restored into pages another request has since been given) shows only
 * once a page under a reader's cache entry is handed to a planter before the next reader with that prefix
 * comes. An idle pool hides that whatever the race: with a FIFO free list (least recently released first, how
 * vLLM's free-block queue evicts) a released page is handed out again only after every page released before
 * it, so on a pool many waves wide the readers' pages are never reached (bench/race-calibration-interleave.json,
 * before ballast: FIFO 0/30 at scale 1/32 at every fault rate). So when the endpoint exposes its pools, ballast
 * (ballast.ts) holds all but a sliver of the pool where requests reserve their pages: room for one planter
 * beside one reader, plus 2% (at least 4 pages) for the error of the token estimates. Whatever the free
 * list's order, each admitted request then takes pages just released.
 *
 * Two more things make the freed pages reach a planter before the reader's next restore:
 * - Readers are a quarter of a planter, so each planter's write covers several readers' pages, and two
 *   planters cover the whole sliver wherever the reader's pages stand in it.
 * - A reader that restores its own entry re-takes (and re-releases) its pages, moving them to the back of a
 *   FIFO list: readers of one tenant rotate through `readerVariants` distinct openings, so that between two
 *   readers of the same opening at least the sliver is allocated by planters (`ceil(free / 2 planters) + 1`).
 */
import type { ProbeTuning } from './context.js';
import { clamp } from './clamp.js';

export interface AdvertisedPools {
  contextTokens?: number | undefined;
  poolTokens?: number | undefined;
  reservationPoolTokens?: number | undefined;
  largestPoolTokens?: number | undefined;
  pageSize?: number | undefined;
}

export interface InterleaveSizes {
  planterTokens: number;
  /** A reader's prompt, before its opening line. */
  readerTokens: number;
  /** The pool the ballast fills (where requests reserve their pages); undefined when none is exposed. */
  reservationPoolTokens: number | undefined;
  /** Tokens the ballast holds (prompt + generation); 0 for none. */
  ballastTokens: number;
  /** What the ballast leaves free: one planter and one reader reservation, and the sliver. */
  freeTokens: number | undefined;
  /** Distinct reader openings each tenant rotates through (1 without ballast: the workload as before). */
  readerVariants: number;
}

export const DEFAULT_INTERLEAVE_WAVES: readonly number[] = [2, 4, 8];

export function interleaveSizes(s: AdvertisedPools, t: ProbeTuning): InterleaveSizes {
  const out = t.readerMaxTokens ?? 48;
  const widest = Math.max(1, ...(t.interleaveWaves ?? DEFAULT_INTERLEAVE_WAVES));
  const bound = Math.min(s.poolTokens ?? Infinity, s.contextTokens ?? Infinity);
  const known = Number.isFinite(bound);
  // A third of the widest wave plants at once: together about half the pool, each well within the context.
  const planterTokens = t.planterTokens ?? (known ? clamp(Math.floor((bound * 1.5) / widest), 128, 4096) : 1024);
  const reservation = s.reservationPoolTokens ?? s.largestPoolTokens ?? s.poolTokens;
  if (reservation === undefined || t.interleaveBallast === false) {
    const readerTokens = known ? clamp(Math.floor(bound / widest) - out - 64, 64, 4096) : 512;
    return { planterTokens, readerTokens, reservationPoolTokens: reservation, ballastTokens: 0, freeTokens: undefined, readerVariants: 1 };
  }
  const page = s.pageSize ?? 16;
  const readerTokens = Math.max(64, Math.floor(planterTokens / 4));
  const slack = Math.max(4 * page, Math.ceil(reservation * 0.02));
  const freeTokens = planterTokens + out + page + readerTokens + out + page + slack;
  const ballastTokens = Math.max(0, reservation - freeTokens);
  const readerVariants = ballastTokens > 0 ? clamp(Math.ceil(freeTokens / (2 * planterTokens)) + 1, 2, 8) : 1;
  return { planterTokens, readerTokens, reservationPoolTokens: reservation, ballastTokens, freeTokens, readerVariants };
}
