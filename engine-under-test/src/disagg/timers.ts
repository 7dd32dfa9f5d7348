/** Time behind a seam for the workers' copy engines (tests of the engines alone may drive it by hand). */
import { mulberry32 } from '../hash.js';

export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  now(): number;
}

export const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  now: () => performance.now(),
};

/**
 * Flight times of copy batches: exponentially distributed with the configured mean. A link shared with
 * other traffic (queueing, retries) does not deliver at a fixed pace; with a fixed pace, a late batch from
 * an aborted room would always land before the new owner's own write to the same slots under FIFO or
 * index-sorted reuse, and be overwritten unread. Seeded, so a run can be repeated.
 */
export function flightTimes(meanMs: number, seed: number): () => number {
  if (meanMs <= 0) return () => 0;
  const random = mulberry32(seed);
  return () => -meanMs * Math.log(1 - random());
}
