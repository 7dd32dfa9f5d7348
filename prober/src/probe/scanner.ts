/**
 * The streaming scanner: finds registered markers, whole or in fragments, in a response as it arrives,
 * and decides which are foreign (planted by another request, in any run) and which are self-echo.
 *
 * Design:
 * - Candidates are maximal runs of base32 characters (ASCII case-folded: the language of
 *   `/[a-z2-7]{FRAG,}/gi`), with or without the `kvcanary-` prefix, since a model may drop or garble it.
 *   They are found by a skip scan over a 128-entry class table rather than by that RegExp: a window of
 *   FRAG characters is checked from its end and a non-base32 character lets the scan jump past it, so
 *   most characters of ordinary text are never read. The RegExp restarts inside every word and ran 3-4x
 *   slower on model-like text; `npm run bench:scanner` measures both side by side.
 * - Inside a run the last 9 characters (the registry's key length) are rolled into two int32 lanes (see
 *   marker-registry.ts) and every position is probed: one bit of the registry's prefilter, then, for the 1
 *   in 8 to 16 that pass, the key table. Cost per position is constant whatever the number of live markers.
 *   Probes are queued in batches so the prefilter loads (the only memory traffic that grows with the
 *   registry) are issued back to back and overlap, instead of each stalling on a cache miss.
 * - A confirmed key is extended both ways while the text agrees with the marker body (backwards into the
 *   kept tail when the agreement began in an earlier chunk): the longest contiguous agreement is one
 *   match, reported when it spans FRAG or more characters. Every FRAG window of a body holds one indexed key
 *   whole, so no such agreement is missed. Keys already covered by a segment of the same marker and
 *   alignment are not reported again.
 * - Streaming without re-scanning: the rolling lanes, the run length and open segments carry over between
 *   chunks, so a marker split anywhere (even one character per chunk) is found once. The only text kept is
 *   a small tail (about 200 characters) for evidence excerpts: a 100 MB response costs no more memory.
 * - Evidence: a match is held until CONTEXT + FRAG more characters arrive (or `end()`), then gets an excerpt
 *   of the matched text and at most CONTEXT characters each side, in which every other base32 run of FRAG
 *   or more characters is replaced by `[redacted:N]`: a leaking response may carry other customers' data.
 * - `chance` bound. Markers are uniformly random and independent of any text not copied from them, so for
 *   one scanned position and one (marker, body offset) pair the probability that L characters agree is
 *   exactly 32^-L. A match of length L >= FRAG starts at one of at most W registered (marker, offset)
 *   pairs (W = registered windows: every L-character piece starts where a FRAG window does), and the text
 *   offers N candidate positions (the FRAG-character windows of base32 runs in this response; the key
 *   probes that find them are an implementation detail and do not change N). Union bound:
 *   P(any chance agreement of length >= L in this response) <= W * N * 32^-L, capped at 1. It holds for
 *   any text, adversarial or not, as long as the text was not derived from the marker itself.
 * - Whole markers of this installation need no index: every 26-character window of a base32 run of 26 or
 *   more characters is decrypted with the installation key (in batches, one cipher call per batch; the
 *   last 26 values of a run are kept in a 32-byte ring) and attributed through its planting request, so a
 *   marker planted by any earlier run or process is found. Those already in the fragment index are left to
 *   the window path. Such a match's `chance` is the decryption check's: D * 2^-48 for D windows decrypted
 *   (each passes the 48-bit check by accident with 2^-48). Windows failing the check (other
 *   installations' markers, ordinary text) are not reported unless the fragment index holds them. At most
 *   `maxDecryptWindows` windows are decrypted per response (about 1-2 us each), so an endpoint streaming
 *   endless letters cannot stall the scan; past it only the fragment index is consulted (`stats()` counts them).
 * - Bounded output: at most `maxMatches` self and, separately, `maxMatches` foreign matches are kept (so
 *   self-echo can never crowd out a leak), and at most `maxMatchesPerMarker` per marker; the rest are
 *   counted in `stats()`.
 */
