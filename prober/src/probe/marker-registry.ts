/**
 * The marker registry: the installation's marker cipher, the planting requests (one per request that
 * carried markers: run, request, role, tenant, time, marker count), and a bounded index of every recent
 * marker body, through which the scanner attributes any FRAG-character window of text in constant time
 * (one prefilter bit, rarely one table probe) whatever the number of live markers.
 *
 * Design:
 * - Markers attribute themselves. `plant()` gives a request its next marker: the encryption under the
 *   installation key of (the request's 64-bit request number, marker index, check field), see markers.ts.
 *   The caller persists the planting (the store's `recordPlantings(plantingRows(entries))`, one row per
 *   request) before the request leaves. Any registry holding the same key decrypts a whole marker it sees
 *   (`decodeValues`) and finds the planting in memory or through `lookupPlanting` (the store), whichever
 *   run or process planted it; a body that fails the check is not this installation's.
 * - Fragments cannot be decrypted, so the fragment index below holds the recent markers only: this process's
 *   and those of plantings reloaded with `addPlantings` (re-derived from their request numbers, nothing
 *   per marker is stored). It is bounded: past `maxRecentMarkers` the oldest are evicted (whole copies of
 *   them are still recognised by decryption). In-memory plantings are bounded by `maxPlantings` the same way.
 *   `add(rows)` registers given markers (any string of the envelope) with their owners; `forget(olderThan)`
 *   retires markers by age.
 * - Sparse keys, not every window. Only a few 9-character keys of each body are indexed (`sparseKeys`: at
 *   the default FRAG of 12, the 4 at body offsets 3, 7, 11 and 15; in general K = min(9, FRAG) characters
 *   one every FRAG - K + 1 offsets from FRAG - K), placed so that every FRAG-character window of the body
 *   holds exactly one of them whole (test/prober/marker-keys.test.ts checks every FRAG). The scanner rolls the 9-character key across the text; on a key hit it compares the text
 *   around it with the body bytes, both ways, and keeps the agreement if it spans FRAG or more: the same
 *   matches, fragments and offsets as an index of every window, at 4 keys a marker instead of 15 windows.
 *   `windowCount` still counts FRAG windows (size x (27 - FRAG)): it is the W of the scanner's chance bound,
 *   which is about windows of text agreeing with a body, not about how they are found; `keyCount` counts keys.
 * - Key table. A key of 9 base32 characters is 45 bits, held as two int32 lanes: `lo` = its last 6
 *   characters (30 bits), `hi` = the 3 before. The scanner rolls both lanes across the text one character at a
 *   time, so a probe costs a multiply, a shift and a typed-array read, with no string built per position.
 *   The table is open addressing with linear probing over one Int32Array of refs (marker index, key offset),
 *   at most half full; the home slot is a Fibonacci hash of `lo`. No key is stored: a slot's key is read from
 *   the body bytes when compared (2 MB of table at 50,000 markers instead of 16 MB of refs and lanes; the
 *   scanner measured no slower, see `npm run bench:scanner`). Bodies are uniformly random, so registered keys spread
 *   evenly whatever text is probed. Deletion is backward-shift (no tombstones; a member's home is recomputed
 *   from its body), so a table that has forgotten millions of markers probes as fast as a fresh one.
 * - A prefilter bitset (8 to 16 bits per key, 256 KB at 50,000 markers) answers most probes from a
 *   cache-sized array; only the 1 in 8 to 16 positions that pass touch the table. Bits cannot be cleared,
 *   so `forget` and eviction rebuild it from the live bodies.
 * - Memory is bounded per live marker, and held in typed arrays sized to at most `maxRecentMarkers` (room is
 *   made before inserting: the outcome of inserting and then evicting the oldest, without ever holding more):
 *   26 body bytes; 4 keys x 2-4 slots x 4 bytes of table; 4-8 bytes of prefilter; 16 bytes of owner slot,
 *   index within the planting request, and the intrusive eviction list (previous, next: oldest first; free
 *   indices are chained through `next`). Owners (run, request, role, tenant, time) are one shared object per
 *   planting request, with its planting time beside it (`forget` reads the owner's), and a MarkerEntry is
 *   built when asked for (`entryAt`, `get`, a scanner hit) from the owner and the body: no object, string or
 *   Map entry per marker. Measured at 50,000 markers planted 20 a request (`npm run bench:marker-memory`):
 *   about 130 bytes a marker, 6.5 MB at the default bound (it was 771 with an object per marker, then 483
 *   with a key lane and a slot for every window: 24 MB). A live body is found through the key table (its
 *   first key, then every character), not a Map.
 * - A key may belong to several markers, at the same or different body offsets (chance collisions are
 *   allowed, never assumed away): every slot holding it is a candidate, each checked against its own body.
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
} from './markers.js';

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
   * recognised by decryption). About 130 bytes each (6.5 MB at the default). @default 50000 (DEFAULT_MAX_RECENT_MARKERS)
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
  /** Characters of a sparse key (min(9, fragmentLength)); keys sit at the body offsets `sparseKeys` gives. */
  readonly keyLength: number;
  /** Mask of a key's `hi` lane (5 bits per character before its last 6). */
  readonly hiMask: number;
  /** 32 - log2(slots): the Fibonacci hash of a key's `lo` is `Math.imul(lo, HASH_MULTIPLIER) >>> shift`. */
  readonly shift: number;
  /** slots - 1 */
  readonly mask: number;
  /**
   * Prefilter: a bitset over `filterHash(hi, lo) >>> filterShift` of every key, 8 to 16 bits per key (1 in
   * 8 to 1 in 16 false positives). Most probed positions are rejected by one load from a cache-sized array;
   * the scanner issues these loads in branch-free batches, so they overlap instead of each paying a table miss.
   */
  readonly filter: Int32Array;
  readonly filterShift: number;
  /**
   * The key table, refs only: 0 = empty, else markerIndex * 32 + keyOffset + 1 (the key's body offset).
   * A slot's key is read from `bodies`; its home slot is the hash of the key's `lo` lane.
   */
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
  /** Keys in the table (size x keys per marker: 4 at the default FRAG of 12). */
  readonly keyCount: number;
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
/** Prefilter bits per registered key (1 in FILTER_BITS_PER_KEY false passes). */
const FILTER_BITS_PER_KEY = 8;
const MIN_FILTER_LOG2 = 12;
const LO_CHARS = 6;
const LO_MASK = 0x3fffffff;
/** Longest key: 9 characters (45 bits, a 15-bit `hi` lane and a 30-bit `lo` lane). */
export const MAX_KEY_LENGTH = 9;
const MIN_SLOTS_LOG2 = 10;
/** refs pack markerIndex * 32 + offset + 1 into an int32. */
const MAX_MARKERS = 1 << 26;
const MAX_FIELD_LENGTH = 256;

