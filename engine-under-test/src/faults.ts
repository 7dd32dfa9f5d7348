/**
 * The named faults: real isolation bugs, each reproducible on demand and off unless named. A fault is a
 * code path in the engine's plumbing (admission, release, copies), never in the model: whatever a fault
 * lets through reaches a response only through attention over what a page table points at.
 */

import { mulberry32 } from './hash.js';

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

/**
 * The race faults: each fires on an eligible event (a release with a transfer in flight, a release with host
 * copies in flight, a cached page handed to another request) and can be given a rate, the fraction of eligible
 * events it fires on (`--fault-rate late-write=0.1`), drawn from the engine's seeded generator. Unrated, a race
 * fault fires on every eligible event.
 */
export const RACE_FAULTS = ['late-write', 'offload-release-race', 'prompt-cache-restore-race'] as const satisfies readonly FaultName[];
export type RaceFaultName = (typeof RACE_FAULTS)[number];

export const RACE_FAULT_EVENTS: Readonly<Record<RaceFaultName, string>> = {
  'late-write': "a decode release while that request's KV transfer is still in flight",
  'offload-release-race': "a decode release while that request's host copies (write-back or load) are in flight",
  'prompt-cache-restore-race': 'a cached page handed to another request',
};

export function isRaceFault(name: string): name is RaceFaultName {
  return (RACE_FAULTS as readonly string[]).includes(name);
}

/** Per-fault stream constants: each race fault draws from its own stream of the engine's seeded generator. */
const STREAM: Readonly<Record<RaceFaultName, number>> = {
  'late-write': 0x1b873593,
  'offload-release-race': 0x5bd1e995,
  'prompt-cache-restore-race': 0x68e31da4,
};

/**
 * Whether the fault fires on its next eligible event: always when the fault is on and unrated, never when it
 * is off, else a draw from the fault's own stream of the generator seeded with `faultSeed`.
 */
export function faultTrigger(config: { faults: readonly string[]; faultRates: Partial<Record<RaceFaultName, number>>; faultSeed: number }, fault: RaceFaultName): () => boolean {
  if (!config.faults.includes(fault)) return () => false;
  const rate = config.faultRates[fault];
  if (rate === undefined || rate >= 1) return () => true;
  const random = mulberry32(config.faultSeed ^ STREAM[fault]);
  return () => random() < rate;
}
