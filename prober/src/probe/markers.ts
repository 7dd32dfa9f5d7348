/**
 * Canary markers: the envelope, how a body is drawn, and the base32 character class the scanner keys on.
 *
 * A marker is `kvcanary-` followed by 26 characters of the RFC 4648 base32 alphabet, lowercase
 * (a-z, 2-7): 130 random bits from `crypto`. Why this envelope:
 * - The fixed 9-character prefix is a cue. Readers end their prompts with `kvcanary-`, so a copy model
 *   whose attention covers planted pages continues a marker rather than anything else.
 * - Base32 is all letters and six digits, so it survives tokenizers and case changes, and one character
 *   class (`[a-z2-7]`, case-folded) finds every candidate in a single pass whatever the marker count.
 * - 32 is a power of two, so each character is exactly 5 uniform bits: one random byte masked to 5
 *   bits is unbiased (no modulo bias), and a matched run of L characters has chance 32^-L of agreeing with
 *   a given marker position by accident. The scanner's `chance` bound rests on that.
 * - The body alone identifies the marker: a model may drop or garble the shared prefix, or copy only part
 *   of a body, so attribution never depends on the prefix.
 */
import { randomFillSync } from 'node:crypto';

export const MARKER_PREFIX = 'kvcanary-';
/** Characters of random body after the prefix. */
export const MARKER_BODY_LENGTH = 26;
/** RFC 4648 base32, lowercased: value i is `BASE32_ALPHABET[i]`. */
export const BASE32_ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';
export const BITS_PER_CHAR = 5;
/** Random bits per marker (130). The brief requires at least 96. */
export const MARKER_BITS = MARKER_BODY_LENGTH * BITS_PER_CHAR;

/**
 * Base32 value of an ASCII code unit (case-folded), or -1. Only ASCII letters fold: `toLowerCase` on
 * arbitrary text can change its length (e.g. U+0130) and would shift every offset after it.
 */
export const BASE32_VALUE: Int8Array = (() => {
  const table = new Int8Array(128).fill(-1);
  for (let i = 0; i < BASE32_ALPHABET.length; i++) {
    const lower = BASE32_ALPHABET.charCodeAt(i);
    table[lower] = i;
    table[BASE32_ALPHABET.toUpperCase().charCodeAt(i)] = i;
  }
  return table;
})();

/** Base32 value of a UTF-16 code unit, case-folded, or -1 if it is not in the alphabet. */
export function base32Value(code: number): number {
  return code < 128 ? (BASE32_VALUE[code] ?? -1) : -1;
}

export type MarkerErrorCode = 'KVC_MARKER_INVALID' | 'KVC_MARKER_CONFLICT' | 'KVC_MARKER_OPTION';

/** Bad marker input (a malformed marker or row, an ownership conflict, a bad option). */
export class MarkerError extends Error {
  readonly code: MarkerErrorCode;
  constructor(code: MarkerErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'MarkerError';
    this.code = code;
  }
}

/** Fills a buffer with random bytes; injectable so callers can pass their own CSPRNG. */
export type RandomFill = (buf: Uint8Array) => void;

const defaultFill: RandomFill = (buf) => {
  randomFillSync(buf);
};

/**
 * A RandomFill that serves bytes from a buffer refilled with `randomFillSync` `poolSize` bytes at a time:
 * one call into the CSPRNG per ~150 markers instead of one per marker. Build one per owner (the registry
 * does), never share a module-level pool.
 */
export function createRandomPool(poolSize = 4096): RandomFill {
  if (!Number.isInteger(poolSize) || poolSize < 1) {
    throw new MarkerError('KVC_MARKER_OPTION', `Expected \`poolSize\` to be a positive integer, got ${String(poolSize)}`);
  }
  const pool = new Uint8Array(poolSize);
  let used = poolSize;
  return (buf) => {
    let filled = 0;
    while (filled < buf.length) {
      if (used === poolSize) {
        randomFillSync(pool);
        used = 0;
      }
      const take = Math.min(buf.length - filled, poolSize - used);
      buf.set(pool.subarray(used, used + take), filled);
      // Served bytes are wiped so a later reader of the pool cannot learn an issued marker.
      pool.fill(0, used, used + take);
      used += take;
      filled += take;
    }
  };
}

/** A fresh marker, `kvcanary-` + 26 base32 characters drawn from `fill` (default: node:crypto). */
export function generateMarker(fill: RandomFill = defaultFill): string {
  const bytes = new Uint8Array(MARKER_BODY_LENGTH);
  fill(bytes);
  let body = '';
  for (let i = 0; i < bytes.length; i++) body += BASE32_ALPHABET[bytes[i]! & 31];
  return MARKER_PREFIX + body;
}

const MARKER_RE = /^kvcanary-[a-z2-7]{26}$/i;
const BODY_RE = /^[a-z2-7]{26}$/i;

/** True for a well-formed marker (any case). */
export function isMarker(s: string): boolean {
  return MARKER_RE.test(s);
}

/**
 * The canonical (lowercase) body of a marker given with or without its prefix, or undefined if `s` is
 * neither a marker nor a bare body.
 */
export function markerBody(s: string): string | undefined {
  if (MARKER_RE.test(s)) return s.slice(MARKER_PREFIX.length).toLowerCase();
  if (BODY_RE.test(s)) return s.toLowerCase();
  return undefined;
}