const OWNER_FIELDS = ['runId', 'requestId', 'role', 'tenant'] as const;

/**
 * The sparse keys for fragments of `fragmentLength` characters: `length` = min(9, FRAG) characters at body
 * offsets `offsets` (first FRAG - length, then every FRAG - length + 1, up to the first at or past 26 - FRAG).
 * Every FRAG-character window of a body contains exactly one of them whole: a window at s holds the key
 * starts s .. s + FRAG - length, FRAG - length + 1 consecutive offsets, which is the step; the first key is
 * inside the window at 0, and the last starts at most 26 - length, so it ends inside the body and inside
 * the window at 26 - FRAG.
 */
export function sparseKeys(fragmentLength: number): { length: number; step: number; offsets: number[] } {
  const length = Math.min(MAX_KEY_LENGTH, fragmentLength);
  const step = fragmentLength - length + 1;
  const offsets: number[] = [];
  for (let t = fragmentLength - length; ; t += step) {
    offsets.push(t);
    if (t >= MARKER_BODY_LENGTH - fragmentLength) break;
  }
  return { length, step, offsets };
}

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

/** A body about to be registered: its owner slot is made (once per owner) only if it is inserted. */
interface Fresh {
  body: string;
  markerNo: number;
  owner: () => number;
}

class Registry implements MarkerRegistry, WindowIndex {
  readonly fragmentLength: number;
  readonly keyLength: number;
  readonly hiMask: number;
  shift = 32 - MIN_SLOTS_LOG2;
  mask = (1 << MIN_SLOTS_LOG2) - 1;
  refs = new Int32Array(1 << MIN_SLOTS_LOG2);
  bodies: Uint8Array;
  filter = new Int32Array((1 << MIN_FILTER_LOG2) >>> 5);
  filterShift = 32 - MIN_FILTER_LOG2;
  /**
   * Per marker index, in typed arrays grown with `bodies` up to maxRecent entries (live markers never exceed
   * it: room is made before inserting), with no object, string or Map entry per marker: its owner's slot in
   * `owners` (-1 = free), its index within its planting request (-1 = none given), and its neighbours in the
   * eviction list (`prev`, `next`: live markers, oldest first; -1 = none). Free indices are chained
   * through `next` too. The planting time is the owner's (`ownerMs`), not the marker's.
   */
  private ownerOf: Int32Array;
  private markerNo: Int32Array;
  private prev: Int32Array;
  private next: Int32Array;
  private head = -1;
  private tailIndex = -1;
  private freeHead = -1;
  /** Marker indices handed out so far (free ones included). */
  private used = 0;
  private live = 0;
  /** Owners shared by the markers of one planting request, with how many live markers point at each and their planting time. */
  private readonly owners: (Owner | undefined)[] = [];
  private readonly ownerRefs: number[] = [];
  private readonly ownerMs: number[] = [];
  private readonly freeOwners: number[] = [];
  /** Plantings by request number, oldest first (Map order), at most maxPlantings. */
  private readonly byNo = new Map<string, Planting>();
  /** runId NUL requestId -> the request's current planting number. */
  private readonly byRequest = new Map<string, string>();
  private readonly windowsPerMarker: number;
  /** Body offsets of the sparse keys (see `sparseKeys`). */
  private readonly keyOffsets: Int32Array;
  private readonly keyStep: number;
  private readonly codec: MarkerCodec;

