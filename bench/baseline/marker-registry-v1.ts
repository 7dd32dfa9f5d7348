// Frozen copy of prober/src/probe/marker-registry.ts before the refs-only / sparse-key table (bench:marker-memory baseline). Not used by the prober.
/**
 * The marker registry: the installation's marker cipher, the planting requests (one per request that
 * carried markers: run, request, role, tenant, time, marker count), and a bounded index from every
 * FRAG-character window of every recent marker body to the marker it belongs to, so the scanner
 * attributes any text position in constant time (one prefilter bit, rarely one table probe) whatever the
 * number of live markers.
 *
 * Design:
 * - Markers attribute themselves. `plant()` gives a request its next marker: the encryption under the
 *   installation key of (the request's 64-bit request number, marker index, check field), see markers.ts.
 *   The caller persists the planting (the store's `recordPlantings(plantingRows(entries))`, one row per
 *   request) before the request leaves. Any registry holding the same key decrypts a whole marker it sees
 *   (`decodeValues`) and finds the planting in memory or through `lookupPlanting` (the store), whichever
 *   run or process planted it; a body that fails the check is not this installation's.
 * - Fragments cannot be decrypted, so the window index below holds the recent markers only: this process's
 *   and those of plantings reloaded with `addPlantings` (re-derived from their request numbers, nothing
 *   per marker is stored). It is bounded: past `maxRecentMarkers` the oldest are evicted (whole copies of
 *   them are still recognised by decryption). In-memory plantings are bounded by `maxPlantings` the same way.
 *   `add(rows)` registers given markers (any string of the envelope) with their owners; `forget(olderThan)`
 *   retires markers by age.
 * - Window index. A window of FRAG <= 12 base32 characters is at most 60 bits, held as two int32 lanes:
 *   `lo` = its last 6 characters (30 bits), `hi` = the ones before. The scanner rolls both lanes across
 *   the text one character at a time, so a probe costs a multiply, a shift and a typed-array read, with no
 *   string built per position. The table is open addressing with linear probing over typed arrays (`los`,
 *   `refs`), at most half full; the home slot is a Fibonacci hash of `lo`. Bodies are uniformly random, so
 *   registered keys spread evenly whatever text is probed. `hi` is not stored: on the rare `lo` match it
 *   is checked against the body bytes. Deletion is backward-shift (no tombstones), so a table that has
 *   forgotten millions of markers probes as fast as a fresh one.
 * - A prefilter bitset (8 to 16 bits per window, 2 MB at 100k markers) answers most probes from a
 *   cache-sized array; only the 1 in 8 to 16 positions that pass touch the table. Bits cannot be cleared,
 *   so `forget` rebuilds it from the live bodies. (16 bits per window measured slower at 100k markers:
 *   the larger bitset misses the cache more often than the extra table probes cost.)
 * - Memory is bounded per live marker, and held in typed arrays: 26 body bytes, (27 - FRAG) windows x 2-4
 *   slots x 8 bytes of table, 1-2 bytes of prefilter per window, 24 bytes of owner slot, index, time and
 *   eviction sequence, 16 of eviction queue. Owners (run, request, role, tenant, time) are one shared object
 *   per planting request, and a MarkerEntry is built when asked for (`entryAt`, `get`, a scanner hit) from
 *   the owner and the body: no object, string or Map entry per marker (those were about 280 of the 770 bytes
 *   a marker cost, measured at 50,000 markers planted 20 a request; now about 490). The default bound of
 *   50,000 recent markers holds the index to about 25 MB. A live body is found through the window table
 *   (its offset-0 window, then every character), not a Map.
 * - A window may belong to several markers (chance collisions are allowed, never assumed away): every slot
 *   holding the key is a hit.
 */
import { randomBytes } from 'node:crypto';
import {
  BASE32_ALPHABET,
  MARKER_BODY_LENGTH,
  MARKER_PREFIX,
  MAX_MARKERS_PER_REQUEST,
  MarkerError,
  base32Value,
  createMarkerCodec,
  createRandomPool,
  isMarker,
  markerBody,
  newRequestNumber,
  type MarkerCodec,
  type RandomFill,
} from '../../prober/src/probe/markers.js';

/** Who planted a marker. Plain strings so rows round-trip through JSON and SQLite unchanged. */
export interface MarkerOwner {
  runId: string;
  requestId: string;
  /** planter | reader | overlimit | control | ... */
  role: string;
  tenant: string;
  /** ISO 8601 timestamp (normalised with `toISOString()`). */
  plantedAt: string;
  /** The probed target, where the planting's run is recorded (earlier runs, from the store). */
  target?: string;
}

/** One registry row: a marker and its owner. */
export interface MarkerEntry extends MarkerOwner {
  /** The full marker, lowercase, with its `kvcanary-` prefix. */
  marker: string;
  /** The planting request's number (16 hex digits) for markers of this installation. */
  requestNo?: string;
  /** The marker's index within its planting request. */
  index?: number;
}

