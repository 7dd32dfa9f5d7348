/**
 * The named faults: real isolation bugs, each reproducible on demand and off unless named. A fault is a
 * code path in the engine's plumbing (admission, release, copies), never in the model: whatever a fault
 * lets through reaches a response only through attention over what a page table points at.
 */

export const FAULTS = [
  'admission-checks-finished',
  'late-write',
  'offload-release-race',
  'prefix-cache-ignores-salt',
  'weak-prefix-hash',
  'prompt-cache-restore-race',
  'host-tier-ignores-salt',
] as const;
export type FaultName = (typeof FAULTS)[number];

export const FAULT_DESCRIPTIONS: Readonly<Record<FaultName, string>> = {
  'admission-checks-finished':
    'the incident: prefill admission checks whether a request is finished, not whether it has a pending ' +
    'rejection, so an over-pool prompt drains through prefill as a one-token placeholder, signals transfer ' +
    'completion, and decode attends over every prompt position of its reservation (stale pages included); the response is a 200',
  'late-write':
    'an abort frees decode\'s pages at once while transfer batches are still landing; a batch that lands after ' +
    'the pages were reallocated writes into another request\'s pages',
  'offload-release-race':
    'the host-offload tier (KV pages written back to host memory when a request ends, loaded back on a prefix ' +
    'hit) releases pages when a copy is issued, not when it is done, so a copy can read or write pages that ' +
    'another request already owns; turns the tier on',
  'prefix-cache-ignores-salt':
    'the prefix cache does not mix `cache_salt` into its block hash (SGLang HiCache, PR #37058): requests with ' +
    'different salts share cached pages (cached_tokens and time to first token show it across tenants)',
  'weak-prefix-hash':
    'the prefix cache keys a block by a 32-bit hash of the multiset of its tokens (CVE-2025-25183 class): any ' +
    'permutation of a cached block collides with it, and the hit serves the other prompt\'s KV',
  'prompt-cache-restore-race':
    'a prefix-cache entry is not dropped when its page is handed to another request (llama.cpp #27148): a ' +
    'request with the entry\'s prefix restores pages another request is using or has just written',
  'host-tier-ignores-salt':
    'the host-offload tier keys and looks up pages without `cache_salt` while the device prefix cache honours it ' +
    '(SGLang HiCache, PR #37058: "tenant-A wrote 25100 pages, tenant-B read all of them back"): another tenant misses ' +
    'on the device cache and loads the first tenant\'s pages from host memory; turns the tier on, with the prefix cache',
};

/** The faults that live in the prefix cache (single-node mode). */
export const PREFIX_CACHE_FAULTS: readonly FaultName[] = ['prefix-cache-ignores-salt', 'weak-prefix-hash', 'prompt-cache-restore-race'];

export function isFaultName(name: string): name is FaultName {
  return (FAULTS as readonly string[]).includes(name);
}
