/**
 * The two identities the tenant-isolation scenarios send as. With two or more tenants configured (their
 * own API keys and/or cache salts) the first two are used. With fewer, two synthetic tenants are made
 * from the default one by vLLM's per-request `cache_salt`: same key, a fresh random salt each per cycle,
 * so nothing carries over between cycles. Evidence says which case it was, and whether salts and keys
 * differ (never the key itself): an endpoint that does not implement `cache_salt` shares between
 * synthetic tenants by design, so a responder needs to know they differed only by salt.
 *
 * Declared boundaries: configured tenants (different keys, or salts the operator gave them) are a boundary
 * someone declared, and sharing across it is a leak. Synthetic tenants are the prober's own device: sharing
 * between them says the endpoint ignores `cache_salt` (llama.cpp has no such request field), a fact worth
 * reporting (`cache-salt-ignored`, info), not a leak across anyone's boundary.
 */
import { randomBytes } from 'node:crypto';
import type { ScenarioContext, Tenant } from './context.js';

export interface TenantPair {
  /** The planting tenant. */
  a: Tenant;
  /** The reading tenant. */
  b: Tenant;
  synthetic: boolean;
  /** The operator declared the boundary between a and b (configured tenants); false for synthetic ones. */
  declared: boolean;
  saltsDiffer: boolean;
  /** null: the key identity of the tenants is not known. */
  keysDiffer: boolean | null;
  /** One line for the scenario's notes. */
  note: string;
}

export const SYNTHETIC_NAMES = ['tenant-a', 'tenant-b'] as const;

export function tenantPair(ctx: Pick<ScenarioContext, 'tenants'>): TenantPair {
  const [first, second] = ctx.tenants;
  if (first === undefined) throw new Error('ScenarioContext.tenants is empty: probe.ts always provides the default tenant');
  if (second !== undefined) {
    const saltsDiffer = saltOf(first) !== saltOf(second);
    const keysDiffer = first.keyId !== undefined && second.keyId !== undefined ? first.keyId !== second.keyId : null;
    const how = [saltsDiffer ? 'different cache_salt' : 'the same cache_salt', keysDiffer === null ? 'keys not known to differ' : keysDiffer ? 'different API keys' : 'the same API key'];
    return { a: first, b: second, synthetic: false, declared: true, saltsDiffer, keysDiffer, note: `tenants ${first.name} (plants) and ${second.name} (reads): ${how.join(', ')}` };
  }
  const salt = (): string => `kvc-${randomBytes(12).toString('hex')}`;
  const make = (name: string): Tenant => ({
    name,
    client: first.client,
    extraBody: { ...first.extraBody, cache_salt: salt() },
    ...(first.keyId !== undefined ? { keyId: first.keyId } : {}),
  });
  return {
    a: make(SYNTHETIC_NAMES[0]),
    b: make(SYNTHETIC_NAMES[1]),
    synthetic: true,
    declared: false,
    saltsDiffer: true,
    keysDiffer: false,
    note: `fewer than two tenants configured: synthetic ${SYNTHETIC_NAMES[0]} and ${SYNTHETIC_NAMES[1]} from ${first.name}, same key, random cache_salt each`,
  };
}

/** Neither salt nor key tells the two apart: sharing between them is expected, not a finding. */
export function sameIdentity(pair: TenantPair): boolean {
  return !pair.saltsDiffer && pair.keysDiffer === false;
}

function saltOf(t: Tenant): unknown {
  return t.extraBody['cache_salt'];
}
