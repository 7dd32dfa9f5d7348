import { describe, expect, it } from 'vitest';
import {
  BASE32_ALPHABET,
  MARKER_BITS,
  MARKER_BODY_LENGTH,
  MARKER_PREFIX,
  MAX_MARKERS_PER_REQUEST,
  MarkerError,
  createMarkerCodec,
  createRandomPool,
  generateMarker,
  isMarker,
  markerBody,
  type RandomFill,
} from '../../prober/src/probe/markers.js';
import { createMarkerRegistry, plantingRows, type MarkerEntry } from '../../prober/src/probe/marker-registry.js';

const MARKER_RE = /^kvcanary-[a-z2-7]{26}$/;
const owner = { runId: 'run-1', requestId: 'req-1', role: 'planter', tenant: 'tenant-a' };

/**
 * Chi-square statistic of symbol counts against the uniform distribution over 32 symbols. With 31 degrees
 * of freedom the statistic exceeds 80 with probability about 3e-6 when the source is uniform.
 */
function chiSquare(counts: number[]): number {
  const total = counts.reduce((a, b) => a + b, 0);
  const expected = total / counts.length;
  return counts.reduce((sum, c) => sum + (c - expected) ** 2 / expected, 0);
}
const CHI2_LIMIT = 80;

/** Per-position and overall character counts of many markers. */
function characterCounts(markers: string[]): { overall: number[]; perPosition: number[][] } {
  const overall = new Array<number>(32).fill(0);
  const perPosition = Array.from({ length: MARKER_BODY_LENGTH }, () => new Array<number>(32).fill(0));
  for (const m of markers) {
    for (let k = 0; k < MARKER_BODY_LENGTH; k++) {
      const v = BASE32_ALPHABET.indexOf(m[MARKER_PREFIX.length + k]!);
      overall[v]!++;
      perPosition[k]![v]!++;
    }
  }
  return { overall, perPosition };
}

function worstChiSquare(markers: string[]): number {
  const { overall, perPosition } = characterCounts(markers);
  return Math.max(chiSquare(overall), ...perPosition.map(chiSquare));
}

describe('markers', () => {
  it('carry at least 96 random bits in the kvcanary- envelope', () => {
    expect(MARKER_BITS).toBeGreaterThanOrEqual(96);
    expect(MARKER_BITS).toBe(MARKER_BODY_LENGTH * Math.log2(BASE32_ALPHABET.length));
    const m = generateMarker();
    expect(m).toMatch(MARKER_RE);
    expect(isMarker(m)).toBe(true);
    expect(isMarker(m.toUpperCase())).toBe(true);
    expect(isMarker(m.slice(0, -1))).toBe(false);
    expect(isMarker(m + 'a')).toBe(false);
    expect(markerBody(m.toUpperCase())).toBe(m.slice(MARKER_PREFIX.length));
    expect(markerBody(m.slice(MARKER_PREFIX.length))).toBe(m.slice(MARKER_PREFIX.length));
    expect(markerBody('kvcanary-0123')).toBeUndefined();
  });

  it('are unique and uniformly distributed over many draws (per position, not only overall)', () => {
    const direct = Array.from({ length: 40_000 }, () => generateMarker());
    const registry = createMarkerRegistry();
    const planted = Array.from({ length: 40_000 }, (_, i) => registry.plant({ ...owner, requestId: `r${i}` }).marker);
    for (const markers of [direct, planted]) {
      expect(new Set(markers).size).toBe(markers.length);
      expect(markers.every((m) => MARKER_RE.test(m))).toBe(true);
      expect(worstChiSquare(markers)).toBeLessThan(CHI2_LIMIT);
      // Every bit of every character is a fair coin (within 6 sigma).
      const sigma = Math.sqrt(0.25 / markers.length);
      for (let k = 0; k < MARKER_BODY_LENGTH; k++) {
        for (let bit = 0; bit < 5; bit++) {
          let ones = 0;
          for (const m of markers) ones += (BASE32_ALPHABET.indexOf(m[MARKER_PREFIX.length + k]!) >> bit) & 1;
          expect(Math.abs(ones / markers.length - 0.5)).toBeLessThan(6 * sigma);
        }
      }
    }
  });

  it('the distribution check catches a biased source (so the test above can fail)', () => {
    // Bytes uniform over 0..199: masking to 5 bits then favours values 0..7.
    let state = 12345;
    const biased: RandomFill = (buf) => {
      for (let i = 0; i < buf.length; i++) {
        state = (Math.imul(state, 1103515245) + 12345) >>> 0;
        buf[i] = (state >>> 8) % 200;
      }
    };
    const markers = Array.from({ length: 40_000 }, () => generateMarker(biased));
    expect(new Set(markers).size).toBe(markers.length); // unique, yet not uniform
    expect(worstChiSquare(markers)).toBeGreaterThan(CHI2_LIMIT);
  });

  it('draw every character from the injected random source', () => {
    expect(generateMarker((buf) => buf.fill(0))).toBe(MARKER_PREFIX + 'a'.repeat(26));
    expect(generateMarker((buf) => buf.fill(255))).toBe(MARKER_PREFIX + '7'.repeat(26));
    expect(generateMarker((buf) => buf.forEach((_, i) => (buf[i] = i)))).toBe(MARKER_PREFIX + BASE32_ALPHABET.slice(0, 26));
  });

  it('a random pool never serves the same bytes twice and validates its size', () => {
    const pool = createRandomPool(64);
    const seen = new Set<string>();
    for (let i = 0; i < 100; i++) {
      const buf = new Uint8Array(26);
      pool(buf);
      seen.add(Buffer.from(buf).toString('hex'));
    }
    expect(seen.size).toBe(100);
    expect(() => createRandomPool(0)).toThrow(MarkerError);
  });
});

