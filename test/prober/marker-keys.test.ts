import { describe, expect, it } from 'vitest';
import { BASE32_ALPHABET, MARKER_BODY_LENGTH, MARKER_PREFIX, generateMarker } from '../../prober/src/probe/markers.js';
import {
  MAX_FRAGMENT_LENGTH,
  MAX_KEY_LENGTH,
  MIN_FRAGMENT_LENGTH,
  createMarkerRegistry,
  sparseKeys,
  type MarkerEntry,
  type MarkerRegistry,
} from '../../prober/src/probe/marker-registry.js';
import { createScanner, type MarkerMatch, type ReaderIdentity } from '../../prober/src/probe/scanner.js';

const reader: ReaderIdentity = { requestId: 'reader', tenant: 'tenant-r', role: 'reader' };
const bodyOf = (entry: MarkerEntry): string => entry.marker.slice(MARKER_PREFIX.length);
const row = (body: string, requestId: string): MarkerEntry => ({
  marker: MARKER_PREFIX + body,
  runId: 'run-1',
  requestId,
  role: 'planter',
  tenant: 'tenant-a',
  plantedAt: '2026-01-01T00:00:00.000Z',
});

function scan(registry: MarkerRegistry, chunks: string[]): MarkerMatch[] {
  const session = createScanner(registry).open(reader);
  for (const c of chunks) session.push(c);
  return session.end();
}

/** Seeded bodies, so the tests below never meet a chance agreement that varies from run to run. */
let seed = 0x2545f491;
const seededBody = (): string =>
  generateMarker((buf) => {
    for (let i = 0; i < buf.length; i++) {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      buf[i] = seed >>> 24;
    }
    return buf;
  }).slice(MARKER_PREFIX.length);

/** Replace body characters from `at` with `piece`. */
const splice = (body: string, at: number, piece: string): string => body.slice(0, at) + piece + body.slice(at + piece.length);
/** A base32 character other than `c`. */
const other = (c: string): string => BASE32_ALPHABET[(BASE32_ALPHABET.indexOf(c) + 1) % 32]!;

describe('sparse keys', () => {
  it('every FRAG-character window of a body holds exactly one key whole, for every FRAG the registry accepts', () => {
    for (let frag = MIN_FRAGMENT_LENGTH; frag <= MAX_FRAGMENT_LENGTH; frag++) {
      const { length, offsets } = sparseKeys(frag);
      expect(length).toBe(Math.min(MAX_KEY_LENGTH, frag));
      for (const t of offsets) {
        expect(t).toBeGreaterThanOrEqual(0);
        expect(t + length).toBeLessThanOrEqual(MARKER_BODY_LENGTH);
      }
      for (let s = 0; s + frag <= MARKER_BODY_LENGTH; s++) {
        const inside = offsets.filter((t) => t >= s && t + length <= s + frag);
        expect(inside, `FRAG ${frag}, window at ${s}`).toHaveLength(1);
      }
    }
  });

  it('takes 4 nine-character keys at 3, 7, 11, 15 at the default FRAG of 12', () => {
    expect(sparseKeys(12)).toEqual({ length: 9, step: 4, offsets: [3, 7, 11, 15] });
    const registry = createMarkerRegistry();
    registry.plant({ runId: 'r', requestId: 'q', role: 'planter', tenant: 't' });
    expect(registry.keyCount).toBe(4);
    expect(registry.windowCount).toBe(15);
  });

  it('finds a fragment of exactly FRAG characters at either end of the body, split one character per chunk, for every FRAG', () => {
    for (let frag = MIN_FRAGMENT_LENGTH; frag <= MAX_FRAGMENT_LENGTH; frag++) {
      const registry = createMarkerRegistry({ fragmentLength: frag });
      const entry = registry.plant({ runId: 'r', requestId: 'planter', role: 'planter', tenant: 't' });
      const body = bodyOf(entry);
      for (let s = 0; s + frag <= MARKER_BODY_LENGTH; s++) {
        const text = `see ${body.slice(s, s + frag)} there`;
        for (const chunks of [[text], [...text]]) {
          const matches = scan(registry, chunks);
          expect(matches.map((m) => [m.marker, m.bodyOffset, m.length, m.offset]), `FRAG ${frag} at ${s}`).toEqual([[entry.marker, s, frag, 4]]);
        }
        // One character short is not a fragment, whichever end is cut.
        expect(scan(registry, [`see ${body.slice(s, s + frag - 1)} there`])).toEqual([]);
        expect(scan(registry, [...`see ${body.slice(s + 1, s + frag)} there`])).toEqual([]);
      }
    }
  });

  it('a key that agrees but whose surrounding text falls short of FRAG is no match, even when the chunk ends inside it', () => {
    const registry = createMarkerRegistry();
    const entry = registry.plant({ runId: 'r', requestId: 'planter', role: 'planter', tenant: 't' });
    const body = bodyOf(entry);
    // The key at 7..15 with one agreeing character either side: 11 characters, then disagreement.
    const piece = other(body[5]!) + body.slice(6, 17) + other(body[17]!);
    expect(scan(registry, [`x ${piece} y`])).toEqual([]);
    expect(scan(registry, [...`x ${piece} y`])).toEqual([]);
    expect(scan(registry, [`x ${piece.slice(0, 10)}`, `${piece.slice(10)} y`])).toEqual([]);
    // One more agreeing character makes it a 12-character fragment.
    const longer = other(body[4]!) + body.slice(5, 17) + other(body[17]!);
    expect(scan(registry, [...`x ${longer} y`]).map((m) => [m.bodyOffset, m.length])).toEqual([[5, 12]]);
  });
});