/** One planting request: everything needed to attribute (and re-derive) every marker it carried. */
export interface PlantingRow {
  /** 64-bit request number, 16 lowercase hex digits. */
  requestNo: string;
  runId: string;
  requestId: string;
  role: string;
  tenant: string;
  /** ISO 8601 time of its first marker. */
  plantedAt: string;
  /** Markers it carried (indices 0..markerCount-1). */
  markerCount: number;
  /** Where known (the store joins the run's target). */
  target?: string;
}

/** The planting rows (one per request number, highest count) covering these entries. */
export function plantingRows(entries: Iterable<MarkerEntry>): PlantingRow[] {
  const out = new Map<string, PlantingRow>();
  for (const e of entries) {
    if (e.requestNo === undefined || e.index === undefined) continue;
    const row = out.get(e.requestNo);
    if (row === undefined) {
      out.set(e.requestNo, { requestNo: e.requestNo, runId: e.runId, requestId: e.requestId, role: e.role, tenant: e.tenant, plantedAt: e.plantedAt, markerCount: e.index + 1 });
    } else {
      row.markerCount = Math.max(row.markerCount, e.index + 1);
      if (e.plantedAt < row.plantedAt) row.plantedAt = e.plantedAt;
    }
  }
  return [...out.values()];
}

/** What `plant` needs; `plantedAt` defaults to the registry's clock. */
export type PlantRequest = Omit<MarkerOwner, 'plantedAt'> & { plantedAt?: string | Date };

export interface MarkerRegistryOptions {
  /**
   * Shortest body fragment (characters) that is looked up and reported. 12 characters = 60 bits.
   * From 8 to 12: two 30-bit lanes hold at most 12, and below 8 chance matches become likely.
   * @default 12
   */
  fragmentLength?: number;
  /** Clock for `plant` when no `plantedAt` is given. @default () => new Date() */
  now?: () => Date;
  /** Random source for request numbers. @default a per-registry pool over node:crypto randomFillSync */
  random?: RandomFill;
  /**
   * The installation's 16-byte marker key (see marker-key.ts). @default a fresh random key: markers are then
   * recognised by this registry only (tests, benches).
   */
  key?: Uint8Array;
  /** Finds a planting this registry does not hold (the store's `findPlanting`). */
  lookupPlanting?: (requestNo: string) => PlantingRow | undefined;
  /**
   * Most markers kept in the fragment index; past it the oldest are evicted (their whole copies are still
   * recognised by decryption). About 490 bytes each. @default 50000 (DEFAULT_MAX_RECENT_MARKERS)
   */
  maxRecentMarkers?: number;
  /** Most planting requests kept in memory, about 300 bytes each (older ones are looked up in the store). @default 16384 */
  maxPlantings?: number;
}

/** A window of text that agrees with `entry`'s body starting at body character `offset`. */
export interface WindowHit {
  entry: MarkerEntry;
  offset: number;
}

/**
 * The probe structure the scanner's hot loop reads directly (fields change when the table grows: read
 * them again after any registry call, never cache across pushes). Not for other callers: use `lookup`.
 */
export interface WindowIndex {
  readonly fragmentLength: number;
  /** Mask of the `hi` lane (5 bits per character before the last 6). */
  readonly hiMask: number;
  /** 32 - log2(slots): the Fibonacci hash of `lo` is `Math.imul(lo, HASH_MULTIPLIER) >>> shift`. */
  readonly shift: number;
  /** slots - 1 */
  readonly mask: number;
  /**
   * Prefilter: a bitset over `filterHash(hi, lo) >>> filterShift`, 8 to 16 bits per window (1 in 8 to 1 in
   * 16 false positives). Most probed positions are rejected by one load from a cache-sized array; the
   * scanner issues these loads in branch-free batches, so they overlap instead of each paying a table miss.
   */
  readonly filter: Int32Array;
  readonly filterShift: number;
  /** `lo` lane of the window in each slot. */
  readonly los: Int32Array;
  /** 0 = empty, else markerIndex * 32 + bodyOffset + 1. */
  readonly refs: Int32Array;
  /** Body values (0..31), MARKER_BODY_LENGTH per marker index. */
  readonly bodies: Uint8Array;
  /**
   * The entry of the marker at an index (a ref's `(ref - 1) >>> 5`), undefined if none lives there. Built
   * on each call from the index's owner and body (nothing per marker is kept as an object): compare entries
   * by `marker`, not identity.
   */
  entryAt(markerIndex: number): MarkerEntry | undefined;
}