describe('marker registry', () => {
  const clock = (iso: string) => () => new Date(iso);

  it('registers a planted marker with its owner before handing it out', () => {
    const registry = createMarkerRegistry({ now: clock('2026-03-01T10:00:00Z') });
    const entry = registry.plant(owner);
    expect(entry).toEqual({ marker: entry.marker, ...owner, plantedAt: '2026-03-01T10:00:00.000Z', requestNo: entry.requestNo, index: 0 });
    expect(entry.requestNo).toMatch(/^[0-9a-f]{16}$/);
    expect(entry.marker).toMatch(MARKER_RE);
    expect(registry.get(entry.marker)).toEqual(entry);
    expect(registry.get(entry.marker.toUpperCase())).toEqual(entry);
    expect(registry.get(entry.marker.slice(MARKER_PREFIX.length))).toEqual(entry);
    expect(registry.size).toBe(1);
    expect(registry.windowCount).toBe(MARKER_BODY_LENGTH - 12 + 1);
    expect(Object.isFrozen(entry)).toBe(true);
  });

  it('attributes every FRAG-character window of a body, in any case, and nothing else', () => {
    const registry = createMarkerRegistry();
    const a = registry.plant({ ...owner, requestId: 'a' });
    const b = registry.plant({ ...owner, requestId: 'b', tenant: 'tenant-b' });
    for (const entry of [a, b]) {
      const body = entry.marker.slice(MARKER_PREFIX.length);
      for (let offset = 0; offset + 12 <= MARKER_BODY_LENGTH; offset++) {
        const hits = registry.lookup(body.slice(offset, offset + 12).toUpperCase());
        expect(hits).toEqual([{ entry, offset }]);
      }
    }
    expect(registry.lookup('abcdefghijkl')).toEqual([]);
    expect(() => registry.lookup('abc')).toThrow(/12 base32 characters/);
    expect(() => registry.lookup('abcdefghijk0')).toThrow(/not a base32 character/);
  });

  it('serialises as plain rows that another registry reloads (earlier runs)', () => {
    const first = createMarkerRegistry();
    const planted = Array.from({ length: 50 }, (_, i) => first.plant({ ...owner, requestId: `req-${i}` }));
    const rows = JSON.parse(JSON.stringify(first.rows())) as MarkerEntry[];
    expect(rows).toHaveLength(50);
    const second = createMarkerRegistry();
    expect(second.add(rows)).toBe(50);
    expect(second.add(rows)).toBe(0); // reloading the same rows is a no-op
    for (const entry of planted) {
      expect(second.get(entry.marker)).toEqual(entry);
      expect(second.lookup(entry.marker.slice(MARKER_PREFIX.length + 3, MARKER_PREFIX.length + 15))[0]?.entry).toEqual(entry);
    }
  });

  it('rejects bad rows with the field named, and adds nothing from a bad batch', () => {
    const registry = createMarkerRegistry();
    const good = { marker: generateMarker(), ...owner, plantedAt: '2026-01-01T00:00:00Z' };
    const cases: [unknown, RegExp][] = [
      [{ ...good, marker: 'kvcanary-short' }, /entries\[1\]\.marker: expected `kvcanary-` followed by 26 base32/],
      [{ ...good, marker: generateMarker(), tenant: '' }, /entries\[1\]\.tenant: expected a non-empty string/],
      [{ ...good, marker: generateMarker(), requestId: 7 }, /entries\[1\]\.requestId: .*got 7 \(number\)/],
      [{ ...good, marker: generateMarker(), plantedAt: 'yesterday' }, /entries\[1\]\.plantedAt: expected an ISO 8601 timestamp/],
      [null, /entries\[1\]: expected a marker row object, got null/],
    ];
    for (const [bad, message] of cases) {
      let error: unknown;
      try {
        registry.add([good, bad as MarkerEntry]);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(MarkerError);
      expect((error as MarkerError).code).toBe('KVC_MARKER_INVALID');
      expect((error as MarkerError).message).toMatch(message);
      expect(registry.size).toBe(0);
    }
  });

  it('refuses to give one marker two owners', () => {
    const registry = createMarkerRegistry();
    const entry = registry.plant(owner);
    expect(() => registry.add([{ ...entry, requestId: 'someone-else' }])).toThrow(
      expect.objectContaining({ code: 'KVC_MARKER_CONFLICT', message: expect.stringMatching(/already registered to run run-1 request req-1/) }),
    );
    const marker = generateMarker();
    expect(() =>
      registry.add([
        { marker, ...owner, plantedAt: '2026-01-01T00:00:00Z' },
        { marker, ...owner, tenant: 'other', plantedAt: '2026-01-01T00:00:00Z' },
      ]),
    ).toThrow(expect.objectContaining({ code: 'KVC_MARKER_CONFLICT' }));
    expect(registry.size).toBe(1);
  });

  it('forgets markers planted before a cutoff, windows included, and keeps the rest findable', () => {
    let now = Date.parse('2026-01-01T00:00:00Z');
    const registry = createMarkerRegistry({ now: () => new Date(now) });
    const live = new Map<string, MarkerEntry>();
    const gone: MarkerEntry[] = [];
    const checkAll = (): void => {
      expect(registry.size).toBe(live.size);
      expect(registry.windowCount).toBe(live.size * 15);
      for (const entry of live.values()) {
        const body = entry.marker.slice(MARKER_PREFIX.length);
        for (let offset = 0; offset <= 14; offset++) {
          expect(registry.lookup(body.slice(offset, offset + 12))).toEqual([{ entry, offset }]);
        }
      }
      for (const entry of gone) {
        // Gone from the fragment index; a whole copy still decrypts (it is this installation's), owner forgotten.
        expect(registry.isRecent(entry.marker)).toBe(false);
        expect(registry.get(entry.marker)?.runId).toBe('unknown');
        expect(registry.lookup(entry.marker.slice(MARKER_PREFIX.length, MARKER_PREFIX.length + 12))).toEqual([]);
      }
    };
    // Several rounds of planting and forgetting: the table grows, holes are reused, deletions shift.
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < 700; i++) {
        now += 1000;
        const entry = registry.plant({ ...owner, requestId: `round-${round}-${i}` });
        live.set(entry.marker, entry);
      }
      const cutoff = now - 500 * 1000;
      const expected = [...live.values()].filter((e) => Date.parse(e.plantedAt) < cutoff);
      expect(registry.forget(new Date(cutoff))).toBe(expected.length);
      for (const e of expected) {
        live.delete(e.marker);
        gone.push(e);
      }
      checkAll();
    }
    expect(registry.forget('2000-01-01T00:00:00Z')).toBe(0);
    expect(() => registry.forget('not a date')).toThrow(/olderThan: expected an ISO 8601 timestamp/);
    expect(registry.forget(now + 1)).toBe(live.size);
    expect(registry.size).toBe(0);
    expect(registry.windowCount).toBe(0);
  });

  it('takes a fragment length from 8 to 12 and indexes windows of that length', () => {
    for (const bad of [7, 13, 12.5, '12']) {
      expect(() => createMarkerRegistry({ fragmentLength: bad as number })).toThrow(/`fragmentLength` to be an integer from 8 to 12/);
    }
    const registry = createMarkerRegistry({ fragmentLength: 8 });
    const entry = registry.plant(owner);
    expect(registry.windowCount).toBe(19);
    const body = entry.marker.slice(MARKER_PREFIX.length);
    expect(registry.lookup(body.slice(18, 26))).toEqual([{ entry, offset: 18 }]);
  });

  it('validates the owner passed to plant', () => {
    const registry = createMarkerRegistry();
    expect(() => registry.plant({ ...owner, role: '' })).toThrow(/owner\.role: expected a non-empty string/);
    expect(() => registry.plant({ ...owner, plantedAt: 'soon' })).toThrow(/plantedAt: expected an ISO 8601 timestamp/);
    expect(registry.size).toBe(0);
  });
});

