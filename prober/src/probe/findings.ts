/**
 * The fixed vocabulary of what kvcanary can report. A finding kind never changes meaning once shipped:
 * alert rules, dashboards and stored evidence key on it.
 */

export type Severity = 'critical' | 'high' | 'warning' | 'info';

/** Most severe first: `--fail-on` and alert routing compare by this order. */
export const SEVERITIES: readonly Severity[] = ['critical', 'high', 'warning', 'info'];

/** True when `s` is at least as severe as `threshold`. */
export function atLeast(s: Severity, threshold: Severity): boolean {
  return SEVERITIES.indexOf(s) <= SEVERITIES.indexOf(threshold);
}

export interface FindingKindInfo {
  severity: Severity;
  summary: string;
  /** What the operator should change: shown in --json, the summary, the status page and alert annotations. */
  remediation: string;
}

export const FINDING_KINDS = {
  'cross-request-leak': {
    severity: 'critical',
    summary: 'A response carried a canary marker planted by a different request (another customer\'s data could be exposed the same way).',
    remediation: 'Treat as a data exposure: take the endpoint out of rotation, find which path let a request attend over pages it did not write (admission of over-limit prompts, late KV writes after abort, release races, stale prefix-cache entries), and keep the evidence for the incident review.',
  },
  'rejection-not-enforced': {
    severity: 'high',
    summary: 'A prompt the endpoint should have rejected (over its context limit or KV pool capacity) was answered with generated text.',
    remediation: 'Reject prompts over the context limit or the KV pool before any work is scheduled, on every path (including disaggregated prefill/decode hand-off), and size the pool at least to the advertised context.',
  },
  'pool-below-context': {
    severity: 'warning',
    summary: 'The KV pool holds fewer tokens than the advertised context limit: prompts in between reach the path where the incident happened.',
    remediation: 'Raise the KV pool to at least the advertised context length, or lower the advertised context (max_model_len / context_length) to what the pool holds.',
  },
  'prefix-cache-shared-across-tenants': {
    severity: 'critical',
    summary: 'A tenant was served cached prefix tokens computed for another tenant (different key or cache salt).',
    remediation: 'Key the prefix cache by tenant: give each tenant its own cache_salt at the gateway (vLLM and SGLang key their cache by salt, not by API key), or turn prefix caching off for tenants that must not share.',
  },
  'prefix-cache-collision': {
    severity: 'critical',
    summary: 'A prompt no request had sent was served cached prefix tokens: the prefix cache keys on something other than the exact tokens, so one prompt can be answered over another\'s KV.',
    remediation: "Key prefix-cache entries on the exact token ids (a collision-resistant hash, or confirm a hit token by token) and upgrade past the engine's known collision fixes.",
  },
  'prefix-timing-side-channel': {
    severity: 'high',
    summary: 'Time to first token reveals whether another tenant sent a given prefix.',
    remediation: "Time to first token reveals another tenant's prefix: salt the prefix cache per tenant (cache_salt) so cross-tenant hits cannot happen, or disable prefix caching for sensitive tenants.",
  },
  'cache-salt-ignored': {
    severity: 'info',
    summary: 'The endpoint ignores cache_salt: two identities that differ only by salt share its prefix cache. No boundary was declared between them, so this is a fact about the endpoint, not a leak.',
    remediation: 'If tenants of this endpoint must not share cached prefixes, isolate them by something the engine honours (separate deployments or slots; llama.cpp has no cache_salt request field), then declare them as tenants to have the boundary checked.',
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
  /**
   * Which request planted the marker, and where/when, from the registry: `by` says whether it was this run
   * or an earlier one (any run or process of the installation); `target` where the planting's run is recorded.
   */
  planted?: PlantedBy;
  /** Which request read it. */
  read?: { requestId: string; role: string; tenant: string; status?: number };
  /** Free-form numeric or short string facts (status codes, token counts, limits). */
  facts?: Record<string, string | number | boolean | null>;
}

/**
 * Who planted a marker. `requestNo` is the planting request's number as the marker decrypts (hex), kept so
 * another store (another shard, a backup) can name the planter later (`report --store A --store B`). With no
 * planting row for it in this store, only `requestNo`, `by: 'unknown'` and `note` are set: never placeholder
 * owner fields or dates.
 */
export interface PlantedBy {
  requestNo?: string;
  runId?: string;
  requestId?: string;
  role?: string;
  tenant?: string;
  at?: string;
  by?: 'this-run' | 'earlier-run' | 'unknown';
  target?: string;
  /** For an unknown planter: "planted by request #N of this installation (not in this store)". */
  note?: string;
  /** `report` over several stores: the store whose planting row named the planter. */
  resolvedFrom?: string;
}

/** The line an unresolved planter is shown with. */
export function unknownPlanterNote(requestNo: string | undefined): string {
  return requestNo === undefined
    ? 'planted by a request of this installation (not in this store)'
    : `planted by request #${requestNo} of this installation (not in this store)`;
}

/** Who planted it, in words: "tenant/role requestId at TIME", or the unknown planter's note. */
export function plantedText(p: PlantedBy): string {
  if (p.runId === undefined || p.requestId === undefined) return p.note ?? unknownPlanterNote(p.requestNo);
  return `planted by ${p.tenant ?? '?'}/${p.role ?? '?'} ${p.requestId}${p.at !== undefined ? ` at ${p.at}` : ''}`;
}

export interface Finding {
  kind: FindingKind;
  severity: Severity;
  scenario: string;
  evidence: Evidence;
  /** Probability that this match arose by chance (upper bound). 0 where the finding is not probabilistic. */
  chance: number;
  /** Set when a silence matched it (service/silences.ts): recorded and shown, but it fails nothing and pages no one. */
  acknowledged?: string;
}

export function makeFinding(kind: FindingKind, scenario: string, evidence: Evidence, chance = 0): Finding {
  return { kind, severity: FINDING_KINDS[kind].severity, scenario, evidence, chance };
}