import { BASE32_VALUE, MARKER_BODY_LENGTH, MARKER_PREFIX } from './markers.js';
import { FILTER_HI_MULTIPLIER, FILTER_MULTIPLIER, HASH_MULTIPLIER, UNKNOWN_OWNER, type MarkerEntry, type MarkerOwner, type MarkerRegistry, type WindowIndex } from './marker-registry.js';
import { byCodeUnits } from '../locale-free.js';
import { REDACTED, secretMask } from './redact.js';

/** The request whose response is scanned. */
export interface ReaderIdentity {
  requestId: string;
  tenant: string;
  role: string;
  /**
   * When given, a marker is self only if both its run and request match (use it where request ids may
   * repeat across runs). Otherwise request ids are taken to be unique across runs.
   */
  runId?: string;
  /**
   * Credentials of the request (its key, secret header values): scrubbed from the text around a match before
   * its excerpt is cut, so no piece of one survives at an excerpt's edge (redact.ts).
   */
  secrets?: readonly string[];
}

export interface MarkerMatch {
  /** The full marker (lowercase, with prefix) the text agrees with. */
  marker: string;
  /** The matched substring of the response, as it appeared (body characters only, never the prefix). */
  fragment: string;
  /** The whole 26-character body matched. */
  exact: boolean;
  /** UTF-16 code-unit offset of `fragment` in the response text. */
  offset: number;
  /** Characters matched (= fragment.length). */
  length: number;
  /** Where in the marker body the fragment starts. */
  bodyOffset: number;
  /** `kvcanary-` (or `kvcanary`), any case, immediately precedes a fragment that starts the body. */
  prefixed: boolean;
  /** Who planted the marker, with the planting request's number where the marker decrypted. */
  owner: MarkerOwner & { requestNo?: string };
  /** Planted by the reading request itself: expected echo, never a finding. */
  self: boolean;
  /** Planted by another request, in this run or an earlier one. */
  foreign: boolean;
  /**
   * Whether the planting request belongs to the reading run (`this-run`) or an earlier run or another
   * process of the installation (`earlier-run`); `unknown` when the reader gave no run id or the store no
   * longer knows the planting.
   */
  plantedBy: 'this-run' | 'earlier-run' | 'unknown';
  /** Upper bound on the probability that a match this long arose by chance in this response. */
  chance: number;
  /** The match and at most `context` characters either side, other base32 runs redacted. */
  excerpt: string;
}

export interface ScanStats {
  /** Characters (UTF-16 code units) pushed. */
  chars: number;
  /** FRAG-character windows scanned (candidate match starts): N in the chance bound. */
  candidatePositions: number;
  /** Largest registered window count seen during the scan: W in the chance bound. */
  registeredWindows: number;
  /** 26-character windows decrypted with the installation key: D in a decrypted match's chance. */
  decryptedWindows: number;
  /** Windows not decrypted because the response passed `maxDecryptWindows`. */
  decryptSkipped: number;
  selfMatches: number;
  foreignMatches: number;
  /** Matches counted but not kept (caps). */
  dropped: number;
}

export interface ScannerOptions {
  /** Characters of context kept either side of a match in its excerpt (0..60). @default 60 */
  context?: number;
  /** Kept matches per kind (self, foreign), each. @default 1000 */
  maxMatches?: number;
  /** Kept matches per marker. @default 16 */
  maxMatchesPerMarker?: number;
  /** Most 26-character windows decrypted per response. @default 1000000 */
  maxDecryptWindows?: number;
}

export interface ScanSession {
  /** Scan the next piece of the response. Chunks may split a marker anywhere. */
  push(chunk: string): void;
  /** Flush and return every kept match, in order of offset. The session cannot be pushed to afterwards. */
  end(): MarkerMatch[];
  stats(): ScanStats;
}

export interface Scanner {
  open(reader: ReaderIdentity): ScanSession;
}

export type ScannerErrorCode = 'KVC_SCAN_ENDED' | 'KVC_SCAN_BAD_INPUT' | 'KVC_SCAN_OPTION';

export class ScannerError extends Error {
  readonly code: ScannerErrorCode;
  constructor(code: ScannerErrorCode, message: string) {
    super(message);
    this.name = 'ScannerError';
    this.code = code;
  }
}