describe('marker cipher (installation key)', () => {
  const key = Uint8Array.from({ length: 16 }, (_, i) => i * 17 + 3);
  const requestNo = '0123456789abcdef';

  it('round-trips (request number, index) through a marker in the kvcanary- envelope', () => {
    const codec = createMarkerCodec(key);
    for (const index of [0, 1, 2, 500, MAX_MARKERS_PER_REQUEST - 1]) {
      const marker = codec.encode(requestNo, index);
      expect(marker).toMatch(MARKER_RE);
      expect(codec.decode(marker)).toEqual({ requestNo, index });
      expect(codec.decode(marker.toUpperCase())).toEqual({ requestNo, index });
      expect(codec.decode(marker.slice(MARKER_PREFIX.length))).toEqual({ requestNo, index });
    }
    // Deterministic: the same key re-derives the same marker (the fragment index relies on it).
    expect(createMarkerCodec(key).encode(requestNo, 7)).toBe(codec.encode(requestNo, 7));
    expect(codec.encode('fedcba9876543210', 7)).not.toBe(codec.encode(requestNo, 7));
    expect(() => codec.encode('xyz', 0)).toThrow(MarkerError);
    expect(() => codec.encode(requestNo, MAX_MARKERS_PER_REQUEST)).toThrow(MarkerError);
    expect(() => createMarkerCodec(new Uint8Array(15))).toThrow(/16-byte marker key/);
  });

  it('rejects forged and random bodies and other installations\' markers (48-bit check)', () => {
    const codec = createMarkerCodec(key);
    const other = createMarkerCodec(Uint8Array.from({ length: 16 }, (_, i) => 255 - i));
    let accepted = 0;
    for (let i = 0; i < 20_000; i++) {
      if (codec.decode(generateMarker()) !== undefined) accepted++;
      if (codec.decode(other.encode(requestNo, i)) !== undefined) accepted++;
    }
    expect(accepted).toBe(0);
    // Changing any character after the first (which also carries 2 pad bits) breaks the check.
    const marker = codec.encode(requestNo, 3);
    for (let k = 1; k < MARKER_BODY_LENGTH; k++) {
      const at = MARKER_PREFIX.length + k;
      const swapped = BASE32_ALPHABET[(BASE32_ALPHABET.indexOf(marker[at]!) + 1) % 32]!;
      expect(codec.decode(marker.slice(0, at) + swapped + marker.slice(at + 1))).toBeUndefined();
    }
    expect(codec.decode('kvcanary-short')).toBeUndefined();
  });

  it('keeps bodies uniform (chi-square per position) so the scanner\'s chance bound stands', () => {
    const codec = createMarkerCodec(key);
    const markers = Array.from({ length: 6000 }, (_, i) => codec.encode(requestNo, i));
    expect(worstChiSquare(markers)).toBeLessThan(CHI2_LIMIT);
  });

  it('decodes a batch of candidate windows in one call', () => {
    const codec = createMarkerCodec(key);
    const bodies = [codec.encode(requestNo, 1), generateMarker(), codec.encode('00000000000000aa', 9)].map((m) => m.slice(MARKER_PREFIX.length));
    const values = new Uint8Array(bodies.length * MARKER_BODY_LENGTH);
    bodies.forEach((b, c) => [...b].forEach((ch, k) => (values[c * MARKER_BODY_LENGTH + k] = BASE32_ALPHABET.indexOf(ch))));
    expect(codec.decodeValues(values, 3)).toEqual([{ requestNo, index: 1 }, undefined, { requestNo: '00000000000000aa', index: 9 }]);
  });
});

