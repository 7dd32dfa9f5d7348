/**
 * One redactor per run or service, built from every configured secret: API keys (the target's and every
 * tenant's), every tenant's cache_salt (its separation in a shared prefix cache), every header value not on a short allow-list of known non-secret headers, and credentials in a
 * base URL. Every output path passes text through it: the finished ProbeRun (so `--json`, the stderr summary,
 * JUnit, the store, metrics, the status page and `report` all see redacted text), progress lines and logs.
 *
 * It works on assembled text: a key the target streamed back split across two SSE deltas is one string by
 * the time it is in evidence, notes or an excerpt, and is caught there (scrubSecrets also catches any
 * 12-character piece of a long secret, so a key cut at an excerpt's edge is caught too).
 */
import { scrubSecrets } from './redact.js';

/**
 * Headers whose values are known not to be credentials. Every other header value given by flag or config is
 * treated as a secret (X-Api-Key, Ocp-Apim-Subscription-Key, X-Auth, and names nobody has thought of yet).
 */
export const NON_SECRET_HEADERS: ReadonlySet<string> = new Set([
  'accept', 'accept-language', 'cache-control', 'user-agent', 'x-request-id', 'x-correlation-id',
  'traceparent', 'tracestate', 'openai-beta', 'anthropic-version',
]);

export function isSecretHeader(name: string): boolean {
  return !NON_SECRET_HEADERS.has(name.toLowerCase());
}

export interface Redactor {
  readonly secrets: readonly string[];
  /** The text with every secret (whole, or any long piece of one) and bearer/basic credentials replaced. */
  text(s: string): string;
  /** A copy of a JSON-ish value with every string (and object key) passed through `text`. */
  deep<T>(value: T): T;
}

export function createRedactor(secrets: Iterable<string | undefined>): Redactor {
  const list = [...new Set([...secrets].filter((s): s is string => typeof s === 'string' && s !== ''))]
    // Longest first: a secret that contains another is replaced whole.
    .sort((a, b) => b.length - a.length);
  const text = (s: string): string => scrubSecrets(s, list);
  const deep = (v: unknown, depth: number): unknown => {
    if (typeof v === 'string') return text(v);
    if (v === null || typeof v !== 'object' || depth > 32) return v;
    if (Array.isArray(v)) return v.map((x) => deep(x, depth + 1));
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) out[text(k)] = deep(x, depth + 1);
    return out;
  };
  return { secrets: list, text, deep: <T>(value: T): T => deep(value, 0) as T };
}

/** What a target's config refers to that is secret. Shape-compatible with ProbeTarget. */
export interface SecretSources {
  baseUrl: string;
  apiKeyEnv?: string;
  headers: Record<string, string>;
  tenants: ReadonlyArray<{ apiKeyEnv?: string; cacheSalt?: string }>;
}

/** Every secret value one target's config refers to, reading keys from `env`. */
export function targetSecrets(target: SecretSources, env: Record<string, string | undefined>): string[] {
  const out: string[] = [];
  const add = (v: string | undefined): void => { if (v !== undefined && v !== '') out.push(v); };
  if (target.apiKeyEnv !== undefined) add(env[target.apiKeyEnv]);
  for (const t of target.tenants) {
    if (t.apiKeyEnv !== undefined) add(env[t.apiKeyEnv]);
    // A salt is scrubbed like a key (and, like a key, not when shorter than redact.ts's minimum).
    add(t.cacheSalt);
  }
  for (const [name, value] of Object.entries(target.headers)) if (isSecretHeader(name)) add(value);
  for (const c of urlCredentials(target.baseUrl)) add(c);
  return out;
}

/** The user name and password of a URL (raw and decoded), if it has any. */
export function urlCredentials(url: string): string[] {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const part of [u.username, u.password]) {
    if (part === '') continue;
    out.push(part);
    try {
      const decoded = decodeURIComponent(part);
      if (decoded !== part) out.push(decoded);
    } catch { /* not percent-encoded */ }
  }
  return out;
}