export const MAX_CONTEXT = 60;
const LO_MASK = 0x3fffffff;
const LO_CHARS = 6;
// Module-local copies: the hot loop must not go through import bindings (tsx may compile them to getters).
const B32 = BASE32_VALUE;
const HASH = HASH_MULTIPLIER;
const FILTER_HI = FILTER_HI_MULTIPLIER;
const FILTER = FILTER_MULTIPLIER;
const BODY_LENGTH = MARKER_BODY_LENGTH;

export function createScanner(registry: MarkerRegistry, options: ScannerOptions = {}): Scanner {
  const context = options.context ?? MAX_CONTEXT;
  const maxMatches = options.maxMatches ?? 1000;
  const maxPerMarker = options.maxMatchesPerMarker ?? 16;
  checkInt('context', context, 0, MAX_CONTEXT);
  checkInt('maxMatches', maxMatches, 1, 1_000_000);
  checkInt('maxMatchesPerMarker', maxPerMarker, 1, 1_000_000);
  const maxDecrypt = options.maxDecryptWindows ?? 1_000_000;
  checkInt('maxDecryptWindows', maxDecrypt, 0, 1_000_000_000);
  return {
    open(reader: ReaderIdentity): ScanSession {
      for (const field of ['requestId', 'tenant', 'role'] as const) {
        if (typeof reader?.[field] !== 'string' || reader[field].length === 0) {
          throw new ScannerError('KVC_SCAN_BAD_INPUT', `open: expected \`reader.${field}\` to be a non-empty string, got ${typeof reader?.[field]}`);
        }
      }
      return new Session(registry, { ...reader }, context, maxMatches, maxPerMarker, maxDecrypt);
    },
  };
}

/** Scan one whole text (a non-streamed response). */
export function scanText(scanner: Scanner, reader: ReaderIdentity, text: string): MarkerMatch[] {
  const session = scanner.open(reader);
  session.push(text);
  return session.end();
}

function checkInt(name: string, value: unknown, min: number, max: number): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new ScannerError('KVC_SCAN_OPTION', `Expected \`${name}\` to be an integer from ${min} to ${max}, got ${String(value)} (${typeof value})`);
  }
}

interface Segment {
  entry: MarkerEntry;
  /** Lowercase body, for the extension compare. Copied so a `forget` mid-scan cannot pull it away. */
  body: string;
  bodyOffset: number;
  start: number;
  length: number;
  /** Ended by a disagreement or the body's end (reported); an open one may go on in the next chunk. */
  closed: boolean;
}

type Pending = Omit<Segment, 'body' | 'closed'> & { self: boolean; decrypted: boolean };
type Unpriced = Omit<MarkerMatch, 'chance'> & { decrypted: boolean };

/** Candidate positions collected before their filter loads are issued together (4 KB of arrays per session). */
const BATCH = 256;
/** 26-character windows collected before one decryption call (about 1.7 KB per session). */
const DECRYPT_BATCH = 64;
const CHECK_CHANCE = 2 ** -48;

class Session implements ScanSession {
  private pos = 0;
  private hi = 0;
  private lo = 0;
  private runLen = 0;
  /** Open segments, and segments closed during the current push (kept to de-duplicate later windows). */
  private segs: Segment[] = [];
  private pending: Pending[] = [];
  private kept: Unpriced[] = [];
  private perMarker = new Map<string, number>();
  private selfCount = 0;
  private foreignCount = 0;
  private dropped = 0;
  private lookups = 0;
  private maxWindows = 0;
  private ended = false;
  /** Text just before the current chunk, for excerpts; at most 2 * tailSize characters. */
  private tail = '';
  private chunk = '';
  private chunkStart = 0;
  private ix: WindowIndex;
  private readonly frag: number;
  private readonly tailSize: number;
  private readonly batchLo = new Int32Array(BATCH);
  private readonly batchHi = new Int32Array(BATCH);
  private readonly batchAt = new Int32Array(BATCH);
  private readonly passed = new Int32Array(BATCH);
  private batched = 0;
  private readonly loMatches: number[] = [];
  /** The last 32 base32 values of the current run (index: run position & 31). */
  private readonly ring = new Uint8Array(32);
  private readonly decValues = new Uint8Array(DECRYPT_BATCH * BODY_LENGTH);
  private readonly decAt = new Int32Array(DECRYPT_BATCH);
  private decCount = 0;
  private decrypted = 0;
  private decryptSkipped = 0;