describe('key table: shared keys', () => {
  it('attributes every marker that shares a key, at the same or another body offset, and survives their deletion', () => {
    const a = seededBody();
    const key = a.slice(3, 12);
    // b shares a's key at the same offset and differs everywhere else; c carries it at offset 7.
    let b = [...a].map((ch) => other(ch)).join('');
    b = splice(b, 3, key);
    let c = seededBody();
    c = splice(c, 7, key);
    // d shares only the key's `lo` lane (its last 6 characters), so it lands in the same probe cluster.
    let d = seededBody();
    d = splice(d, 3, other(key[0]!) + key.slice(1));
    const registry = createMarkerRegistry();
    expect(registry.add([row(a, 'a'), row(b, 'b'), row(c, 'c'), row(d, 'd')])).toBe(4);
    const check = (live: Record<string, string>): void => {
      for (const [id, body] of Object.entries(live)) {
        for (let s = 0; s + 12 <= MARKER_BODY_LENGTH; s++) {
          const hits = registry.lookup(body.slice(s, s + 12));
          expect(hits.some((h) => h.entry.requestId === id && h.offset === s), `${id} at ${s}`).toBe(true);
          for (const h of hits) expect(bodyOf(h.entry).slice(h.offset, h.offset + 12)).toBe(body.slice(s, s + 12));
        }
        expect(registry.get(body)?.requestId).toBe(id);
        const found = scan(registry, [`text ${body.slice(2, 16)} text`]);
        expect(found.map((m) => [m.owner.requestId, m.bodyOffset, m.length])).toContainEqual([id, 2, 14]);
      }
    };
    check({ a, b, c, d });
    // The key itself with 3 characters of a around it: a 12-character window that is a's alone.
    expect(registry.lookup(a.slice(0, 12)).map((h) => h.entry.requestId)).toEqual(['a']);
    // Whole markers sharing a key are each found once, attributed to themselves.
    const whole = scan(registry, [`${a} ${b} ${c}`]);
    expect(whole.map((m) => [m.owner.requestId, m.exact])).toEqual([['a', true], ['b', true], ['c', true]]);
    // Backward-shift deletion keeps the others reachable when one of a cluster goes.
    expect(registry.forget('2026-01-01T00:00:01Z')).toBe(4);
    expect(registry.size).toBe(0);
    expect(registry.lookup(c.slice(7, 19))).toEqual([]);
    const later = { ...row(b, 'b'), plantedAt: '2026-01-02T00:00:00.000Z' };
    const fresh = createMarkerRegistry();
    fresh.add([row(a, 'a'), later, row(c, 'c'), { ...row(d, 'd'), plantedAt: '2026-01-02T00:00:00.000Z' }]);
    expect(fresh.forget('2026-01-01T12:00:00Z')).toBe(2);
    expect(fresh.isRecent(MARKER_PREFIX + a)).toBe(false);
    expect(fresh.lookup(a.slice(0, 12))).toEqual([]);
    expect(fresh.lookup(b.slice(0, 12)).map((h) => h.entry.requestId)).toEqual(['b']);
    expect(fresh.lookup(d.slice(3, 15)).map((h) => h.entry.requestId)).toEqual(['d']);
    expect(fresh.get(b)?.requestId).toBe('b');
  });

  it('keeps its per-marker arrays within maxRecentMarkers however many markers pass through', () => {
    const registry = createMarkerRegistry({ maxRecentMarkers: 1000 });
    for (let i = 0; i < 5000; i++) registry.plant({ runId: 'r', requestId: `q${i >> 4}`, role: 'planter', tenant: 't' });
    expect(registry.size).toBeLessThanOrEqual(1000);
    expect(registry.index().bodies.length).toBeLessThanOrEqual(1000 * MARKER_BODY_LENGTH);
    const rows = Array.from({ length: 3000 }, (_, i) => row(generateMarker().slice(MARKER_PREFIX.length), `bulk-${i}`));
    expect(registry.add(rows)).toBe(3000);
    // Inserting then evicting the oldest, as if all had been held: the newest 7/8 of the bound remain.
    expect(registry.size).toBe(875);
    expect(registry.isRecent(rows[2999]!.marker)).toBe(true);
    expect(registry.isRecent(rows[3000 - 875]!.marker)).toBe(true);
    expect(registry.isRecent(rows[3000 - 876]!.marker)).toBe(false);
    expect(registry.index().bodies.length).toBeLessThanOrEqual(1000 * MARKER_BODY_LENGTH);
  });
});
