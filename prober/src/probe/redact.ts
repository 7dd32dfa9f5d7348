/**
 * Keeping credentials and leaked text out of what the service writes (logs, the evidence store).
 *
 * Scrubbing works on values, not field names: a configured API key can sneak into any string (an echoed
 * error body, a header dump, a model that repeats its prompt). A key cut at a window edge is still a key,
 * so any 12-character piece of a long secret is scrubbed too, not only the whole value. Scrub before
 * truncating: truncation can split a key so that the whole value no longer matches.
 */

export const REDACTED = '[redacted]';

/** Secrets shorter than this are ignored: scrubbing "abc" would mangle ordinary text. */
const MIN_SECRET = 4;
/** Pieces of at least this many characters of a longer secret are scrubbed as well. */
const PIECE = 12;

const AUTH_SCHEME_RE = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi;

/** Replaces every occurrence (whole, or any PIECE-long piece) of each secret, and bearer/basic credentials. */
export function scrubSecrets(text: string, secrets: readonly string[]): string {
  let out = text.replace(AUTH_SCHEME_RE, `$1 ${REDACTED}`);
  for (const secret of secrets) {
    if (secret.length < MIN_SECRET) continue;
    out = scrubOne(out, secret);
    // In JSON output a key with quotes or backslashes appears escaped.
    const escaped = JSON.stringify(secret).slice(1, -1);
    if (escaped !== secret) out = scrubOne(out, escaped);
  }
  return out;
}

function scrubOne(text: string, secret: string): string {
  if (text.length < Math.min(secret.length, PIECE)) return text;
  if (secret.length < PIECE) return text.split(secret).join(REDACTED);
  const pieces = new Set<string>();
  for (let i = 0; i + PIECE <= secret.length; i++) pieces.add(secret.slice(i, i + PIECE));
  const hit = new Uint8Array(text.length);
  let any = false;
  for (let i = 0; i + PIECE <= text.length; i++) {
    if (pieces.has(text.slice(i, i + PIECE))) { hit.fill(1, i, i + PIECE); any = true; }
  }
  if (!any) return text;
  let out = '';
  for (let i = 0; i < text.length;) {
    if (hit[i] === 1) {
      while (i < text.length && hit[i] === 1) i++;
      out += REDACTED;
    } else {
      const start = i;
      while (i < text.length && hit[i] !== 1) i++;
      out += text.slice(start, i);
    }
  }
  return out;
}

/** Cuts a string to at most `max` characters (marking the cut), never splitting a surrogate pair. */
export function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  const mark = '…[truncated]';
  let end = Math.max(0, max - mark.length);
  const code = text.charCodeAt(end - 1);
  if (code >= 0xd800 && code <= 0xdbff) end--;
  return text.slice(0, end) + mark;
}

/** Scrub, then bound: the order matters (see the note at the top). */
export function safeText(text: string, max: number, secrets: readonly string[]): string {
  return truncate(scrubSecrets(text, secrets), max);
}
