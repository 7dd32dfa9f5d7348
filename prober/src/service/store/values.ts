/**
 * How values go into the store: times as ISO strings, numbers finite or NULL, every string bounded and scrubbed
 * of the current secrets (evidence re-bounded whatever the caller sent: strings cut, depth and size capped).
 */
import type { Evidence } from '../../probe/findings.js';
import { safeText } from '../../probe/redact.js';
import { StoreError } from './error.js';

/** Per stored string; matches the scanner's bounded excerpt (about 160 chars) with room to spare. */
export const MAX_EVIDENCE_STRING = 320;
/** Whole evidence object as JSON. */
export const MAX_EVIDENCE_JSON = 4096;
export const MAX_NOTE = 300;
export const MAX_NOTES = 32;
export const MAX_ERROR = 512;
export const MAX_SHORT = 128;
/** A pathological scenario must not fill the disk; the count of what was dropped is noted. */
export const MAX_FINDINGS_PER_SCENARIO = 1000;
export const MAX_REQUESTS_PER_SCENARIO = 5000;

export function iso(t: Date | number | string, what: string): string {
  const d = t instanceof Date ? t : new Date(t);
  if (Number.isNaN(d.getTime())) throw new StoreError('KVC_STORE_INVALID_RUN', `${what}: not a valid time: ${String(t).slice(0, 40)}`);
  return d.toISOString();
}

export function num(x: number | undefined): number | null {
  return x === undefined || !Number.isFinite(x) ? null : x;
}

/**
 * A bounded, scrubbed copy of any JSON-ish value: depth, list length, key count and string length capped,
 * non-JSON values dropped. Keys are scrubbed too (facts keyed by something a target sent).
 */
function boundValue(v: unknown, depth: number, maxString: number, secrets: readonly string[]): unknown {
  if (v === null || typeof v === 'boolean') return v;
  if (typeof v === 'number') return Number.isFinite(v) ? v : null;
  if (typeof v === 'string') return safeText(v, maxString, secrets);
  if (depth >= 4 || typeof v !== 'object') return undefined;
  if (Array.isArray(v)) {
    return v.slice(0, 16).map((x) => boundValue(x, depth + 1, maxString, secrets) ?? null);
  }
  const out: Record<string, unknown> = {};
  let n = 0;
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    if (n++ >= 32) break;
    const bounded = boundValue(x, depth + 1, maxString, secrets);
    if (bounded !== undefined) out[safeText(k, 64, secrets)] = bounded;
  }
  return out;
}

/** Exported for tests and for any other writer of evidence (the CLI's --json output may want the same). */
export function boundEvidence(evidence: Evidence, secrets: readonly string[] = []): Evidence {
  for (const maxString of [MAX_EVIDENCE_STRING, 96, 32]) {
    const bounded = boundValue(evidence, 0, maxString, secrets) ?? {};
    if (JSON.stringify(bounded).length <= MAX_EVIDENCE_JSON) return bounded as Evidence;
  }
  const match = typeof evidence.match === 'string' ? safeText(evidence.match, 96, secrets) : undefined;
  return { ...(match === undefined ? {} : { match }), facts: { evidence_truncated: true } };
}

export const short = (s: string, secrets: readonly string[]): string => safeText(s, MAX_SHORT, secrets);

