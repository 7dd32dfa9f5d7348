/**
 * The incident, through HTTP as a client sees it: plant markers in a few requests, then send a prompt
 * between the prefill pool and the context limit. On `incident` the answer is a 200 whose text continues
 * another request's marker, and the ground-truth counter rose. Then each defense alone on top of
 * `incident`, measured the same way; the measured table must be the one in engine-under-test/README.md.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFENSES } from '../../engine-under-test/src/defenses.js';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
function base32(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += BASE32[(bytes[i] as number) % 32];
  return s;
}

let running: RunningEngine[] = [];
afterEach(async () => {
  await Promise.all(running.map((r) => r.close()));
  running = [];
});

const post = (base: string, body: unknown): Promise<Response> =>
  fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

interface Probe {
  status: number;
  id: string | undefined;
  text: string;
  /** The over-limit answer holds a fragment of a marker another request planted. */
  foreignText: boolean;
  foreignPageReads: number;
  /** Plant-then-over-limit rounds it took. */
  tries?: number;
  /** kvcanary_engine_defense_blocks_total{defense} of the defense on, over the engine's life (GET /metrics). */
  blocks?: number;
}

/** Four planters dense with markers (about the prefill pool in all), then a prompt between the pools' limits. */
async function plantThenOverLimit(e: RunningEngine): Promise<Probe> {
  const fragments = new Set<string>();
  for (let i = 0; i < 4; i++) {
    const markers = Array.from({ length: 72 }, () => `kvcanary-${base32(26)}`);
    for (const m of markers) for (let j = 9; j + 12 <= m.length; j++) fragments.add(m.slice(j, j + 12));
    const res = await post(e.url, { prompt: `Keep these reference codes on file: ${markers.join(' ')}\nQuote one reference code: kvcanary-`, max_tokens: 8, temperature: 0 });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  }
  const before = e.engine.stats().foreignPageReadsTotal;
  const filler = 'The committee reviewed the quarterly figures for the northern region. '.repeat(190); // ~13,400 tokens
  const res = await post(e.url, { prompt: `Summarise the following meeting notes.\n\n${filler}\n\nQuote the reference code: kvcanary-`, max_tokens: 48, temperature: 0, stream: true });
  const body = await res.text();
  const chunks = body
    .split('\n\n')
    .filter((b) => b.startsWith('data: {'))
    .map((b) => JSON.parse(b.slice(6)) as { id?: string; choices?: { text?: string }[] });
  const text = chunks.map((c) => c.choices?.[0]?.text ?? '').join('');
  let foreignText = false;
  for (let i = 0; i + 12 <= text.length && !foreignText; i++) foreignText = fragments.has(text.slice(i, i + 12));
  return { status: res.status, id: chunks[0]?.id, text, foreignText, foreignPageReads: e.engine.stats().foreignPageReadsTotal - before };
}

/**
 * Whether the over-limit answer happens to continue one of our markers depends on which stale pages the
 * reservation inherited and where the copy head locks on: a per-try probability, not a certainty. Up to
 * `tries` tries (planting again each time) decide "foreign text" for a defense; status and ground truth add
 * up. The defense table asks it of six defenses at once, so it gives each more tries.
 */
async function plantThenOverLimitTries(e: RunningEngine, tries = 3): Promise<Probe> {
  let p: Probe = { ...(await plantThenOverLimit(e)), tries: 1 };
  for (let i = 1; i < tries && !p.foreignText && p.status === 200 && p.foreignPageReads > 0; i++) {
    const next = await plantThenOverLimit(e);
    p = { ...next, foreignPageReads: p.foreignPageReads + next.foreignPageReads, tries: i + 1 };
  }
  return p;
}

function outcome(p: Probe): string {
  if (p.status >= 400 && p.status < 500 && p.text === '' && p.foreignPageReads === 0) return 'stops the leak: a clean 4xx before bootstrap';
  if (p.status >= 500 && p.foreignPageReads === 0) return 'fails closed (5xx), nothing foreign read';
  if (p.status === 200 && !p.foreignText && p.foreignPageReads === 0) return 'removes the content, not the 200';
  if (p.status === 200 && p.foreignText) return 'does not stop it';
  return `unexpected: ${p.status}, foreign text ${p.foreignText}, ${p.foreignPageReads} foreign page reads`;
}

