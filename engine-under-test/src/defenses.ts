/**
 * The named defenses: mitigations that can be switched on one by one on top of any preset, so each can be
 * shown to stop (or not stop) each fault. Composable: every defense is an independent check or fence.
 */

export const DEFENSES = ['reject-before-bootstrap', 'deferred-release', 'page-tags', 'zero-on-release', 'transfer-integrity'] as const;
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
};

export function isDefenseName(name: string): name is DefenseName {
  return (DEFENSES as readonly string[]).includes(name);
}