  constructor(
    frag: number,
    private readonly now: () => Date,
    private readonly random: RandomFill,
    private readonly setup: RegistrySetup,
  ) {
    this.fragmentLength = frag;
    const keys = sparseKeys(frag);
    this.keyLength = keys.length;
    this.keyStep = keys.step;
    this.keyOffsets = Int32Array.from(keys.offsets);
    this.hiMask = 2 ** (5 * (keys.length - LO_CHARS)) - 1;
    this.windowsPerMarker = MARKER_BODY_LENGTH - frag + 1;
    const capacity = Math.min(64, setup.maxRecent);
    this.bodies = new Uint8Array(capacity * MARKER_BODY_LENGTH);
    this.ownerOf = new Int32Array(capacity).fill(-1);
    this.markerNo = new Int32Array(capacity);
    this.prev = new Int32Array(capacity);
    this.next = new Int32Array(capacity);
    // The codec keeps the key inside OpenSSL and its closure: nothing enumerable here holds key bytes.
    this.codec = setup.codec;
  }

  get size(): number {
    return this.live;
  }

  get windowCount(): number {
    return this.live * this.windowsPerMarker;
  }

  get keyCount(): number {
    return this.live * this.keyOffsets.length;
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
    const p = planting;
    let at = -1;
    this.admit([
      {
        body: marker.slice(MARKER_PREFIX.length),
        markerNo: index,
        owner: () => {
          if (p.owner === undefined || this.owners[p.owner.slot] !== p.owner.value) {
            const value: Owner = Object.freeze({ ...fields, plantedAt: p.row.plantedAt, requestNo: p.row.requestNo });
            p.owner = { slot: this.newOwner(value, p.plantedMs), value };
          }
          return p.owner.slot;
        },
      },
    ], (i) => (at = i));
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
    const fresh: Fresh[] = [];
    const seen = new Set<string>();
    for (const p of checked.slice(from)) {
      const { requestNo, markerCount, ...owner } = p.row;
      let slot: number | undefined;
      const ownerSlot = (): number => (slot ??= this.newOwner(Object.freeze({ ...owner, requestNo }), p.plantedMs));
      for (let index = 0; index < markerCount; index++) {
        const body = this.codec.encode(requestNo, index).slice(MARKER_PREFIX.length);
        if (seen.has(body) || this.indexOfBody(body) >= 0) continue;
        seen.add(body);
        fresh.push({ body, markerNo: index, owner: ownerSlot });
      }
    }
    this.admit(fresh);
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
    const batch: Fresh[] = [];
    for (const [body, { entry, ms }] of fresh) {
      const { marker: _marker, index, ...owner } = entry;
      batch.push({ body, markerNo: index ?? -1, owner: () => this.newOwner(Object.freeze(owner), ms) });
    }
    this.admit(batch);
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
    const values = new Uint8Array(frag);
    for (let k = 0; k < frag; k++) {
      const v = base32Value(window.charCodeAt(k));
      if (v < 0) throw new MarkerError('KVC_MARKER_INVALID', `lookup: ${JSON.stringify(window[k])} at ${k} is not a base32 character`);
      values[k] = v;
    }
    // The window holds one key whole, at one of its first `keyStep` positions: try each.
    const hits: WindowHit[] = [];
    const seen = new Set<number>();
    for (let j = 0; j < this.keyStep; j++) {
      const lo = laneAt(values, j + this.keyLength - LO_CHARS, LO_CHARS);
      for (let s = Math.imul(lo, HASH_MULTIPLIER) >>> this.shift; ; s = (s + 1) & this.mask) {
        const ref = this.refs[s]!;
        if (ref === 0) break;
        const index = (ref - 1) >>> 5;
        const offset = ((ref - 1) & 31) - j;
        if (offset < 0 || offset > MARKER_BODY_LENGTH - frag || seen.has(index * 32 + offset)) continue;
        const base = index * MARKER_BODY_LENGTH + offset;
        let k = 0;
        while (k < frag && this.bodies[base + k] === values[k]) k++;
        if (k < frag) continue;
        seen.add(index * 32 + offset);
        const entry = this.entryAt(index);
        if (entry !== undefined) hits.push({ entry, offset });
      }
    }
    return hits;
  }