export interface MarkerRegistry {
  readonly fragmentLength: number;
  /** Live markers. */
  readonly size: number;
  /** Registered windows (size x (27 - fragmentLength)): the W of the scanner's chance bound. */
  readonly windowCount: number;
  /**
   * The next marker of the request `owner` names (a new planting on its first call), registered with its
   * owner; returns the entry (persist its planting, then send it).
   */
  plant(owner: PlantRequest): MarkerEntry;
  /**
   * Register earlier plantings (reloaded from the store): their owners become known, and their markers are
   * re-derived into the fragment index, the most recent last so the bound evicts the oldest.
   */
  addPlantings(rows: Iterable<PlantingRow>): number;
  /** This registry's in-memory plantings. */
  plantings(): PlantingRow[];
  /**
   * Decrypt `count` candidate bodies (26 base32 values each): the entry of each that is this
   * installation's marker (owner from memory, the store, or `unknown` when neither has it), else undefined.
   */
  decodeValues(values: Uint8Array, count: number): (MarkerEntry | undefined)[];
  /**
   * Register existing rows (earlier runs, reloaded from the store). All rows are validated before any is
   * added; re-adding a marker with the same owner is a no-op, with a different owner a `KVC_MARKER_CONFLICT`.
   * Returns how many were new.
   */
  add(entries: Iterable<MarkerEntry>): number;
  /** The entry for a marker, given with or without its prefix, any case (recent, or decrypted). */
  get(marker: string): MarkerEntry | undefined;
  /** True if the marker (with or without prefix, any case) is in the fragment index. */
  isRecent(marker: string): boolean;
  /** Every registered marker one FRAG-character window (any case) belongs to, and where. */
  lookup(window: string): WindowHit[];
  /** Drop markers planted strictly before `olderThan`. Returns how many were dropped. */
  forget(olderThan: Date | string | number): number;
  /** Every live entry, as plain rows (JSON- and SQLite-ready). */
  rows(): MarkerEntry[];
  /** For the scanner's hot loop. */
  index(): WindowIndex;
}

export const DEFAULT_FRAGMENT_LENGTH = 12;
export const DEFAULT_MAX_RECENT_MARKERS = 50_000;
export const DEFAULT_MAX_PLANTINGS = 16_384;
/** Owner fields of a marker that decrypts (it is this installation's) but whose planting is not known. */
export const UNKNOWN_OWNER = 'unknown';
export const MIN_FRAGMENT_LENGTH = 8;
export const MAX_FRAGMENT_LENGTH = 12;
/** 2^32 / golden ratio: Fibonacci hashing. */
export const HASH_MULTIPLIER = 0x9e3779b1;
/** Prefilter hash: `Math.imul(lo ^ Math.imul(hi, FILTER_HI_MULTIPLIER), FILTER_MULTIPLIER)`. */
export const FILTER_HI_MULTIPLIER = 0x85ebca6b;
export const FILTER_MULTIPLIER = 0xc2b2ae35;
const FILTER_BITS_PER_WINDOW = 8;
const MIN_FILTER_LOG2 = 12;
const LO_CHARS = 6;
const LO_MASK = 0x3fffffff;
const MIN_SLOTS_LOG2 = 10;
/** refs pack markerIndex * 32 + offset + 1 into an int32. */
const MAX_MARKERS = 1 << 26;
const MAX_FIELD_LENGTH = 256;

const OWNER_FIELDS = ['runId', 'requestId', 'role', 'tenant'] as const;

export function createMarkerRegistry(options: MarkerRegistryOptions = {}): MarkerRegistry {
  const frag = options.fragmentLength ?? DEFAULT_FRAGMENT_LENGTH;
  if (!Number.isInteger(frag) || frag < MIN_FRAGMENT_LENGTH || frag > MAX_FRAGMENT_LENGTH) {
    throw new MarkerError(
      'KVC_MARKER_OPTION',
      `Expected \`fragmentLength\` to be an integer from ${MIN_FRAGMENT_LENGTH} to ${MAX_FRAGMENT_LENGTH}, got ${describe(frag)}`,
    );
  }
  const maxRecent = options.maxRecentMarkers ?? DEFAULT_MAX_RECENT_MARKERS;
  const maxPlantings = options.maxPlantings ?? DEFAULT_MAX_PLANTINGS;
  for (const [name, value] of [['maxRecentMarkers', maxRecent], ['maxPlantings', maxPlantings]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > 10_000_000) {
      throw new MarkerError('KVC_MARKER_OPTION', `Expected \`${name}\` to be an integer from 1 to 10000000, got ${describe(value)}`);
    }
  }
  return new Registry(frag, options.now ?? (() => new Date()), options.random ?? createRandomPool(), {
    codec: createMarkerCodec(options.key ?? randomBytes(16)),
    lookup: options.lookupPlanting,
    maxRecent,
    maxPlantings,
  });
}

interface RegistrySetup {
  codec: MarkerCodec;
  lookup: ((requestNo: string) => PlantingRow | undefined) | undefined;
  maxRecent: number;
  maxPlantings: number;
}

interface Planting {
  row: PlantingRow;
  plantedMs: number;
  /** The owner slot this request's markers share, while it lives (checked by identity before reuse). */
  owner?: { slot: number; value: Owner };
}

/** A marker's entry without the marker and its index: shared by every marker of one planting request. */
type Owner = Readonly<MarkerOwner & { requestNo?: string }>;