  constructor(
    private readonly registry: MarkerRegistry,
    private readonly reader: ReaderIdentity,
    private readonly context: number,
    private readonly maxMatches: number,
    private readonly maxPerMarker: number,
    private readonly maxDecrypt: number,
  ) {
    this.ix = registry.index();
    this.frag = registry.fragmentLength;
    // A pending match ends at most CONTEXT + FRAG before the end of the text seen; its excerpt region
    // starts at most MARKER_BODY_LENGTH + CONTEXT + FRAG before that.
    this.tailSize = 2 * (context + this.frag + MARKER_BODY_LENGTH);
  }

  push(chunk: string): void {
    if (this.ended) throw new ScannerError('KVC_SCAN_ENDED', 'push: the scan session has ended');
    if (typeof chunk !== 'string') {
      throw new ScannerError('KVC_SCAN_BAD_INPUT', `push: expected a string chunk (decoded text), got ${typeof chunk}`);
    }
    const n = chunk.length;
    if (n === 0) return;
    this.ix = this.registry.index();
    this.maxWindows = Math.max(this.maxWindows, this.registry.windowCount);
    this.chunk = chunk;
    this.chunkStart = this.pos;
    this.scan(chunk, n);
    this.pos += n;
    this.flushPending(false);
    this.advanceTail(chunk);
  }

  end(): MarkerMatch[] {
    if (this.ended) throw new ScannerError('KVC_SCAN_ENDED', 'end: the scan session has already ended');
    this.ended = true;
    this.maxWindows = Math.max(this.maxWindows, this.registry.windowCount);
    this.chunk = '';
    this.chunkStart = this.pos;
    for (const seg of this.segs) if (!seg.closed) this.close(seg);
    this.segs = [];
    this.flushPending(true);
    const w = this.maxWindows;
    const n = this.lookups;
    const d = this.decrypted;
    const out = this.kept.map(({ decrypted, ...m }): MarkerMatch => ({
      ...m,
      chance: Math.min(1, decrypted ? d * CHECK_CHANCE : w * n * Math.pow(32, -m.length)),
    }));
    out.sort((a, b) => a.offset - b.offset || byCodeUnits(a.marker, b.marker));
    this.kept = [];
    this.tail = '';
    return out;
  }

  stats(): ScanStats {
    return {
      chars: this.pos,
      candidatePositions: this.lookups,
      registeredWindows: Math.max(this.maxWindows, this.ended ? 0 : this.registry.windowCount),
      decryptedWindows: this.decrypted,
      decryptSkipped: this.decryptSkipped,
      selfMatches: this.selfCount,
      foreignMatches: this.foreignCount,
      dropped: this.dropped,
    };
  }

  private scan(chunk: string, n: number): void {
    // Segments open at the end of the previous chunk go on (or stop) with this chunk's first characters.
    if (this.segs.length !== 0) for (const seg of this.segs) if (!seg.closed) this.grow(seg, chunk, n);
    let i = 0;
    if (this.runLen > 0) {
      i = this.roll(chunk, 0, n);
      if (i === n) {
        this.flushBatch(chunk, n); // the whole chunk continued the run
        this.flushDecrypt();
        return;
      }
      this.runLen = 0;
      i++;
    }
    i = this.skipScan(chunk, i, n);
    if (i < n && this.runLen === 0) this.carryTail(chunk, i, n);
    this.flushBatch(chunk, n);
    this.flushDecrypt();
    if (this.segs.length !== 0) this.segs = this.segs.filter((seg) => !seg.closed);
  }

  /**
   * Find every run of FRAG or more base32 characters from `i` on and roll it. Invariant: the character
   * before `i` is not base32, so such a run starting at or after `i` starts exactly where a window
   * [i, i + FRAG) is all base32. Each window is checked from its end: a non-base32 character at r rules
   * out every start up to r, so `i` jumps past it; in model text (mostly short words) most characters are
   * never read. Returns where it stopped: n if a run reaches the end of the chunk (it stays open), else the
   * start of the last, shorter-than-FRAG stretch.
   */
  private skipScan(chunk: string, i: number, n: number): number {
    const frag = this.frag;
    outer: while (i + frag <= n) {
      for (let r = i + frag - 1; r >= i; r--) {
        const c = chunk.charCodeAt(r);
        if (c >= 128 || B32[c]! < 0) {
          i = r + 1;
          continue outer;
        }
      }
      const e = this.roll(chunk, i, n);
      if (e === n) return n;
      this.runLen = 0;
      i = e + 1;
    }
    return i;
  }

