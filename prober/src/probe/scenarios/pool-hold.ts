/**
 * Who holds an endpoint's KV pool with ballast (ballast.ts). Scenarios of one cycle may run together
 * (serve's `concurrency.per_target`), and two ballasts do not both fit: the second, queued at the endpoint,
 * would block every request behind it until the first ends (measured on the bundled engine at 1/64 scale:
 * abort-race and concurrent-interleave side by side took 60 s instead of 5 s; at full scale a ballast's
 * generation outlasts the cycle). So one ballast holds an endpoint at a time: a scenario starts its own only
 * while no other holds the pool, and otherwise runs in the sliver the holder left (the pool is as full).
 *
 * One record per prober (createProbe), keyed by the endpoint's base URL: targets that name the same endpoint
 * share its pool. Separate processes (serve shards) probing one endpoint do not see each other's holds.
 */
export interface PoolHold {
  /** Takes the pool for `owner`; true when it now holds it (or already did), false when another does. */
  take(owner: object, name: string): boolean;
  /** The name the current holder took it under, undefined when free. */
  holder(): string | undefined;
  /** Gives the pool back (only its holder can). */
  give(owner: object): void;
}

function createPoolHold(): PoolHold {
  let current: { owner: object; name: string } | undefined;
  return {
    take(owner, name) {
      if (current === undefined) current = { owner, name };
      return current.owner === owner;
    },
    holder: () => current?.name,
    give(owner) {
      if (current?.owner === owner) current = undefined;
    },
  };
}

/** The pool holds of every endpoint one prober probes. */
export type PoolHolds = (baseUrl: string) => PoolHold;

export function createPoolHolds(): PoolHolds {
  const holds = new Map<string, PoolHold>();
  return (baseUrl) => {
    const key = baseUrl.replace(/\/+$/, '').replace(/\/v1$/, '');
    let hold = holds.get(key);
    if (hold === undefined) holds.set(key, (hold = createPoolHold()));
    return hold;
  };
}