class Registry implements MarkerRegistry, WindowIndex {
  readonly fragmentLength: number;
  readonly hiMask: number;
  shift = 32 - MIN_SLOTS_LOG2;
  mask = (1 << MIN_SLOTS_LOG2) - 1;
  los = new Int32Array(1 << MIN_SLOTS_LOG2);
  refs = new Int32Array(1 << MIN_SLOTS_LOG2);
  bodies = new Uint8Array(64 * MARKER_BODY_LENGTH);
  filter = new Int32Array((1 << MIN_FILTER_LOG2) >>> 5);
  filterShift = 32 - MIN_FILTER_LOG2;
  /**
   * Per marker index, in typed arrays grown with `bodies` (no object, string or Map entry per marker: at the
   * default bound those were about 16 MiB of a replica's heap): its owner's slot in `owners` (-1 = free),
   * its index within its planting request (-1 = none given), when it was planted, and its insertion sequence
   * (the eviction queue's entries are (index, seq)).
   */
  private ownerOf = new Int32Array(64).fill(-1);
  private markerNo = new Int32Array(64);
  private plantedMs = new Float64Array(64);
  private seqs = new Float64Array(64);
  /** Marker indices handed out so far (free ones included). */
  private used = 0;
  private live = 0;
  /** Owners shared by the markers of one planting request, with how many live markers point at each. */
  private readonly owners: (Owner | undefined)[] = [];
  private readonly ownerRefs: number[] = [];
  private readonly freeOwners: number[] = [];
  private queue: number[] = [];
  private queueHead = 0;
  private nextSeq = 0;
  private readonly freeIndices: number[] = [];
  /** Plantings by request number, oldest first (Map order), at most maxPlantings. */
  private readonly byNo = new Map<string, Planting>();
  /** runId NUL requestId -> the request's current planting number. */
  private readonly byRequest = new Map<string, string>();
  private readonly windowsPerMarker: number;
  private windows = 0;
  private readonly codec: MarkerCodec;

  constructor(
    frag: number,
    private readonly now: () => Date,
    private readonly random: RandomFill,
    private readonly setup: RegistrySetup,
  ) {
    this.fragmentLength = frag;
    this.hiMask = 2 ** (5 * (frag - LO_CHARS)) - 1;
    this.windowsPerMarker = MARKER_BODY_LENGTH - frag + 1;
    // The codec keeps the key inside OpenSSL and its closure: nothing enumerable here holds key bytes.
    this.codec = setup.codec;
  }

  get size(): number {
    return this.live;
  }

  get windowCount(): number {
    return this.windows;
  }

  index(): WindowIndex {
    return this;
  }

  plant(owner: PlantRequest): MarkerEntry {
    const fields = checkOwnerFields(owner, 'owner');
    const requestKey = `${fields.runId}\u0000${fields.requestId}`;
    const currentNo = this.byRequest.get(requestKey);
    let planting = currentNo === undefined ? undefined : this.byNo.get(currentNo);
    if (planting === undefined || planting.row.role !== fields.role || planting.row.tenant !== fields.tenant || planting.row.markerCount >= MAX_MARKERS_PER_REQUEST) {
      const plantedMs = toMillis(owner.plantedAt ?? this.now(), 'plantedAt');
      let requestNo = newRequestNumber(this.random);
      // 64 random bits make a repeat practically impossible; a broken random source must not alias two requests.
      while (this.byNo.has(requestNo)) requestNo = newRequestNumber(this.random);
      planting = { row: { requestNo, ...fields, plantedAt: new Date(plantedMs).toISOString(), markerCount: 0 }, plantedMs };
      this.remember(planting);
      this.byRequest.set(requestKey, requestNo);
    }
    const index = planting.row.markerCount++;
    const marker = this.codec.encode(planting.row.requestNo, index);
    if (planting.owner === undefined || this.owners[planting.owner.slot] !== planting.owner.value) {
      const value: Owner = Object.freeze({ ...fields, plantedAt: planting.row.plantedAt, requestNo: planting.row.requestNo });
      planting.owner = { slot: this.newOwner(value), value };
    }
    this.ensureCapacity(1);
    const at = this.insert(marker.slice(MARKER_PREFIX.length), planting.owner.slot, index, planting.plantedMs);
    this.evictOverflow();
    return this.entryAt(at)!;
  }

  addPlantings(rows: Iterable<PlantingRow>): number {
    const checked: Planting[] = [];
    let i = 0;
    for (const row of rows) checked.push(checkPlantingRow(row, `plantings[${i++}]`));
    checked.sort((a, b) => a.plantedMs - b.plantedMs);
    for (const p of checked) this.remember(p);
    // Re-derive the markers of the newest plantings that fit the bound, oldest of them first.
    let from = checked.length;
    let markers = 0;
    while (from > 0 && markers + checked[from - 1]!.row.markerCount <= this.setup.maxRecent) markers += checked[--from]!.row.markerCount;
    this.ensureCapacity(markers);
    for (const p of checked.slice(from)) {
      const { requestNo, markerCount, ...owner } = p.row;
      let slot: number | undefined;
      for (let index = 0; index < markerCount; index++) {
        const body = this.codec.encode(requestNo, index).slice(MARKER_PREFIX.length);
        if (this.indexOfBody(body) >= 0) continue;
        slot ??= this.newOwner(Object.freeze({ ...owner, requestNo }));
        this.insert(body, slot, index, p.plantedMs);
      }
    }
    this.evictOverflow();
    return checked.length;
  }