  /** A base32 piece shorter than FRAG at the very end of a chunk may start a run: carry it in the lanes. */
  private carryTail(chunk: string, i: number, n: number): void {
    let start = n;
    while (start > i && isBase32(chunk.charCodeAt(start - 1))) start--;
    if (start < n) this.roll(chunk, start, n);
  }

  /**
   * Roll base32 characters from `p` into the lanes and queue every full window for a probe; returns
   * where the run stopped. Probes are batched so their filter loads are issued back to back.
   */
  private roll(chunk: string, p: number, n: number): number {
    const frag = this.frag;
    const keyLength = this.ix.keyLength;
    const hiMask = this.ix.hiMask;
    const batchLo = this.batchLo;
    const batchHi = this.batchHi;
    const batchAt = this.batchAt;
    let hi = this.hi;
    let lo = this.lo;
    let runLen = this.runLen;
    let batched = this.batched;
    let windows = 0;
    const ring = this.ring;
    for (; p < n; p++) {
      const c = chunk.charCodeAt(p);
      const v = c < 128 ? B32[c]! : -1;
      if (v < 0) break;
      hi = ((hi << 5) | (lo >>> 25)) & hiMask;
      lo = ((lo << 5) | v) & LO_MASK;
      ring[runLen & 31] = v;
      runLen++;
      if (runLen >= BODY_LENGTH) this.queueDecrypt(runLen, p);
      if (runLen >= keyLength) {
        if (runLen >= frag) windows++;
        batchLo[batched] = lo;
        batchHi[batched] = hi;
        batchAt[batched] = p;
        if (++batched === BATCH) {
          this.batched = batched;
          this.flushBatch(chunk, n);
          batched = 0;
        }
      }
    }
    this.hi = hi;
    this.lo = lo;
    this.runLen = runLen;
    this.batched = batched;
    this.lookups += windows;
    return p;
  }

  /** Queue the 26-character window ending at chunk index `p` (the run's last `runLen` characters) for decryption. */
  private queueDecrypt(runLen: number, p: number): void {
    if (this.decrypted + this.decCount >= this.maxDecrypt) {
      this.decryptSkipped++;
      return;
    }
    const base = this.decCount * BODY_LENGTH;
    const ring = this.ring;
    for (let k = 0, from = runLen - BODY_LENGTH; k < BODY_LENGTH; k++) this.decValues[base + k] = ring[(from + k) & 31]!;
    this.decAt[this.decCount] = this.chunkStart + p;
    if (++this.decCount === DECRYPT_BATCH) this.flushDecrypt();
  }

  /** Decrypt the queued windows; a window that is a marker of this installation (not in the fragment index) is a match. */
  private flushDecrypt(): void {
    const count = this.decCount;
    if (count === 0) return;
    this.decCount = 0;
    this.decrypted += count;
    const entries = this.registry.decodeValues(this.decValues, count);
    for (let c = 0; c < count; c++) {
      const entry = entries[c];
      if (entry === undefined || this.registry.isRecent(entry.marker)) continue;
      const start = this.decAt[c]! - BODY_LENGTH + 1;
      this.close({ entry, body: entry.marker.slice(MARKER_PREFIX.length), bodyOffset: 0, start, length: BODY_LENGTH, closed: false }, true);
    }
  }