  forget(olderThan: Date | string | number): number {
    const cutoff = toMillis(olderThan, 'olderThan');
    let dropped = 0;
    for (let index = 0; index < this.used; index++) {
      const slot = this.ownerOf[index]!;
      if (slot < 0 || !(this.ownerMs[slot]! < cutoff)) continue;
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

  /** The index of the live marker with this body (lowercase, no prefix), or -1: its first key in the table, then every character. */
  private indexOfBody(body: string): number {
    const first = this.keyOffsets[0]!;
    let lo = 0;
    for (let k = first + this.keyLength - LO_CHARS; k < first + this.keyLength; k++) lo = (lo << 5) | base32Value(body.charCodeAt(k));
    for (let s = Math.imul(lo, HASH_MULTIPLIER) >>> this.shift; ; s = (s + 1) & this.mask) {
      const ref = this.refs[s]!;
      if (ref === 0) return -1;
      if (((ref - 1) & 31) !== first) continue;
      const index = (ref - 1) >>> 5;
      const base = index * MARKER_BODY_LENGTH;
      let k = 0;
      while (k < MARKER_BODY_LENGTH && this.bodies[base + k] === base32Value(body.charCodeAt(k))) k++;
      if (k === MARKER_BODY_LENGTH) return index;
    }
  }

  private newOwner(owner: Owner, plantedMs: number): number {
    const slot = this.freeOwners.pop() ?? this.owners.length;
    this.owners[slot] = owner;
    this.ownerRefs[slot] = 0;
    this.ownerMs[slot] = plantedMs;
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

  /**
   * Registers new bodies (none of them live), newest last, keeping the bound: when they would take the live
   * count past maxRecent, the oldest live markers are evicted first, and the oldest of `fresh` are not
   * inserted at all, so that exactly the newest 7/8 of maxRecent remain (one filter rebuild per batch). The
   * outcome is that of inserting everything and then evicting the oldest, without ever holding more than
   * maxRecent markers. `inserted` is told each new marker index.
   */
  private admit(fresh: Fresh[], inserted?: (index: number) => void): void {
    const max = this.setup.maxRecent;
    let skip = 0;
    let evicted = false;
    if (this.live + fresh.length > max) {
      const keep = Math.max(1, max - (max >> 3));
      let evict = this.live + fresh.length - keep;
      while (evict > 0 && this.head >= 0) {
        this.removeIndex(this.head);
        evict--;
      }
      skip = evict;
      evicted = true;
    }
    this.ensureCapacity(fresh.length - skip);
    for (let i = skip; i < fresh.length; i++) {
      const f = fresh[i]!;
      const index = this.insert(f.body, f.owner(), f.markerNo);
      inserted?.(index);
    }
    if (evicted) this.rebuildFilter();
  }

  private removeIndex(index: number): void {
    const slot = this.ownerOf[index]!;
    for (let j = 0; j < this.keyOffsets.length; j++) this.removeKey(index, this.keyOffsets[j]!);
    this.ownerOf[index] = -1;
    this.live--;
    if (--this.ownerRefs[slot]! === 0) {
      this.owners[slot] = undefined;
      this.freeOwners.push(slot);
    }
    // Unlink from the eviction list, then push on the free chain.
    const before = this.prev[index]!;
    const after = this.next[index]!;
    if (before >= 0) this.next[before] = after;
    else this.head = after;
    if (after >= 0) this.prev[after] = before;
    else this.tailIndex = before;
    this.next[index] = this.freeHead;
    this.freeHead = index;
  }

  /** Registers a body under an owner slot, newest in the eviction list; returns its marker index. */
  private insert(body: string, ownerSlot: number, markerNo: number): number {
    let index = this.freeHead;
    if (index >= 0) this.freeHead = this.next[index]!;
    else {
      index = this.used++;
      if (index >= MAX_MARKERS) throw new MarkerError('KVC_MARKER_OPTION', `registry full: at most ${MAX_MARKERS} live markers`);
      if (index >= this.ownerOf.length) this.growIndices();
    }
    const base = index * MARKER_BODY_LENGTH;
    for (let k = 0; k < MARKER_BODY_LENGTH; k++) this.bodies[base + k] = base32Value(body.charCodeAt(k));
    this.ownerOf[index] = ownerSlot;
    this.ownerRefs[ownerSlot]!++;
    this.markerNo[index] = markerNo;
    this.prev[index] = this.tailIndex;
    this.next[index] = -1;
    if (this.tailIndex >= 0) this.next[this.tailIndex] = index;
    else this.head = index;
    this.tailIndex = index;
    this.live++;
    for (let j = 0; j < this.keyOffsets.length; j++) this.insertKey(index, this.keyOffsets[j]!);
    return index;
  }

  /** Doubles the per-index arrays and `bodies`, up to maxRecent entries (the most that can be live). */
  private growIndices(): void {
    const n = Math.min(this.ownerOf.length * 2, this.setup.maxRecent);
    const grow = <T extends Int32Array | Uint8Array>(from: T, to: T): T => {
      to.set(from);
      return to;
    };
    this.ownerOf = grow(this.ownerOf, new Int32Array(n).fill(-1));
    this.markerNo = grow(this.markerNo, new Int32Array(n));
    this.prev = grow(this.prev, new Int32Array(n));
    this.next = grow(this.next, new Int32Array(n));
    this.bodies = grow(this.bodies, new Uint8Array(n * MARKER_BODY_LENGTH));
  }

  /** Keep the table at most half full, and the filter at FILTER_BITS_PER_KEY, after adding `markers` more. */
  private ensureCapacity(markers: number): void {
    const keys = this.keyCount + markers * this.keyOffsets.length;
    if (keys * FILTER_BITS_PER_KEY > 2 ** (32 - this.filterShift)) this.rebuildFilter(keys);
    const needed = keys * 2;
    let log2 = 32 - this.shift;
    if (needed <= 1 << log2) return;
    while (1 << log2 < needed) log2++;
    if (log2 > 30) throw new MarkerError('KVC_MARKER_OPTION', `registry full: key table would exceed 2^30 slots`);
    this.shift = 32 - log2;
    this.mask = (1 << log2) - 1;
    this.refs = new Int32Array(1 << log2);
    for (let index = 0; index < this.used; index++) {
      if (this.ownerOf[index]! < 0) continue;
      for (let j = 0; j < this.keyOffsets.length; j++) this.placeRef(index, this.keyOffsets[j]!);
    }
  }

  /** Size the filter for `keys` (default: the live ones) and set the bit of every live key. */
  private rebuildFilter(keys = this.keyCount): void {
    let log2 = MIN_FILTER_LOG2;
    while (2 ** log2 < keys * FILTER_BITS_PER_KEY) log2++;
    this.filterShift = 32 - log2;
    this.filter = new Int32Array(2 ** (log2 - 5));
    for (let index = 0; index < this.used; index++) {
      if (this.ownerOf[index]! < 0) continue;
      for (let j = 0; j < this.keyOffsets.length; j++) this.setFilterBit(index, this.keyOffsets[j]!);
    }
  }

  private setFilterBit(index: number, offset: number): void {
    const start = index * MARKER_BODY_LENGTH + offset;
    const lo = laneAt(this.bodies, start + this.keyLength - LO_CHARS, LO_CHARS);
    const hi = laneAt(this.bodies, start, this.keyLength - LO_CHARS);
    const h = Math.imul(lo ^ Math.imul(hi, FILTER_HI_MULTIPLIER), FILTER_MULTIPLIER) >>> this.filterShift;
    this.filter[h >>> 5]! |= 1 << (h & 31);
  }

  private insertKey(index: number, offset: number): void {
    this.setFilterBit(index, offset);
    this.placeRef(index, offset);
  }

  /** Put the ref of the key at `offset` of marker `index` in the first free slot from its home. */
  private placeRef(index: number, offset: number): void {
    const lo = laneAt(this.bodies, index * MARKER_BODY_LENGTH + offset + this.keyLength - LO_CHARS, LO_CHARS);
    let s = Math.imul(lo, HASH_MULTIPLIER) >>> this.shift;
    while (this.refs[s] !== 0) s = (s + 1) & this.mask;
    this.refs[s] = index * 32 + offset + 1;
  }

  private removeKey(index: number, offset: number): void {
    const ref = index * 32 + offset + 1;
    const lo = laneAt(this.bodies, index * MARKER_BODY_LENGTH + offset + this.keyLength - LO_CHARS, LO_CHARS);
    let i = Math.imul(lo, HASH_MULTIPLIER) >>> this.shift;
    while (this.refs[i] !== ref) {
      if (this.refs[i] === 0) return; // not present: nothing to remove
      i = (i + 1) & this.mask;
    }
    // Backward-shift deletion: pull later members of the probe cluster into the hole when their home slot
    // is not cyclically inside (hole, their slot], so every key stays reachable from its home. The table
    // holds refs only: a member's home is recomputed from its body bytes.
    const mask = this.mask;
    let j = i;
    for (;;) {
      j = (j + 1) & mask;
      const r = this.refs[j]!;
      if (r === 0) break;
      const home = Math.imul(keyLoOf(this, r), HASH_MULTIPLIER) >>> this.shift;
      const stays = i <= j ? i < home && home <= j : i < home || home <= j;
      if (stays) continue;
      this.refs[i] = r;
      i = j;
    }
    this.refs[i] = 0;
  }
}

/** `chars` body values from `start` packed 5 bits each, first character highest. */
function laneAt(bodies: Uint8Array, start: number, chars: number): number {
  let lane = 0;
  for (let k = 0; k < chars; k++) lane = (lane << 5) | bodies[start + k]!;
  return lane;
}

/** The `lo` lane (last 6 characters) of the key a table ref points at, read from the body bytes (the table stores refs only). */
function keyLoOf(index: WindowIndex, ref: number): number {
  return laneAt(index.bodies, ((ref - 1) >>> 5) * MARKER_BODY_LENGTH + ((ref - 1) & 31) + index.keyLength - LO_CHARS, LO_CHARS);
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