  plantings(): PlantingRow[] {
    return [...this.byNo.values()].map((p) => ({ ...p.row }));
  }

  decodeValues(values: Uint8Array, count: number): (MarkerEntry | undefined)[] {
    const decoded = this.codec.decodeValues(values, count);
    return decoded.map((d, c) => {
      if (d === undefined) return undefined;
      let body = '';
      for (let k = 0; k < MARKER_BODY_LENGTH; k++) body += BASE32_ALPHABET[values[c * MARKER_BODY_LENGTH + k]!];
      return this.entryOf(body, d.requestNo, d.index);
    });
  }

  add(rows: Iterable<MarkerEntry>): number {
    const fresh = new Map<string, { entry: MarkerEntry; ms: number }>();
    let i = 0;
    for (const row of rows) {
      const path = `entries[${i++}]`;
      if (row === null || typeof row !== 'object') {
        throw new MarkerError('KVC_MARKER_INVALID', `${path}: expected a marker row object, got ${describe(row)}`);
      }
      if (typeof row.marker !== 'string' || !isMarker(row.marker)) {
        throw new MarkerError(
          'KVC_MARKER_INVALID',
          `${path}.marker: expected \`${MARKER_PREFIX}\` followed by ${MARKER_BODY_LENGTH} base32 characters, got ${describe(row.marker)}`,
        );
      }
      const fields = checkOwnerFields(row, path);
      const ms = toMillis(row.plantedAt, `${path}.plantedAt`);
      const marker = row.marker.toLowerCase();
      const extra = row.requestNo !== undefined && row.index !== undefined ? { requestNo: row.requestNo, index: row.index } : {};
      const entry: MarkerEntry = Object.freeze({ marker, ...fields, plantedAt: new Date(ms).toISOString(), ...extra });
      const body = marker.slice(MARKER_PREFIX.length);
      const existingIndex = this.indexOfBody(body);
      const existing = existingIndex < 0 ? fresh.get(body)?.entry : this.entryAt(existingIndex);
      if (existing !== undefined) {
        if (!sameOwner(existing, entry)) {
          throw new MarkerError(
            'KVC_MARKER_CONFLICT',
            `${path}: marker ${marker} is already registered to run ${existing.runId} request ${existing.requestId}; ` +
              `a marker has exactly one owner, got run ${entry.runId} request ${entry.requestId}`,
          );
        }
        continue;
      }
      fresh.set(body, { entry, ms });
    }
    this.ensureCapacity(fresh.size);
    for (const [body, { entry, ms }] of fresh) {
      const { marker: _marker, index, ...owner } = entry;
      this.insert(body, this.newOwner(Object.freeze(owner)), index ?? -1, ms);
    }
    this.evictOverflow();
    return fresh.size;
  }

  get(marker: string): MarkerEntry | undefined {
    const body = markerBody(marker);
    if (body === undefined) return undefined;
    const index = this.indexOfBody(body);
    if (index >= 0) return this.entryAt(index);
    const d = this.codec.decode(body);
    return d === undefined ? undefined : this.entryOf(body, d.requestNo, d.index);
  }

  isRecent(marker: string): boolean {
    const body = markerBody(marker);
    return body !== undefined && this.indexOfBody(body) >= 0;
  }

  lookup(window: string): WindowHit[] {
    const frag = this.fragmentLength;
    if (window.length !== frag) {
      throw new MarkerError('KVC_MARKER_INVALID', `lookup: expected a window of ${frag} base32 characters, got ${window.length} characters`);
    }
    let hi = 0;
    let lo = 0;
    for (let k = 0; k < frag; k++) {
      const v = base32Value(window.charCodeAt(k));
      if (v < 0) throw new MarkerError('KVC_MARKER_INVALID', `lookup: ${JSON.stringify(window[k])} at ${k} is not a base32 character`);
      hi = ((hi << 5) | (lo >>> 25)) & this.hiMask;
      lo = ((lo << 5) | v) & LO_MASK;
    }
    const hits: WindowHit[] = [];
    for (let s = Math.imul(lo, HASH_MULTIPLIER) >>> this.shift; ; s = (s + 1) & this.mask) {
      const ref = this.refs[s]!;
      if (ref === 0) break;
      if (this.los[s] === lo && windowHi(this, ref) === hi) {
        const entry = this.entryAt((ref - 1) >>> 5);
        if (entry !== undefined) hits.push({ entry, offset: (ref - 1) & 31 });
      }
    }
    return hits;
  }

  forget(olderThan: Date | string | number): number {
    const cutoff = toMillis(olderThan, 'olderThan');
    let dropped = 0;
    for (let index = 0; index < this.used; index++) {
      if (this.ownerOf[index]! < 0 || !(this.plantedMs[index]! < cutoff)) continue;
      this.removeIndex(index);
      dropped++;
    }
    for (const [no, p] of this.byNo) if (p.plantedMs < cutoff) this.forgetPlanting(no);
    // Bits cannot be cleared from a shared bitset: rebuild it (sized to what is left) from the live bodies.
    if (dropped > 0) this.rebuildFilter();
    return dropped;
  }