describe('marker registry: plantings', () => {
  const key = Uint8Array.from({ length: 16 }, (_, i) => i);

  it('gives a request consecutive markers of one planting, and one planting row per request', () => {
    const registry = createMarkerRegistry({ key, now: () => new Date('2026-03-01T10:00:00Z') });
    const a = Array.from({ length: 5 }, () => registry.plant(owner));
    const b = registry.plant({ ...owner, requestId: 'req-2' });
    expect(a.map((e) => e.index)).toEqual([0, 1, 2, 3, 4]);
    expect(new Set(a.map((e) => e.requestNo)).size).toBe(1);
    expect(b.requestNo).not.toBe(a[0]!.requestNo);
    expect(plantingRows([...a, b])).toEqual([
      { requestNo: a[0]!.requestNo, ...owner, plantedAt: '2026-03-01T10:00:00.000Z', markerCount: 5 },
      { requestNo: b.requestNo, ...owner, requestId: 'req-2', plantedAt: '2026-03-01T10:00:00.000Z', markerCount: 1 },
    ]);
    expect(registry.plantings()).toHaveLength(2);
  });

  it('a registry under the same key attributes a whole marker through its planting (another run, another process)', () => {
    const planter = createMarkerRegistry({ key });
    const entry = planter.plant({ ...owner, runId: 'run-earlier' });
    const rows = plantingRows([entry]);
    const later = createMarkerRegistry({ key, lookupPlanting: (no) => rows.find((r) => r.requestNo === no) });
    expect(later.isRecent(entry.marker)).toBe(false);
    expect(later.get(entry.marker)).toMatchObject({ marker: entry.marker, runId: 'run-earlier', requestId: 'req-1', role: 'planter', tenant: 'tenant-a', requestNo: entry.requestNo, index: 0 });
    // Without a store row it is still recognised as this installation's, owner unknown.
    expect(createMarkerRegistry({ key }).get(entry.marker)?.runId).toBe('unknown');
    // Another installation's key does not recognise it.
    expect(createMarkerRegistry({ key: new Uint8Array(16).fill(9) }).get(entry.marker)).toBeUndefined();
  });

  it('re-derives reloaded plantings into the fragment index, newest first within the bound', () => {
    const planter = createMarkerRegistry({ key });
    const old = Array.from({ length: 30 }, () => planter.plant({ ...owner, requestId: 'old', plantedAt: '2026-01-01T00:00:00Z' }));
    const recent = Array.from({ length: 30 }, () => planter.plant({ ...owner, requestId: 'recent', plantedAt: '2026-01-02T00:00:00Z' }));
    const later = createMarkerRegistry({ key, maxRecentMarkers: 40 });
    expect(later.addPlantings(plantingRows([...old, ...recent]))).toBe(2);
    expect(later.size).toBe(30);
    expect(recent.every((e) => later.isRecent(e.marker))).toBe(true);
    expect(old.some((e) => later.isRecent(e.marker))).toBe(false);
    expect(later.lookup(recent[3]!.marker.slice(MARKER_PREFIX.length + 2, MARKER_PREFIX.length + 14))[0]?.entry.requestId).toBe('recent');
    // Whole copies of the old ones still decrypt, and the reloaded planting attributes them.
    expect(later.get(old[0]!.marker)?.requestId).toBe('old');
  });

  it('bounds the fragment index: past maxRecentMarkers the oldest markers are evicted', () => {
    const registry = createMarkerRegistry({ key, maxRecentMarkers: 100 });
    const all = Array.from({ length: 1000 }, (_, i) => registry.plant({ ...owner, requestId: `r${i >> 3}` }));
    expect(registry.size).toBeLessThanOrEqual(100);
    expect(registry.isRecent(all[999]!.marker)).toBe(true);
    expect(registry.isRecent(all[0]!.marker)).toBe(false);
    expect(registry.get(all[0]!.marker)?.requestId).toBe('r0');
    expect(registry.windowCount).toBe(registry.size * (MARKER_BODY_LENGTH - 12 + 1));
    expect(() => createMarkerRegistry({ maxRecentMarkers: 0 })).toThrow(/maxRecentMarkers/);
  });
});
