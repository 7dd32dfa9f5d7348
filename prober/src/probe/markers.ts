/**
 * Canary markers: the envelope, how a body is drawn, the installation's marker cipher, and the base32
 * character class the scanner keys on.
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
 *
 * Planted markers are not random strings but encryptions (`createMarkerCodec`): the body is 2 pad bits and
 * one AES-128 block, the encryption under the installation's key of (request number: 64 bits, marker
 * index: 16 bits, check field: 48 zero bits). Any process holding the key decrypts a marker it sees, and a
 * string that is not one of its markers (forged, random, another installation's) passes the check with
 * probability 2^-48. Nothing per marker needs storing: one row per planting request (its request number)
 * attributes every marker it carried. AES under an unknown key is a pseudorandom permutation, so bodies are
 * still uniform 5-bit characters to anyone without the key, and the `chance` bound stands. The 2 pad bits
 * (130 - 128) come from a second block, AES(plaintext with the check's last byte set to 1), so a marker is
 * a pure function of (key, request number, index) and can be re-derived for the fragment index.
 */
import { createCipheriv, createDecipheriv, randomFillSync, type Cipher, type Decipher } from 'node:crypto';

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

/** Bytes of the installation's marker key (AES-128). */
export const MARKER_KEY_BYTES = 16;
/** Bits of the check field a decrypted block must carry (all zero): a random body passes with 2^-48. */
export const MARKER_CHECK_BITS = 48;
/** Most markers one request may carry (the 16-bit marker index). */
export const MAX_MARKERS_PER_REQUEST = 65536;
/** Hex digits of a request number (64 bits). */
export const REQUEST_NUMBER_HEX = 16;

/** What a valid marker decrypts to. */
export interface DecodedMarker {
  /** 64-bit request number as 16 lowercase hex digits. */
  requestNo: string;
  /** Position of the marker among the request's markers (0-based). */
  index: number;
}

/**
 * The installation's marker cipher. The key stays in the closure (and OpenSSL): nothing here exposes it,
 * so a logged or serialised codec carries no secret.
 */
export interface MarkerCodec {
  /** The marker (`kvcanary-` + 26 characters) for request `requestNo` (16 hex digits), marker `index`. */
  encode(requestNo: string, index: number): string;
  /** Decrypt a marker or bare body (any case): its request and index, or undefined if the check fails. */
  decode(markerOrBody: string): DecodedMarker | undefined;
  /**
   * Decrypt `count` candidate bodies given as base32 values (0..31), 26 per candidate in `values`, in one
   * cipher call. Returns, per candidate, the decoded marker or undefined.
   */
  decodeValues(values: Uint8Array, count: number): (DecodedMarker | undefined)[];
}

export function createMarkerCodec(key: Uint8Array): MarkerCodec {
  if (!(key instanceof Uint8Array) || key.length !== MARKER_KEY_BYTES) {
    throw new MarkerError('KVC_MARKER_OPTION', `Expected a ${MARKER_KEY_BYTES}-byte marker key, got ${key instanceof Uint8Array ? `${key.length} bytes` : typeof key}`);
  }
  const material = Buffer.from(key);
  const cipher: Cipher = createCipheriv('aes-128-ecb', material, null).setAutoPadding(false);
  const decipher: Decipher = createDecipheriv('aes-128-ecb', material, null).setAutoPadding(false);
  material.fill(0);
  const plain = Buffer.alloc(32);
  return {
    encode(requestNo, index) {
      if (typeof requestNo !== 'string' || !/^[0-9a-f]{16}$/.test(requestNo)) {
        throw new MarkerError('KVC_MARKER_INVALID', `encode: expected a request number of ${REQUEST_NUMBER_HEX} lowercase hex digits, got ${JSON.stringify(String(requestNo).slice(0, 40))}`);
      }
      if (!Number.isInteger(index) || index < 0 || index >= MAX_MARKERS_PER_REQUEST) {
        throw new MarkerError('KVC_MARKER_INVALID', `encode: expected a marker index from 0 to ${MAX_MARKERS_PER_REQUEST - 1}, got ${String(index)}`);
      }
      plain.fill(0);
      plain.write(requestNo, 0, 'hex');
      plain.writeUInt16BE(index, 8);
      plain.copy(plain, 16, 0, 16);
      plain[31] = 1;
      const out = cipher.update(plain);
      return MARKER_PREFIX + bodyOfBlock(out, out[16]! & 3);
    },
    decode(markerOrBody) {
      const body = markerBody(markerOrBody);
      if (body === undefined) return undefined;
      const values = new Uint8Array(MARKER_BODY_LENGTH);
      for (let k = 0; k < MARKER_BODY_LENGTH; k++) values[k] = BASE32_VALUE[body.charCodeAt(k)]!;
      return this.decodeValues(values, 1)[0];
    },
    decodeValues(values, count) {
      if (count <= 0) return [];
      const blocks = Buffer.allocUnsafe(16 * count);
      for (let c = 0; c < count; c++) blockOfValues(values, c * MARKER_BODY_LENGTH, blocks, c * 16);
      const out = decipher.update(blocks);
      const decoded: (DecodedMarker | undefined)[] = new Array(count);
      for (let c = 0; c < count; c++) {
        const o = c * 16;
        let check = 0;
        for (let b = 10; b < 16; b++) check |= out[o + b]!;
        decoded[c] = check !== 0 ? undefined : { requestNo: out.toString('hex', o, o + 8), index: out.readUInt16BE(o + 8) };
      }
      return decoded;
    },
  };
}

/** 26 base32 characters of `pad` (2 bits) followed by the 128 bits of `block[0..16)`, most significant first. */
function bodyOfBlock(block: Uint8Array, pad: number): string {
  // 130 bits as a stream: pad, then block bytes.
  let acc = pad;
  let bits = 2;
  let byte = 0;
  let body = '';
  while (body.length < MARKER_BODY_LENGTH) {
    while (bits < 5) {
      acc = (acc << 8) | block[byte++]!;
      bits += 8;
    }
    body += BASE32_ALPHABET[(acc >>> (bits - 5)) & 31];
    bits -= 5;
    acc &= (1 << bits) - 1;
  }
  return body;
}

/** The 128-bit block of 26 body values at `from` (the top 2 bits, the pad, dropped) into `out` at `at`. */
function blockOfValues(values: Uint8Array, from: number, out: Uint8Array, at: number): void {
  let acc = values[from]! & 7; // the first character: 2 pad bits, then the block's top 3 bits
  let bits = 3;
  let byte = at;
  for (let k = 1; k < MARKER_BODY_LENGTH; k++) {
    acc = (acc << 5) | values[from + k]!;
    bits += 5;
    if (bits >= 8) {
      out[byte++] = (acc >>> (bits - 8)) & 255;
      bits -= 8;
      acc &= (1 << bits) - 1;
    }
  }
}

/** A fresh random 64-bit request number (16 hex digits). */
export function newRequestNumber(fill: RandomFill = defaultFill): string {
  const bytes = new Uint8Array(8);
  fill(bytes);
  return Buffer.from(bytes).toString('hex');
}