  rows(): MarkerEntry[] {
    const out: MarkerEntry[] = [];
    for (let index = 0; index < this.used; index++) {
      const entry = this.entryAt(index);
      if (entry !== undefined) out.push({ ...entry });
    }
    return out;
  }

  entryAt(markerIndex: number): MarkerEntry | undefined {
    const slot = markerIndex < this.used ? this.ownerOf[markerIndex]! : -1;
    if (slot < 0) return undefined;
    const { requestNo, ...owner } = this.owners[slot]!;
    let marker = MARKER_PREFIX;
    const base = markerIndex * MARKER_BODY_LENGTH;
    for (let k = 0; k < MARKER_BODY_LENGTH; k++) marker += BASE32_ALPHABET[this.bodies[base + k]!];
    const index = this.markerNo[markerIndex]!;
    return Object.freeze({ marker, ...owner, ...(requestNo !== undefined && index >= 0 ? { requestNo, index } : {}) });
  }

  /** The index of the live marker with this body (lowercase, no prefix), or -1: its offset-0 window in the table, then every character. */
  private indexOfBody(body: string): number {
    const frag = this.fragmentLength;
    let hi = 0;
    let lo = 0;
    for (let k = 0; k < frag; k++) {
      hi = ((hi << 5) | (lo >>> 25)) & this.hiMask;
      lo = ((lo << 5) | base32Value(body.charCodeAt(k))) & LO_MASK;
    }
    for (let s = Math.imul(lo, HASH_MULTIPLIER) >>> this.shift; ; s = (s + 1) & this.mask) {
      const ref = this.refs[s]!;
      if (ref === 0) return -1;
      if (((ref - 1) & 31) !== 0 || this.los[s] !== lo || windowHi(this, ref) !== hi) continue;
      const index = (ref - 1) >>> 5;
      const base = index * MARKER_BODY_LENGTH;
      let k = frag;
      while (k < MARKER_BODY_LENGTH && this.bodies[base + k] === base32Value(body.charCodeAt(k))) k++;
      if (k === MARKER_BODY_LENGTH) return index;
    }
  }

  private newOwner(owner: Owner): number {
    const slot = this.freeOwners.pop() ?? this.owners.length;
    this.owners[slot] = owner;
    this.ownerRefs[slot] = 0;
    return slot;
  }

  /** The entry of a decrypted marker: from the fragment index, else its planting's owner (memory, store, unknown). */
  private entryOf(body: string, requestNo: string, index: number): MarkerEntry {
    const recent = this.indexOfBody(body);
    if (recent >= 0) return this.entryAt(recent)!;
    let row = this.byNo.get(requestNo)?.row;
    if (row === undefined && this.setup.lookup !== undefined) {
      try {
        const found = this.setup.lookup(requestNo);
        if (found !== undefined) {
          const p = checkPlantingRow(found, 'lookupPlanting()');
          this.remember(p);
          row = p.row;
        }
      } catch {
        // A store that cannot answer (closed at shutdown) leaves the owner unknown; the marker is still ours.
      }
    }
    const { requestNo: _no, markerCount: _count, ...owner } = row ?? {
      requestNo, markerCount: 0, runId: UNKNOWN_OWNER, requestId: UNKNOWN_OWNER, role: UNKNOWN_OWNER, tenant: UNKNOWN_OWNER, plantedAt: new Date(0).toISOString(),
    };
    return Object.freeze({ marker: MARKER_PREFIX + body, ...owner, requestNo, index });
  }

  private remember(p: Planting): void {
    const existing = this.byNo.get(p.row.requestNo);
    if (existing !== undefined) {
      existing.row.markerCount = Math.max(existing.row.markerCount, p.row.markerCount);
      if (existing.row.target === undefined && p.row.target !== undefined) existing.row.target = p.row.target;
      return;
    }
    this.byNo.set(p.row.requestNo, p);
    while (this.byNo.size > this.setup.maxPlantings) this.forgetPlanting(this.byNo.keys().next().value!);
  }

  private forgetPlanting(requestNo: string): void {
    const p = this.byNo.get(requestNo);
    if (p === undefined) return;
    this.byNo.delete(requestNo);
    const key = `${p.row.runId}\u0000${p.row.requestId}`;
    if (this.byRequest.get(key) === requestNo) this.byRequest.delete(key);
  }

