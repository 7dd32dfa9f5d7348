import { describe, expect, it } from 'vitest';
import { BASE32_ALPHABET, MARKER_PREFIX } from '../../prober/src/probe/markers.js';
import { createMarkerRegistry, plantingRows, type MarkerEntry, type MarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { ScannerError, createScanner, scanText, type MarkerMatch, type ReaderIdentity } from '../../prober/src/probe/scanner.js';
import { mulberry32 as prng } from '../../prober/src/probe/seeded-random.js';

const reader: ReaderIdentity = { requestId: 'reader-1', tenant: 'tenant-b', role: 'reader' };

function setup(): { registry: MarkerRegistry; planter: MarkerEntry; own: MarkerEntry } {
  const registry = createMarkerRegistry({ now: () => new Date('2026-05-01T12:00:00Z') });
  const planter = registry.plant({ runId: 'run-1', requestId: 'planter-1', role: 'planter', tenant: 'tenant-a' });
  const own = registry.plant({ runId: 'run-1', requestId: reader.requestId, role: 'reader', tenant: reader.tenant });
  return { registry, planter, own };
}

const bodyOf = (entry: MarkerEntry): string => entry.marker.slice(MARKER_PREFIX.length);

const token = (rnd: () => number, alphabet: string, n: number): string =>
  Array.from({ length: n }, () => alphabet[Math.floor(rnd() * alphabet.length)]).join('');

function scanChunks(registry: MarkerRegistry, chunks: string[], who: ReaderIdentity = reader): { matches: MarkerMatch[]; session: ReturnType<ReturnType<typeof createScanner>['open']> } {
  const session = createScanner(registry).open(who);
  for (const c of chunks) session.push(c);
  return { matches: session.end(), session };
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

describe('scanner: exact matches and attribution', () => {
  it('reports another request\'s marker as foreign, attributed to its planter', () => {
    const { registry, planter } = setup();
    const text = `Sure! Here is the text you asked for: ${planter.marker}. Anything else?`;
    const [m, ...rest] = scanText(createScanner(registry), reader, text);
    expect(rest).toEqual([]);
    expect(m).toMatchObject({
      marker: planter.marker,
      fragment: bodyOf(planter),
      exact: true,
      offset: text.indexOf(planter.marker) + MARKER_PREFIX.length,
      length: 26,
      bodyOffset: 0,
      prefixed: true,
      self: false,
      foreign: true,
      owner: { runId: 'run-1', requestId: 'planter-1', role: 'planter', tenant: 'tenant-a', plantedAt: '2026-05-01T12:00:00.000Z' },
    });
    expect(m!.chance).toBeLessThan(1e-30);
    expect(m!.excerpt).toContain(planter.marker);
  });

  it('reports the reader\'s own marker as self-echo, never foreign', () => {
    const { registry, own } = setup();
    const matches = scanText(createScanner(registry), reader, `echo: ${own.marker} ${own.marker.toUpperCase()}`);
    expect(matches).toHaveLength(2);
    for (const m of matches) {
      expect(m.self).toBe(true);
      expect(m.foreign).toBe(false);
    }
  });

  it('a marker of another request in the same tenant is still foreign', () => {
    const { registry } = setup();
    const sibling = registry.plant({ runId: 'run-1', requestId: 'planter-2', role: 'planter', tenant: reader.tenant });
    const [m] = scanText(createScanner(registry), reader, `x ${sibling.marker} y`);
    expect(m).toMatchObject({ self: false, foreign: true, owner: { tenant: reader.tenant, requestId: 'planter-2' } });
  });

  it('with a runId, the same request id from another run is foreign', () => {
    const { registry } = setup();
    const earlier = registry.plant({ runId: 'run-0', requestId: reader.requestId, role: 'planter', tenant: 'tenant-a' });
    const [m] = scanText(createScanner(registry), { ...reader, runId: 'run-1' }, `x ${earlier.marker} y`);
    expect(m).toMatchObject({ self: false, foreign: true, owner: { runId: 'run-0' } });
  });

  it('finds markers of earlier runs reloaded from rows, and not forgotten ones', () => {
    const before = createMarkerRegistry({ now: () => new Date('2026-04-01T00:00:00Z') });
    const old = before.plant({ runId: 'run-0', requestId: 'planter-0', role: 'planter', tenant: 'tenant-a' });
    const { registry } = setup();
    registry.add(JSON.parse(JSON.stringify(before.rows())) as MarkerEntry[]);
    const [m] = scanText(createScanner(registry), reader, `late write: ${bodyOf(old)}`);
    expect(m).toMatchObject({ marker: old.marker, foreign: true, exact: true, prefixed: false, owner: { runId: 'run-0', requestId: 'planter-0' } });
    registry.forget('2026-04-15T00:00:00Z');
    expect(scanText(createScanner(registry), reader, `late write: ${bodyOf(old)}`)).toEqual([]);
  });

  it('finds a marker registered after the session opened (the index is read on every push)', () => {
    const { registry } = setup();
    const session = createScanner(registry).open(reader);
    session.push('before anything is planted ');
    const late = registry.plant({ runId: 'run-1', requestId: 'planter-2', role: 'planter', tenant: 'tenant-a' });
    session.push(`then ${late.marker}`);
    expect(session.end().map((m) => m.marker)).toEqual([late.marker]);
  });

  it('finds markers glued to other base32 text, back to back, prefix dropped or unhyphenated', () => {
    const { registry, planter, own } = setup();
    const a = bodyOf(planter);
    const b = bodyOf(own);
    const cases: [string, number, boolean][] = [
      [`zzzz${a}qqqq`, 4, false],
      [`${a}${b}`, 0, false],
      [`KVCANARY${a.toUpperCase()}`, 8, true],
      [`kvcanary-${a}kvcanary-${b}`, 9, true],
    ];
    for (const [text, offset, prefixed] of cases) {
      const matches = scanText(createScanner(registry), reader, text);
      const foreign = matches.filter((m) => m.foreign);
      expect(foreign, text).toHaveLength(1);
      expect(foreign[0]).toMatchObject({ exact: true, offset, prefixed });
    }
    const both = scanText(createScanner(registry), reader, `${a}${b}`);
    expect(both.map((m) => [m.offset, m.self])).toEqual([
      [0, false],
      [26, true],
    ]);
  });
});

describe('scanner: streaming', () => {
  const { registry, planter, own } = setup();
  const text = `data: {"text": "x ${planter.marker} and"} ${own.marker.toUpperCase()} tail`;
  const expected = scanText(createScanner(registry), reader, text);

  it('finds the same matches once the response has been read whole', () => {
    expect(expected.map((m) => [m.marker, m.self, m.exact])).toEqual([
      [planter.marker, false, true],
      [own.marker, true, true],
    ]);
  });

  it('a marker split at every position across two chunks is found exactly once, with the same evidence', () => {
    for (let i = 0; i <= text.length; i++) {
      const { matches } = scanChunks(registry, [text.slice(0, i), text.slice(i)]);
      expect(matches, `split at ${i}`).toEqual(expected);
    }
  });

  it('a marker split at every pair of positions across three chunks is found exactly once', () => {
    const start = text.indexOf(planter.marker) - 2;
    const end = start + planter.marker.length + 4;
    for (let i = start; i <= end; i++) {
      for (let j = i; j <= end; j++) {
        const { matches } = scanChunks(registry, [text.slice(0, i), text.slice(i, j), text.slice(j)]);
        expect(matches, `split at ${i}, ${j}`).toEqual(expected);
      }
    }
  });

  it('one character per chunk, and empty chunks, change nothing', () => {
    const chars = [...text].flatMap((c) => [c, '']);
    expect(scanChunks(registry, chars).matches).toEqual(expected);
  });

  it('counts what it scanned', () => {
    const { session } = scanChunks(registry, [text.slice(0, 20), text.slice(20)]);
    const s = session.stats();
    expect(s.chars).toBe(text.length);
    expect(s.registeredWindows).toBe(registry.windowCount);
    expect(s.selfMatches).toBe(1);
    expect(s.foreignMatches).toBe(1);
    // Every position inside a base32 run of 12 or more is probed once: two bodies of 26 (15 windows each).
    expect(s.candidatePositions).toBe(30);
  });
});

describe('scanner: fragments and the chance bound', () => {
  it('finds 12..25-character pieces, with or without prefix, any case, with chance shrinking with length', () => {
    const { registry, planter } = setup();
    const body = bodyOf(planter);
    const scanner = createScanner(registry);
    let previous = Infinity;
    for (let length = 12; length <= 25; length++) {
      const variants = [0, 26 - length, Math.floor((26 - length) / 2)].flatMap((offset) => {
        const piece = body.slice(offset, offset + length);
        return [
          { offset, text: `copied: ${piece} rest`, fragment: piece },
          { offset, text: `copied: KVCANARY-${piece.toUpperCase()}.`, fragment: piece.toUpperCase() },
        ];
      });
      for (const v of variants) {
        const session = scanner.open(reader);
        session.push(v.text);
        const matches = session.end();
        expect(matches, v.text).toHaveLength(1);
        const m = matches[0]!;
        expect(m).toMatchObject({ fragment: v.fragment, exact: false, length, bodyOffset: v.offset, foreign: true });
        expect(m.offset).toBe(v.text.indexOf(v.fragment));
        expect(m.prefixed).toBe(v.offset === 0 && v.text.includes('KVCANARY-'));
        const { registeredWindows: w, candidatePositions: n } = session.stats();
        expect(m.chance).toBeCloseTo(Math.min(1, w * n * 32 ** -length), 30);
        expect(m.chance).toBeGreaterThan(0);
      }
      const chance = scanText(scanner, reader, `copied: ${body.slice(0, length)} rest`)[0]!.chance;
      expect(chance).toBeLessThan(previous);
      previous = chance;
    }
  });

  it('the bound grows with the registry and the response scanned', () => {
    const { registry, planter } = setup();
    const piece = bodyOf(planter).slice(0, 12);
    const small = scanText(createScanner(registry), reader, piece)[0]!.chance;
    const longer = scanText(createScanner(registry), reader, `${token(prng(1), BASE32_ALPHABET, 5000)} ${piece}`)[0]!.chance;
    for (let i = 0; i < 1000; i++) registry.plant({ runId: 'run-1', requestId: `p${i}`, role: 'planter', tenant: 'tenant-a' });
    const bigger = scanText(createScanner(registry), reader, piece)[0]!.chance;
    expect(longer).toBeGreaterThan(small * 1000);
    expect(bigger).toBeGreaterThan(small * 500);
    expect(small).toBe(30 * 1 * 32 ** -12);
  });

  it('honours a shorter configured fragment length', () => {
    const registry = createMarkerRegistry({ fragmentLength: 8 });
    const planter = registry.plant({ runId: 'run-1', requestId: 'planter-1', role: 'planter', tenant: 'tenant-a' });
    const body = bodyOf(planter);
    const matches = scanText(createScanner(registry), reader, `a ${body.slice(3, 11)} b ${body.slice(15, 22)} c`);
    expect(matches.map((m) => [m.fragment, m.bodyOffset])).toEqual([[body.slice(3, 11), 3]]);
    expect(matches[0]!.chance).toBeCloseTo(Math.min(1, 19 * 1 * 32 ** -8), 20);
  });

  it('ignores pieces shorter than 12 characters', () => {
    const { registry, planter } = setup();
    const body = bodyOf(planter);
    expect(scanText(createScanner(registry), reader, `a ${body.slice(0, 11)} b ${body.slice(15)} c`)).toEqual([]);
  });

  it('an imperfect copy yields its longest agreeing stretches', () => {
    const { registry, planter } = setup();
    const body = bodyOf(planter);
    const wrong = body[10] === 'a' ? 'b' : 'a';
    const text = `kvcanary-${body.slice(0, 10)}${wrong}${body.slice(11)}`;
    const matches = scanText(createScanner(registry), reader, text);
    expect(matches.map((m) => [m.bodyOffset, m.length, m.fragment])).toEqual([[11, 15, body.slice(11)]]);
  });
});

describe('scanner: noise', () => {
  it('megabytes of random hex, base32 and words give no foreign match (self echoes still found)', () => {
    const registry = createMarkerRegistry();
    for (let i = 0; i < 20_000; i++) registry.plant({ runId: 'run-1', requestId: `planter-${i}`, role: 'planter', tenant: 'tenant-a' });
    const own = registry.plant({ runId: 'run-1', requestId: reader.requestId, role: 'reader', tenant: reader.tenant });
    const rnd = prng(2026);
    const words = ['the', 'cache', 'international', 'responsibility', 'kvcanary-', 'KVCANARY', 'of', 'tokens', '\n'];
    const session = createScanner(registry).open(reader);
    let size = 0;
    let echoes = 0;
    while (size < 4_000_000) {
      const r = rnd();
      let piece: string;
      if (r < 0.3) piece = token(rnd, '0123456789abcdef', 16 + Math.floor(rnd() * 200));
      else if (r < 0.6) piece = token(rnd, BASE32_ALPHABET, 16 + Math.floor(rnd() * 200));
      else if (r < 0.65) piece = token(rnd, BASE32_ALPHABET.toUpperCase(), 16 + Math.floor(rnd() * 200));
      else if (r < 0.999) piece = Array.from({ length: 20 }, () => words[Math.floor(rnd() * words.length)]).join(' ');
      else {
        piece = ` ${own.marker} `;
        echoes++;
      }
      // Random chunk boundaries, as SSE deltas would fall.
      for (let k = 0; k < piece.length; ) {
        const step = 1 + Math.floor(rnd() * 300);
        session.push(piece.slice(k, k + step));
        k += step;
      }
      session.push(rnd() < 0.5 ? ' ' : '');
      size += piece.length;
    }
    const matches = session.end();
    expect(matches.filter((m) => m.foreign)).toEqual([]);
    expect(matches.filter((m) => m.self && m.exact)).toHaveLength(Math.min(echoes, 16));
    expect(session.stats().candidatePositions).toBeGreaterThan(1_000_000);
  });
});

describe('scanner: evidence', () => {
  it('is bounded to the match and 60 characters either side, from a huge response', () => {
    const { registry, planter } = setup();
    const filler = 'lorem ipsum dolor sit amet, '.repeat(40_000); // ~1 MB each side
    const text = `${filler}${planter.marker}${filler}`;
    const chunks: string[] = [];
    for (let i = 0; i < text.length; i += 4096) chunks.push(text.slice(i, i + 4096));
    const [m] = scanChunks(registry, chunks).matches;
    expect(m!.excerpt.length).toBeLessThanOrEqual(60 + 26 + 60);
    expect(m!.excerpt).toBe(text.slice(m!.offset - 60, m!.offset + 26 + 60));
  });

  it('redacts every other base32 run of 12 or more characters, including ones cut by the window edge', () => {
    const { registry, planter, own } = setup();
    const secret = 'SK4LIVEKEY7ABCDEFGHIJ234567'; // someone else's token next to the leak
    const longRun = token(prng(3), BASE32_ALPHABET, 100);
    const text = `${longRun} key=${secret} ${planter.marker} also ${own.marker} short words stay`;
    const [m] = scanText(createScanner(registry), reader, text).filter((x) => x.foreign);
    const ex = m!.excerpt;
    expect(ex).toContain(planter.marker);
    expect(ex).not.toContain(secret);
    expect(ex).toContain(`key=[redacted:${secret.length}]`);
    expect(ex).not.toContain(bodyOf(own));
    expect(ex).toContain('also kvcanary-[redacted:26]');
    // The 100-character run starts before the window: its visible end is redacted, not shown in part.
    expect(ex.startsWith('[redacted:')).toBe(true);
    for (let k = 0; k + 12 <= longRun.length; k++) expect(ex).not.toContain(longRun.slice(k, k + 12));
    // Apart from the match itself, nothing of 12 base32 characters or more is left; ordinary words are.
    expect(ex.replace(planter.marker, '').replace(/\[redacted:\d+\]/g, '')).not.toMatch(/[a-z2-7]{12}/i);
    expect(ex).toContain('short words stay');
  });

  it('streams the same excerpt whatever the chunking, and never splits a surrogate pair', () => {
    const { registry, planter } = setup();
    const text = `${'😀'.repeat(40)} ${planter.marker} ${'😀'.repeat(40)}`;
    const whole = scanText(createScanner(registry), reader, text)[0]!;
    expect(whole.excerpt).not.toMatch(LONE_SURROGATE);
    expect(whole.excerpt).toContain(planter.marker);
    for (let size = 1; size <= 40; size += 3) {
      const chunks: string[] = [];
      for (let i = 0; i < text.length; i += size) chunks.push(text.slice(i, i + size));
      expect(scanChunks(registry, chunks).matches).toEqual([whole]);
    }
  });
});

describe('scanner: bounds and misuse', () => {
  it('self-echo cannot crowd out a leak; the rest is counted', () => {
    const { registry, planter, own } = setup();
    const session = createScanner(registry, { maxMatches: 50, maxMatchesPerMarker: 1000 }).open(reader);
    for (let i = 0; i < 5000; i++) session.push(`${own.marker} `);
    session.push(planter.marker);
    const matches = session.end();
    expect(matches.filter((m) => m.self)).toHaveLength(50);
    expect(matches.filter((m) => m.foreign).map((m) => m.marker)).toEqual([planter.marker]);
    expect(session.stats()).toMatchObject({ selfMatches: 5000, foreignMatches: 1, dropped: 4950 });
  });

  it('counts every repeat of a marker in one large chunk', () => {
    const { registry, planter, own } = setup();
    const session = createScanner(registry).open(reader);
    session.push(`${planter.marker} ${own.marker}`.repeat(20_000));
    const matches = session.end();
    expect(session.stats()).toMatchObject({ selfMatches: 20_000, foreignMatches: 20_000, dropped: 40_000 - 32 });
    expect(matches).toHaveLength(32);
  });

  it('keeps at most maxMatchesPerMarker per marker', () => {
    const { registry, planter } = setup();
    const matches = scanText(createScanner(registry, { maxMatchesPerMarker: 3 }), reader, `${planter.marker} `.repeat(10));
    expect(matches).toHaveLength(3);
  });

  it('rejects misuse with typed errors', () => {
    const { registry } = setup();
    const scanner = createScanner(registry);
    const session = scanner.open(reader);
    expect(() => session.push(42 as unknown as string)).toThrow(expect.objectContaining({ code: 'KVC_SCAN_BAD_INPUT' }));
    session.end();
    expect(() => session.push('more')).toThrow(ScannerError);
    expect(() => session.push('more')).toThrow(expect.objectContaining({ code: 'KVC_SCAN_ENDED' }));
    expect(() => session.end()).toThrow(expect.objectContaining({ code: 'KVC_SCAN_ENDED' }));
    expect(() => scanner.open({ ...reader, requestId: '' })).toThrow(/reader\.requestId/);
    expect(() => createScanner(registry, { context: 61 })).toThrow(/`context` to be an integer from 0 to 60/);
    expect(() => createScanner(registry, { maxMatches: 0 })).toThrow(expect.objectContaining({ code: 'KVC_SCAN_OPTION' }));
  });

  it('survives a marker being forgotten while its match is still open', () => {
    const { registry, planter } = setup();
    const session = createScanner(registry).open(reader);
    session.push(`x ${planter.marker.slice(0, 25)}`);
    registry.forget('2030-01-01T00:00:00Z');
    session.push(`${planter.marker.slice(25)} y`);
    const [m] = session.end();
    expect(m).toMatchObject({ marker: planter.marker, exact: true, foreign: true });
  });
});

describe('scanner: markers of earlier runs (installation key)', () => {
  const key = Uint8Array.from({ length: 16 }, (_, i) => 100 + i);
  const earlier = { runId: 'run-0', requestId: 'planter-0', role: 'planter', tenant: 'tenant-a' };
  const current: ReaderIdentity = { ...reader, runId: 'run-1' };

  function earlierRun(): { planted: MarkerEntry[]; rows: ReturnType<typeof plantingRows> } {
    const registry = createMarkerRegistry({ key, now: () => new Date('2026-05-01T11:00:00Z') });
    const planted = Array.from({ length: 4 }, () => registry.plant(earlier));
    return { planted, rows: plantingRows(planted).map((r) => ({ ...r, target: 'prod (http://10.0.0.1)' })) };
  }

  it('decrypts a whole marker planted by an earlier run and attributes it to that run\'s planting request', () => {
    const { planted, rows } = earlierRun();
    const registry = createMarkerRegistry({ key, lookupPlanting: (no) => rows.find((r) => r.requestNo === no) });
    expect(registry.size).toBe(0);
    const text = `Reference: ${planted[2]!.marker}, and also ${bodyOf(planted[1]!).toUpperCase()}!`;
    const session = createScanner(registry).open(current);
    session.push(text);
    const matches = session.end();
    expect(matches.map((m) => [m.marker, m.exact, m.foreign, m.plantedBy, m.prefixed])).toEqual([
      [planted[2]!.marker, true, true, 'earlier-run', true],
      [planted[1]!.marker, true, true, 'earlier-run', false],
    ]);
    expect(matches[0]!.owner).toEqual({ ...earlier, plantedAt: '2026-05-01T11:00:00.000Z', target: 'prod (http://10.0.0.1)', requestNo: expect.stringMatching(/^[0-9a-f]{16}$/) });
    expect(matches[0]!.chance).toBeLessThan(1e-12);
    expect(session.stats().decryptedWindows).toBeGreaterThan(0);
  });

  it('finds a whole marker glued to other base32 text or split across chunks', () => {
    const { planted, rows } = earlierRun();
    const registry = createMarkerRegistry({ key, lookupPlanting: (no) => rows.find((r) => r.requestNo === no) });
    const text = `kvcanary${bodyOf(planted[0]!)}abc`; // prefix without its hyphen, trailing letters
    const chunks = [...text].map((c) => c);
    const { matches } = scanChunks(registry, chunks, current);
    expect(matches.map((m) => [m.marker, m.offset])).toEqual([[planted[0]!.marker, 'kvcanary'.length]]);
  });

  it('says "this run" for this run\'s markers and leaves another installation\'s markers unrecognised', () => {
    const registry = createMarkerRegistry({ key });
    const mine = registry.plant({ ...earlier, runId: 'run-1' });
    const foreign = createMarkerRegistry({ key: new Uint8Array(16).fill(1) }).plant(earlier);
    const matches = scanText(createScanner(registry), current, `${mine.marker} ${foreign.marker}`);
    expect(matches.map((m) => [m.marker, m.plantedBy])).toEqual([[mine.marker, 'this-run']]);
  });

  it('matches fragments of an earlier run\'s markers once its plantings are reloaded, not before', () => {
    const { planted, rows } = earlierRun();
    const fragment = bodyOf(planted[3]!).slice(5, 19);
    const text = `partial copy: ${fragment} …`;
    const cold = createMarkerRegistry({ key, lookupPlanting: (no) => rows.find((r) => r.requestNo === no) });
    expect(scanText(createScanner(cold), current, text)).toEqual([]);
    const warm = createMarkerRegistry({ key });
    warm.addPlantings(rows);
    const [m, ...rest] = scanText(createScanner(warm), current, text);
    expect(rest).toEqual([]);
    expect(m).toMatchObject({ marker: planted[3]!.marker, fragment, exact: false, bodyOffset: 5, plantedBy: 'earlier-run', owner: { runId: 'run-0', requestId: 'planter-0' } });
  });
});

describe('scanner: decryption is bounded per response', () => {
  it('stops decrypting past maxDecryptWindows and counts what it skipped', () => {
    const registry = createMarkerRegistry();
    const entry = registry.plant({ runId: 'run-1', requestId: 'planter-1', role: 'planter', tenant: 'tenant-a' });
    const session = createScanner(registry, { maxDecryptWindows: 100 }).open(reader);
    session.push('a'.repeat(1000) + ' ' + entry.marker);
    const matches = session.end();
    expect(matches.map((m) => m.marker)).toEqual([entry.marker]); // the fragment index still finds recent ones
    expect(session.stats()).toMatchObject({ decryptedWindows: 100, decryptSkipped: 1000 - 26 + 1 - 100 + 1 });
  });
});