  /** Probe the queued windows: the filter for all of them first, then the table for the few that pass. */
  private flushBatch(chunk: string, n: number): void {
    const batched = this.batched;
    if (batched === 0) return;
    this.batched = 0;
    const ix = this.ix;
    const { filter, filterShift, refs, bodies, shift, mask } = ix;
    const loStart = ix.keyLength - LO_CHARS;
    const batchLo = this.batchLo;
    const batchHi = this.batchHi;
    const passed = this.passed;
    let m = 0;
    for (let k = 0; k < batched; k++) {
      const h = Math.imul(batchLo[k]! ^ Math.imul(batchHi[k]!, FILTER_HI), FILTER) >>> filterShift;
      passed[m] = k;
      m += (filter[h >>> 5]! >>> (h & 31)) & 1; // branch-free, so the loads overlap
    }
    let hits = 0;
    for (let j = 0; j < m; j++) {
      const k = passed[j]!;
      const lo = batchLo[k]!;
      for (let s = Math.imul(lo, HASH) >>> shift; ; s = (s + 1) & mask) {
        const ref = refs[s]!;
        if (ref === 0) break;
        // Refs only: the slot's key `lo` lane is read from the body bytes.
        const b = ((ref - 1) >>> 5) * BODY_LENGTH + ((ref - 1) & 31) + loStart;
        const slotLo = (((((((((bodies[b]! << 5) | bodies[b + 1]!) << 5) | bodies[b + 2]!) << 5) | bodies[b + 3]!) << 5) | bodies[b + 4]!) << 5) | bodies[b + 5]!;
        if (slotLo === lo) {
          this.loMatches.push(k, ref);
          hits++;
        }
      }
    }
    // Rare path, kept out of the loops above so they stay optimised: full check, then segments.
    if (hits > 0) this.confirm(chunk, n);
  }

  /** Keys whose `lo` lane matched a slot (pairs of batch index, ref): check `hi`, then verify the text around them. */
  private confirm(chunk: string, n: number): void {
    const pairs = this.loMatches;
    for (let j = 0; j < pairs.length; j += 2) {
      const k = pairs[j]!;
      const ref = pairs[j + 1]!;
      if (hiOf(this.ix, ref) === this.batchHi[k]) this.hit(ref, this.batchAt[k]!, chunk, n);
    }
    pairs.length = 0;
  }

  /**
   * A key ending at chunk index `at` agrees with a marker body (its key at body offset `(ref - 1) & 31`).
   * The agreement is extended both ways over the text (back into the kept tail if need be, forward to the
   * end of the chunk): it is a match when it spans at least FRAG characters. Every FRAG window of the body
   * holds a key whole, so every agreement of FRAG or more is reached through one of its keys, and it opens
   * one segment with exactly the bounds the window-per-position index gave. An agreement still open at the
   * chunk's end stays a segment and is judged when it closes.
   */
  private hit(ref: number, at: number, chunk: string, n: number): void {
    const index = (ref - 1) >>> 5;
    const keyOffset = (ref - 1) & 31;
    const bodies = this.ix.bodies;
    const base = index * BODY_LENGTH;
    const keyStart = this.chunkStart + at - this.ix.keyLength + 1;
    let from = keyOffset;
    while (from > 0 && this.valueAt(keyStart - (keyOffset - from) - 1, chunk) === bodies[base + from - 1]) from--;
    let to = keyOffset + this.ix.keyLength;
    let q = at + 1;
    while (to < BODY_LENGTH && q < n && charValue(chunk.charCodeAt(q)) === bodies[base + to]) {
      to++;
      q++;
    }
    const closed = to === BODY_LENGTH || q < n;
    if (closed && to - from < this.frag) return; // a chance agreement shorter than a fragment
    const start = keyStart - (keyOffset - from);
    const lastAbs = this.chunkStart + at;
    // Hits arrive in text order, so a closed segment ending before this key can never cover a later one:
    // drop those, or a chunk repeating one marker thousands of times would make this quadratic.
    if (this.segs.length > 8) this.segs = this.segs.filter((seg) => !seg.closed || seg.start + seg.length > keyStart);
    for (const seg of this.segs) {
      if (seg.start - seg.bodyOffset === start - from && lastAbs < seg.start + seg.length && sameBody(seg.body, bodies, base)) return;
    }
    const entry = this.ix.entryAt(index);
    if (entry === undefined) return;
    const seg: Segment = { entry, body: entry.marker.slice(MARKER_PREFIX.length), bodyOffset: from, start, length: to - from, closed: false };
    this.segs.push(seg);
    if (closed) this.close(seg);
  }