  /** Past maxRecent live markers, evict the oldest down to 7/8 of it (one filter rebuild per batch). */
  private evictOverflow(): void {
    const max = this.setup.maxRecent;
    if (this.live <= max) return;
    const keep = Math.max(1, max - (max >> 3));
    while (this.live > keep && this.queueHead < this.queue.length) {
      const index = this.queue[this.queueHead++]!;
      const seq = this.queue[this.queueHead++]!;
      if (this.ownerOf[index]! >= 0 && this.seqs[index] === seq) this.removeIndex(index);
    }
    if (this.queueHead > 4096 && this.queueHead * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.queueHead);
      this.queueHead = 0;
    }
    this.rebuildFilter();
  }

  private removeIndex(index: number): void {
    const slot = this.ownerOf[index]!;
    for (let offset = 0; offset < this.windowsPerMarker; offset++) this.removeWindow(index, offset);
    this.ownerOf[index] = -1;
    this.live--;
    if (--this.ownerRefs[slot]! === 0) {
      this.owners[slot] = undefined;
      this.freeOwners.push(slot);
    }
    this.freeIndices.push(index);
  }

  /** Registers a body under an owner slot; returns its marker index. */
  private insert(body: string, ownerSlot: number, markerNo: number, plantedMs: number): number {
    let index = this.freeIndices.pop();
    if (index === undefined) {
      index = this.used++;
      if (index >= MAX_MARKERS) throw new MarkerError('KVC_MARKER_OPTION', `registry full: at most ${MAX_MARKERS} live markers`);
      if (index >= this.ownerOf.length) this.growIndices();
    }
    const base = index * MARKER_BODY_LENGTH;
    for (let k = 0; k < MARKER_BODY_LENGTH; k++) this.bodies[base + k] = base32Value(body.charCodeAt(k));
    this.ownerOf[index] = ownerSlot;
    this.ownerRefs[ownerSlot]!++;
    this.markerNo[index] = markerNo;
    this.plantedMs[index] = plantedMs;
    const seq = this.nextSeq++;
    this.seqs[index] = seq;
    this.queue.push(index, seq);
    this.live++;
    for (let offset = 0; offset < this.windowsPerMarker; offset++) this.insertWindow(index, offset);
    this.windows += this.windowsPerMarker;
    return index;
  }

  /** Doubles the per-index arrays and `bodies`. */
  private growIndices(): void {
    const n = this.ownerOf.length * 2;
    const grow = <T extends Int32Array | Float64Array | Uint8Array>(from: T, to: T): T => {
      to.set(from);
      return to;
    };
    this.ownerOf = grow(this.ownerOf, new Int32Array(n).fill(-1));
    this.markerNo = grow(this.markerNo, new Int32Array(n));
    this.plantedMs = grow(this.plantedMs, new Float64Array(n));
    this.seqs = grow(this.seqs, new Float64Array(n));
    this.bodies = grow(this.bodies, new Uint8Array(n * MARKER_BODY_LENGTH));
  }

  /** Keep the table at most half full, and the filter at FILTER_BITS_PER_WINDOW, after adding `markers` more. */
  private ensureCapacity(markers: number): void {
    const windows = this.windows + markers * this.windowsPerMarker;
    if (windows * FILTER_BITS_PER_WINDOW > 2 ** (32 - this.filterShift)) this.rebuildFilter(windows);
    const needed = windows * 2;
    let log2 = 32 - this.shift;
    if (needed <= 1 << log2) return;
    while (1 << log2 < needed) log2++;
    if (log2 > 30) throw new MarkerError('KVC_MARKER_OPTION', `registry full: window table would exceed 2^30 slots`);
    this.shift = 32 - log2;
    this.mask = (1 << log2) - 1;
    this.los = new Int32Array(1 << log2);
    this.refs = new Int32Array(1 << log2);
    for (let index = 0; index < this.used; index++) {
      if (this.ownerOf[index]! < 0) continue;
      for (let offset = 0; offset < this.windowsPerMarker; offset++) this.insertWindow(index, offset);
    }
  }

  /** Size the filter for `windows` (default: the live ones) and set the bit of every live window. */
  private rebuildFilter(windows = this.windows): void {
    let log2 = MIN_FILTER_LOG2;
    while (2 ** log2 < windows * FILTER_BITS_PER_WINDOW) log2++;
    this.filterShift = 32 - log2;
    this.filter = new Int32Array(2 ** (log2 - 5));
    for (let index = 0; index < this.used; index++) {
      if (this.ownerOf[index]! < 0) continue;
      for (let offset = 0; offset < this.windowsPerMarker; offset++) this.setFilterBit(index, offset);
    }
  }

  private setFilterBit(index: number, offset: number): void {
    const start = index * MARKER_BODY_LENGTH + offset;
    const lo = windowLo(this.bodies, start + this.fragmentLength - LO_CHARS);
    const hi = laneAt(this.bodies, start, this.fragmentLength - LO_CHARS);
    const h = Math.imul(lo ^ Math.imul(hi, FILTER_HI_MULTIPLIER), FILTER_MULTIPLIER) >>> this.filterShift;
    this.filter[h >>> 5]! |= 1 << (h & 31);
  }

  private insertWindow(index: number, offset: number): void {
    this.setFilterBit(index, offset);
    const lo = windowLo(this.bodies, index * MARKER_BODY_LENGTH + offset + this.fragmentLength - LO_CHARS);
    let s = Math.imul(lo, HASH_MULTIPLIER) >>> this.shift;
    while (this.refs[s] !== 0) s = (s + 1) & this.mask;
    this.los[s] = lo;
    this.refs[s] = index * 32 + offset + 1;
  }

  private removeWindow(index: number, offset: number): void {
    const ref = index * 32 + offset + 1;
    const lo = windowLo(this.bodies, index * MARKER_BODY_LENGTH + offset + this.fragmentLength - LO_CHARS);
    let i = Math.imul(lo, HASH_MULTIPLIER) >>> this.shift;
    while (this.refs[i] !== ref) {
      if (this.refs[i] === 0) return; // not present: nothing to remove
      i = (i + 1) & this.mask;
    }
    // Backward-shift deletion: pull later members of the probe cluster into the hole when their home slot
    // is not cyclically inside (hole, their slot], so every key stays reachable from its home.
    const mask = this.mask;
    let j = i;
    for (;;) {
      j = (j + 1) & mask;
      const r = this.refs[j]!;
      if (r === 0) break;
      const home = Math.imul(this.los[j]!, HASH_MULTIPLIER) >>> this.shift;
      const stays = i <= j ? i < home && home <= j : i < home || home <= j;
      if (stays) continue;
      this.los[i] = this.los[j]!;
      this.refs[i] = r;
      i = j;
    }
    this.refs[i] = 0;
    this.los[i] = 0;
    this.windows--;
  }
}

