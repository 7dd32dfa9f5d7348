/**
 * The named defenses: mitigations that can be switched on one by one on top of any preset, so each can be
 * shown to stop (or not stop) each fault. Composable: every defense is an independent check or fence.
 */

export const DEFENSES = [
  'reject-before-bootstrap',
  'deferred-release',
  'page-tags',
  'zero-on-release',
  'transfer-integrity',
  'salted-prefix-cache',
  'strong-prefix-hash',
  'restore-fencing',
  'salted-host-tier',
] as const;
export type DefenseName = (typeof DEFENSES)[number];

export const DEFENSE_DESCRIPTIONS: Readonly<Record<DefenseName, string>> = {
  'reject-before-bootstrap':
    'the router checks the prompt against the prefill pool and returns the rejection before bootstrap, ' +
    'allocation or transfer (the deployed fix)',
  'deferred-release': 'a released page stays off the free list until no transfer or host copy can still touch it',
  'page-tags':
    'before every attention read, each page\'s tag (last writer and the generation it wrote under) must match ' +
    'the reader and the page\'s current allocation; a mismatch fails the request closed with a 5xx and a metric',
  'zero-on-release': 'pages are zeroed (data and tags) when they are released',
  'transfer-integrity':
    'each transfer batch and host copy is tagged with room id, page generations and a checksum, verified under ' +
    'the page locks when it lands; a stale or corrupt one is dropped and counted',
  'salted-prefix-cache':
    'every prefix-cache entry keeps the `cache_salt` it was written under, and a lookup refuses an entry of another salt ' +
    'even when the block key matched: different salts never share',
  'strong-prefix-hash': 'a prefix-cache hit is confirmed token by token against the exact ids the entry was written for; a colliding key is refused',
  'restore-fencing':
    'a prefix-cache restore checks that each entry\'s page still has the generation it had when the entry was made ' +
    '(never handed out since); a stale entry is refused, dropped and counted',
  'salted-host-tier':
    'every host-tier page keeps the `cache_salt` it was written under, and a load refuses a page of another salt even ' +
    'when its key matched: different salts never share through host memory',
};

/** Defenses that work in single-node mode (the prefix cache's, and zeroing). */
export const SINGLE_NODE_DEFENSES: readonly DefenseName[] = ['zero-on-release', 'salted-prefix-cache', 'strong-prefix-hash', 'restore-fencing'];

/**
 * What each defense stopped, uniformly: requests refused before bootstrap, pages parked off the free list
 * while a transfer or copy still held them, reads failed closed on a tag mismatch, pages zeroed while they
 * still held a request's data, transfer batches and host copies dropped as stale, and prefix-cache lookups
 * refused by the salt check, the token-by-token confirmation or the generation fence. 0 for a defense that
 * is off or never had anything to stop (`kvcanary_engine_defense_blocks_total{defense}`).
 */
export type DefenseBlocks = Record<DefenseName, number>;

/** Every defense, with the counts given and 0 for the rest. */
export function defenseBlocks(counts: Partial<DefenseBlocks>): DefenseBlocks {
  return Object.fromEntries(DEFENSES.map((d) => [d, counts[d] ?? 0])) as DefenseBlocks;
}

export function isDefenseName(name: string): name is DefenseName {
  return (DEFENSES as readonly string[]).includes(name);
}
