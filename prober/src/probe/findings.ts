/**
 * The fixed vocabulary of what kvcanary can report. A finding kind never changes meaning once shipped:
 * alert rules, dashboards and stored evidence key on it.
 */

export type Severity = 'critical' | 'high' | 'warning';

export interface FindingKindInfo {
  severity: Severity;
  summary: string;
}

export const FINDING_KINDS = {
  'cross-request-leak': {
    severity: 'critical',
    summary: 'A response carried a canary marker planted by a different request (another customer\'s data could be exposed the same way).',
  },
  'rejection-not-enforced': {
    severity: 'high',
    summary: 'A prompt the endpoint should have rejected (over its context limit or KV pool capacity) was answered with generated text.',
  },
  'pool-below-context': {
    severity: 'warning',
    summary: 'The KV pool holds fewer tokens than the advertised context limit: prompts in between reach the path where the incident happened.',
  },
  'prefix-cache-shared-across-tenants': {
    severity: 'critical',
    summary: 'A tenant was served cached prefix tokens computed for another tenant (different key or cache salt).',
  },
  'prefix-cache-collision': {
    severity: 'critical',
    summary: 'A prompt no request had sent was served cached prefix tokens: the prefix cache keys on something other than the exact tokens, so one prompt can be answered over another\'s KV.',
  },
  'prefix-timing-side-channel': {
    severity: 'high',
    summary: 'Time to first token reveals whether another tenant sent a given prefix.',
  },
} as const satisfies Record<string, FindingKindInfo>;

export type FindingKind = keyof typeof FINDING_KINDS;

export function isFindingKind(s: string): s is FindingKind {
  return Object.hasOwn(FINDING_KINDS, s);
}

/** Bounded, redacted evidence: never a whole response body. */
export interface Evidence {
  /** What was matched (a marker or fragment), or a short description for non-marker findings. */
  match?: string;
  /** A short window of the response around the match, other markers redacted. At most ~160 characters. */
  excerpt?: string;
  /** Which request planted the marker, and where/when, from the registry. */
  planted?: { runId: string; requestId: string; role: string; tenant: string; at: string };
  /** Which request read it. */
  read?: { requestId: string; role: string; tenant: string; status?: number };
  /** Free-form numeric or short string facts (status codes, token counts, limits). */
  facts?: Record<string, string | number | boolean | null>;
}

export interface Finding {
  kind: FindingKind;
  severity: Severity;
  scenario: string;
  evidence: Evidence;
  /** Probability that this match arose by chance (upper bound). 0 where the finding is not probabilistic. */
  chance: number;
}

export function makeFinding(kind: FindingKind, scenario: string, evidence: Evidence, chance = 0): Finding {
  return { kind, severity: FINDING_KINDS[kind].severity, scenario, evidence, chance };
}