/** `chars` body values from `start` packed 5 bits each, first character highest. */
function laneAt(bodies: Uint8Array, start: number, chars: number): number {
  let lane = 0;
  for (let k = 0; k < chars; k++) lane = (lane << 5) | bodies[start + k]!;
  return lane;
}

/** The `lo` lane (last 6 characters of a window) starting at `start` in a body array. */
function windowLo(bodies: Uint8Array, start: number): number {
  return laneAt(bodies, start, LO_CHARS);
}

/** The `hi` lane of the window a table ref points at, read from the body bytes. */
export function windowHi(index: WindowIndex, ref: number): number {
  const start = ((ref - 1) >>> 5) * MARKER_BODY_LENGTH + ((ref - 1) & 31);
  return laneAt(index.bodies, start, index.fragmentLength - LO_CHARS);
}

function checkOwnerFields(owner: object, path: string): Omit<MarkerOwner, 'plantedAt'> {
  const record = owner as Record<string, unknown>;
  const out: Record<string, string> = {};
  for (const field of OWNER_FIELDS) {
    const value = record[field];
    if (typeof value !== 'string' || value.length === 0 || value.length > MAX_FIELD_LENGTH) {
      throw new MarkerError(
        'KVC_MARKER_INVALID',
        `${path}.${field}: expected a non-empty string of at most ${MAX_FIELD_LENGTH} characters, got ${describe(value)}`,
      );
    }
    out[field] = value;
  }
  return out as unknown as Omit<MarkerOwner, 'plantedAt'>;
}

const REQUEST_NO_RE = /^[0-9a-f]{16}$/;

function checkPlantingRow(row: PlantingRow, path: string): Planting {
  if (row === null || typeof row !== 'object') throw new MarkerError('KVC_MARKER_INVALID', `${path}: expected a planting row object, got ${describe(row)}`);
  if (typeof row.requestNo !== 'string' || !REQUEST_NO_RE.test(row.requestNo)) {
    throw new MarkerError('KVC_MARKER_INVALID', `${path}.requestNo: expected 16 lowercase hex digits, got ${describe(row.requestNo)}`);
  }
  if (!Number.isInteger(row.markerCount) || row.markerCount < 0 || row.markerCount > MAX_MARKERS_PER_REQUEST) {
    throw new MarkerError('KVC_MARKER_INVALID', `${path}.markerCount: expected an integer from 0 to ${MAX_MARKERS_PER_REQUEST}, got ${describe(row.markerCount)}`);
  }
  const fields = checkOwnerFields(row, path);
  const plantedMs = toMillis(row.plantedAt, `${path}.plantedAt`);
  const target = typeof row.target === 'string' && row.target.length > 0 ? { target: row.target.slice(0, MAX_FIELD_LENGTH) } : {};
  return { row: { requestNo: row.requestNo, ...fields, plantedAt: new Date(plantedMs).toISOString(), markerCount: row.markerCount, ...target }, plantedMs };
}

function toMillis(value: unknown, path: string): number {
  const ms =
    value instanceof Date ? value.getTime()
    : typeof value === 'number' ? value
    : typeof value === 'string' ? Date.parse(value)
    : Number.NaN;
  if (!Number.isFinite(ms)) {
    throw new MarkerError('KVC_MARKER_INVALID', `${path}: expected an ISO 8601 timestamp, Date or epoch milliseconds, got ${describe(value)}`);
  }
  return ms;
}

function sameOwner(a: MarkerEntry, b: MarkerEntry): boolean {
  return a.runId === b.runId && a.requestId === b.requestId && a.role === b.role && a.tenant === b.tenant && a.plantedAt === b.plantedAt;
}

function describe(value: unknown): string {
  if (typeof value === 'string') return `${JSON.stringify(value.length > 60 ? value.slice(0, 60) + '…' : value)} (string)`;
  if (value === null) return 'null';
  if (value instanceof Date) return `Invalid Date`;
  return `${typeof value === 'object' ? 'an object' : String(value)} (${typeof value})`;
}