function row(defense: string, p: Probe): string {
  return `| ${defense} | ${p.status} | ${p.foreignText ? 'yes' : 'no'} | ${p.foreignPageReads > 0 ? '> 0' : '0'} | ${p.blocks === undefined ? '–' : p.blocks} | ${outcome(p)} |`;
}

/** `kvcanary_engine_defense_blocks_total{defense}` as GET /metrics reports it. */
async function blocksOf(e: RunningEngine, defense: string): Promise<number> {
  const text = await (await fetch(`${e.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`kvcanary_engine_defense_blocks_total{defense="${defense}"}`));
  expect(line, `no defense_blocks line for ${defense}`).toBeDefined();
  return Number(line!.split(' ').pop());
}

describe('fault admission-checks-finished (the incident)', () => {
  it('answers an over-pool prompt with a 200 that continues another request’s marker, read through attention', async () => {
    const e = await startEngine({ preset: 'incident', scale: 64 });
    running.push(e);
    // Six tries, as the defense table gives each row: the foreign text is a per-try chance, the page reads are not.
    const p = await plantThenOverLimitTries(e, 6);
    expect(p.status).toBe(200);
    expect(p.foreignText).toBe(true);
    expect(p.foreignPageReads).toBeGreaterThan(0);
    const reader = Number(/^cmpl-(\d+)$/.exec(p.id ?? '')?.[1]);
    const log = (await (await fetch(`${e.url}/debug/exposures`)).json()) as { total: number; exposures: { reader: number; writers: number[] }[] };
    const mine = log.exposures.filter((x) => x.reader === reader);
    expect(mine.length).toBeGreaterThan(0);
    // Only planters wrote what the reader read: each try is four planters then one over-limit request, so
    // ids 5, 10, 15, … are the over-limit ones and every other id below the reader's is a planter's.
    expect(mine.every((x) => x.writers.every((w) => w >= 1 && w < reader && w % 5 !== 0))).toBe(true);
    expect(await (await fetch(`${e.url}/metrics`)).text()).toMatch(/^kvcanary_engine_foreign_page_reads_total [1-9]\d*$/m);
    // Prefill transferred one token (the placeholder); decode read the whole reservation.
    // (Less what decode's prefix cache already held: the planters share their first blocks.)
    const s = e.engine.stats();
    expect(s.transfer?.tokensLanded).toBe(p.tries! * (4 * 2664 + 1) - (s.prefixCache?.cachedTokensTotal ?? 0));
  });

  it('measures each defense alone on top of incident, and the README table says exactly that', async () => {
    const rows: string[] = [];
    const results = new Map<string, Probe>();
    for (const defense of ['(none)', ...DEFENSES]) {
      const e = await startEngine({ preset: 'incident', scale: 64, defenses: defense === '(none)' ? [] : [defense], log: () => {} });
      running.push(e);
      const p = await plantThenOverLimitTries(e, 6);
      if (defense !== '(none)') p.blocks = await blocksOf(e, defense);
      results.set(defense, p);
      rows.push(row(defense, p));
      await e.close();
    }
    expect(outcome(results.get('(none)')!)).toBe('does not stop it');
    expect(outcome(results.get('reject-before-bootstrap')!)).toBe('stops the leak: a clean 4xx before bootstrap');
    expect(outcome(results.get('page-tags')!)).toBe('fails closed (5xx), nothing foreign read');
    expect(outcome(results.get('zero-on-release')!)).toBe('removes the content, not the 200');
    expect(outcome(results.get('deferred-release')!)).toBe('does not stop it');
    expect(outcome(results.get('transfer-integrity')!)).toBe('does not stop it');
    // A defense that stops the incident counts what it stopped; one that does not act here counts nothing.
    expect(results.get('reject-before-bootstrap')!.blocks).toBe(1);
    expect(results.get('page-tags')!.blocks).toBe(1);
    expect(results.get('zero-on-release')!.blocks).toBeGreaterThan(0);
    for (const d of ['deferred-release', 'transfer-integrity', 'salted-prefix-cache', 'strong-prefix-hash', 'restore-fencing', 'salted-host-tier']) expect(results.get(d)!.blocks).toBe(0);
    const readme = readFileSync(new URL('../../engine-under-test/README.md', import.meta.url), 'utf8');
    const table = /<!-- incident-defenses:start -->\n([\s\S]*?)<!-- incident-defenses:end -->/.exec(readme)?.[1] ?? '';
    const documented = table.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| defense') && !l.startsWith('|---'));
    expect(documented).toEqual(rows);
  }, 180_000);
});