  /** The base32 value of the text at absolute offset `abs` (current chunk or kept tail), -1 if not base32 or not kept. */
  private valueAt(abs: number, chunk: string): number {
    if (abs >= this.chunkStart) return charValue(chunk.charCodeAt(abs - this.chunkStart));
    const k = abs - (this.chunkStart - this.tail.length);
    return k >= 0 ? charValue(this.tail.charCodeAt(k)) : -1;
  }

  /** Extend a segment over the current chunk while the text agrees with the body; close it where it stops. */
  private grow(seg: Segment, chunk: string, n: number): void {
    let next = seg.bodyOffset + seg.length;
    let at = seg.start + seg.length - this.chunkStart;
    while (next < BODY_LENGTH && at < n) {
      const c = chunk.charCodeAt(at);
      if ((c < 128 ? B32[c]! : -1) !== B32[seg.body.charCodeAt(next)]) break;
      next++;
      at++;
    }
    seg.length = next - seg.bodyOffset;
    if (next === BODY_LENGTH || at < n) this.close(seg);
  }

  private close(seg: Segment, decrypted = false): void {
    seg.closed = true;
    if (seg.length < this.frag) return; // a key's agreement that ended short of a fragment: not a match
    const { entry } = seg;
    const self = entry.requestId === this.reader.requestId && (this.reader.runId === undefined || entry.runId === this.reader.runId);
    if (self) this.selfCount++;
    else this.foreignCount++;
    const seen = (this.perMarker.get(entry.marker) ?? 0) + 1;
    this.perMarker.set(entry.marker, seen);
    if (seen > this.maxPerMarker || (self ? this.selfCount : this.foreignCount) > this.maxMatches) {
      this.dropped++;
      return;
    }
    this.pending.push({ entry, bodyOffset: seg.bodyOffset, start: seg.start, length: seg.length, self, decrypted });
  }

  /** Give pending matches their excerpt once enough text after them has arrived (or at the end). */
  private flushPending(all: boolean): void {
    if (this.pending.length === 0) return;
    const waitFor = this.context + this.frag;
    const still: Pending[] = [];
    for (const p of this.pending) {
      if (!all && p.start + p.length + waitFor > this.pos) still.push(p);
      else this.kept.push(this.evidence(p));
    }
    this.pending = still;
  }

  private evidence(p: Pending): Unpriced {
    const end = p.start + p.length;
    const tailStart = this.chunkStart - this.tail.length;
    const regionFrom = Math.max(tailStart, p.start - this.context - this.frag);
    const regionTo = Math.min(this.pos, end + this.context + this.frag);
    const region = this.text(regionFrom, regionTo);
    let prefixed = false;
    if (p.bodyOffset === 0) {
      const before = region.slice(Math.max(0, p.start - regionFrom - MARKER_PREFIX.length), p.start - regionFrom).toLowerCase();
      prefixed = before.endsWith(MARKER_PREFIX) || before.endsWith(MARKER_PREFIX.slice(0, -1));
    }
    return {
      marker: p.entry.marker,
      fragment: region.slice(p.start - regionFrom, end - regionFrom),
      exact: p.length === MARKER_BODY_LENGTH,
      offset: p.start,
      length: p.length,
      bodyOffset: p.bodyOffset,
      prefixed,
      owner: {
        runId: p.entry.runId,
        requestId: p.entry.requestId,
        role: p.entry.role,
        tenant: p.entry.tenant,
        plantedAt: p.entry.plantedAt,
        ...(p.entry.target !== undefined ? { target: p.entry.target } : {}),
        ...(p.entry.requestNo !== undefined ? { requestNo: p.entry.requestNo } : {}),
      },
      self: p.self,
      foreign: !p.self,
      plantedBy: this.reader.runId === undefined || p.entry.runId === UNKNOWN_OWNER ? 'unknown' : p.entry.runId === this.reader.runId ? 'this-run' : 'earlier-run',
      decrypted: p.decrypted,
      excerpt: this.excerptOf(region, p.start - regionFrom, end - regionFrom),
    };
  }

