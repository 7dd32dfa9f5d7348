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
  const out = text.replace(AUTH_SCHEME_RE, `$1 ${REDACTED}`);
  if (secrets.length === 0) return out;
  const mask = secretMask(out, secrets);
  return mask === undefined ? out : applyMask(out, mask);
}

/**
 * Characters a terminal, a browser or a JSON reader does not show, which a target can weave into an echoed
 * key (`s\x01k\x01-...`) so that no piece of it matches while the printed text still shows it whole once they
 * are stripped. Secrets are looked for in the text without them; a match covers them too.
 */
// eslint-disable-next-line no-control-regex
const INVISIBLE = /[\u0000-\u001f\u007f-\u009f\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/;
// eslint-disable-next-line no-control-regex
const INVISIBLE_ALL = /[\u0000-\u001f\u007f-\u009f\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;

/**
 * Which characters of `text` belong to an occurrence of `secret` (whole when it is short, else any PIECE-long
 * piece of it), judged on the text with invisible characters left out; undefined when none do.
 */
export function secretMask(text: string, secrets: readonly string[]): Uint8Array | undefined {
  let mask: Uint8Array | undefined;
  let view = text;
  let at: Int32Array | undefined;
  if (INVISIBLE.test(text)) {
    at = new Int32Array(text.length);
    let v = '';
    for (let i = 0; i < text.length; i++) {
      if (INVISIBLE.test(text[i]!)) continue;
      at[v.length] = i;
      v += text[i]!;
    }
    view = v;
  }
  for (const raw of secrets) {
    const secret = raw.replace(INVISIBLE_ALL, '');
    if (secret.length < MIN_SECRET) continue;
    for (const form of new Set([secret, JSON.stringify(secret).slice(1, -1)])) {
      const hits = hitsOf(view, form);
      if (hits === undefined) continue;
      mask ??= new Uint8Array(text.length);
      for (let i = 0; i < view.length; i++) {
        if (hits[i] !== 1) continue;
        // A hit covers the invisible characters between its visible ones as well.
        const from = at === undefined ? i : at[i]!;
        let to = from + 1;
        if (at !== undefined && i + 1 < view.length && hits[i + 1] === 1) to = at[i + 1]!;
        mask.fill(1, from, to);
      }
    }
  }
  return mask;
}

/** Positions of `view` inside an occurrence of the secret (whole, or a PIECE-long piece of a long one). */
function hitsOf(view: string, secret: string): Uint8Array | undefined {
  if (view.length < Math.min(secret.length, PIECE)) return undefined;
  let hit: Uint8Array | undefined;
  if (secret.length < PIECE) {
    for (let i = view.indexOf(secret); i >= 0; i = view.indexOf(secret, i + 1)) (hit ??= new Uint8Array(view.length)).fill(1, i, i + secret.length);
    return hit;
  }
  const pieces = new Set<string>();
  for (let i = 0; i + PIECE <= secret.length; i++) pieces.add(secret.slice(i, i + PIECE));
  for (let i = 0; i + PIECE <= view.length; i++) {
    if (pieces.has(view.slice(i, i + PIECE))) (hit ??= new Uint8Array(view.length)).fill(1, i, i + PIECE);
  }
  return hit;
}

/** The text with every masked run replaced by REDACTED. */
export function applyMask(text: string, mask: Uint8Array): string {
  let out = '';
  for (let i = 0; i < text.length;) {
    if (mask[i] === 1) {
      while (i < text.length && mask[i] === 1) i++;
      out += REDACTED;
    } else {
      const start = i;
      while (i < text.length && mask[i] !== 1) i++;
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
