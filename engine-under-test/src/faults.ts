/**
 * The named faults: real isolation bugs, each reproducible on demand and off unless named. A fault is a
 * code path in the engine's plumbing (admission, release, copies), never in the model: whatever a fault
 * lets through reaches a response only through attention over what a page table points at.
 */

export const FAULTS = ['admission-checks-finished', 'late-write', 'offload-release-race'] as const;
export type FaultName = (typeof FAULTS)[number];

export const FAULT_DESCRIPTIONS: Readonly<Record<FaultName, string>> = {
  'admission-checks-finished':
    'the incident: prefill admission checks whether a request is finished, not whether it has a pending ' +
    'rejection, so an over-pool prompt drains through prefill as a one-token placeholder, signals transfer ' +
    'completion, and decode attends over its whole reservation (stale pages included); the response is a 200',
  'late-write':
    'an abort frees decode\'s pages at once while transfer batches are still landing; a batch that lands after ' +
    'the pages were reallocated writes into another request\'s pages',
  'offload-release-race':
    'the host-offload tier (KV pages written back to host memory when a request ends, loaded back on a prefix ' +
    'hit) releases pages when a copy is issued, not when it is done, so a copy can read or write pages that ' +
    'another request already owns; turns the tier on',
};

export function isFaultName(name: string): name is FaultName {
  return (FAULTS as readonly string[]).includes(name);
}