  /**
   * The excerpt, with the request's secrets scrubbed over the whole region (which reaches FRAG = 12
   * characters, the redactor's piece length, past each edge) before it is cut: a key piece cut by the edge
   * is still recognised whole. Scrubbed characters are held by NUL while cutting, then become one mark.
   */
  private excerptOf(region: string, ms: number, me: number): string {
    const secrets = this.reader.secrets;
    const mask = secrets === undefined || secrets.length === 0 ? undefined : secretMask(region, secrets);
    if (mask === undefined) return redactedExcerpt(region, ms, me, this.context, this.frag);
    let held = '';
    for (let i = 0; i < region.length; i++) held += mask[i] === 1 && (i < ms || i >= me) ? '\u0000' : region[i]!;
    return redactedExcerpt(held, ms, me, this.context, this.frag).replace(/\u0000+/g, REDACTED);
  }

  /** Text between absolute offsets, from the kept tail and the current chunk. */
  private text(from: number, to: number): string {
    const tailStart = this.chunkStart - this.tail.length;
    let s = '';
    if (from < this.chunkStart) s += this.tail.slice(from - tailStart, Math.min(to, this.chunkStart) - tailStart);
    if (to > this.chunkStart) s += this.chunk.slice(Math.max(from, this.chunkStart) - this.chunkStart, to - this.chunkStart);
    return s;
  }

  private advanceTail(chunk: string): void {
    const size = this.tailSize;
    if (chunk.length >= size) this.tail = detach(chunk.slice(-size));
    else {
      this.tail += chunk;
      if (this.tail.length > 2 * size) this.tail = detach(this.tail.slice(-size));
    }
    this.chunk = '';
  }
}

function isBase32(code: number): boolean {
  return code < 128 && B32[code]! >= 0;
}

/** The base32 value of a UTF-16 code unit (any case), -1 if it is not base32. */
function charValue(code: number): number {
  return code < 128 ? B32[code]! : -1;
}

/** Whether a lowercase body string has the body values at `base`. */
function sameBody(body: string, bodies: Uint8Array, base: number): boolean {
  for (let k = 0; k < BODY_LENGTH; k++) if (B32[body.charCodeAt(k)] !== bodies[base + k]) return false;
  return true;
}

/** The `hi` lane of the key a table ref points at, from the body bytes (see marker-registry.ts). */
function hiOf(ix: WindowIndex, ref: number): number {
  const start = ((ref - 1) >>> 5) * BODY_LENGTH + ((ref - 1) & 31);
  const bodies = ix.bodies;
  let hi = 0;
  for (let k = 0, n = ix.keyLength - LO_CHARS; k < n; k++) hi = (hi << 5) | bodies[start + k]!;
  return hi;
}

/**
 * A copy of a short string that shares no storage with its source: V8 slices keep their parent alive, and
 * the parent may be a 100 MB response chunk.
 */
function detach(s: string): string {
  return Buffer.from(s, 'utf16le').toString('utf16le');
}

/**
 * The excerpt of `region` around the match at [ms, me): at most `context` characters either side (never
 * splitting a surrogate pair), with every other base32 run of `frag` or more characters replaced by
 * `[redacted:N]` (N = characters hidden). Run lengths are judged over the whole region, which reaches
 * `frag` characters past the excerpt where the text allows, so a long run cut by the excerpt's edge is
 * still recognised as long.
 */
export function redactedExcerpt(region: string, ms: number, me: number, context: number, frag: number): string {
  let ws = Math.max(0, ms - context);
  let we = Math.min(region.length, me + context);
  if (ws > 0 && isLowSurrogate(region.charCodeAt(ws))) ws++;
  if (we < region.length && isLowSurrogate(region.charCodeAt(we))) we--;
  let out = '';
  let copied = ws;
  let runStart = -1;
  const flushRun = (runEnd: number): void => {
    if (runStart < 0) return;
    const from = Math.max(runStart, ws);
    const to = Math.min(runEnd, we);
    if (runEnd - runStart >= frag && from < to) {
      out += region.slice(copied, from) + `[redacted:${to - from}]`;
      copied = to;
    }
    runStart = -1;
  };
  for (let k = 0; k <= region.length; k++) {
    // The match itself is kept verbatim and splits any run it sits in.
    const inRun = k < region.length && (k < ms || k >= me) && isBase32(region.charCodeAt(k));
    if (inRun) {
      if (runStart < 0) runStart = k;
    } else {
      flushRun(k);
      if (k >= we) break;
    }
  }
  return out + region.slice(copied, we);
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}
