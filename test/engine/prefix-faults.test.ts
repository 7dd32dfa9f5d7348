/**
 * The prefix cache's faults, through HTTP as a client drives them, each against its defense (and against
 * the correct default) under the same workload. Ground truth: the foreign-read counter, which does not
 * count same-salt, same-token reuse, and text of another request in the answer. With a fault and its
 * defense both on, the faulty key still matches and the defense's own check refuses the entry: its count in
 * `kvcanary_engine_defense_blocks_total{defense}` rises while the fault's effect stays at 0.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import { encodePrompt } from '../../engine-under-test/src/tokenizer.js';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const marker = (): string => `kvcanary-${Array.from(randomBytes(26), (b) => BASE32[b % 32]).join('')}`;

let running: RunningEngine[] = [];
afterEach(async () => {
  await Promise.all(running.map((r) => r.close()));
  running = [];
});

async function start(options: StartEngineOptions): Promise<RunningEngine> {
  const e = await startEngine({ preset: 'single', scale: 64, log: () => {}, ...options });
  running.push(e);
  return e;
}

/** `kvcanary_engine_defense_blocks_total{defense}` as GET /metrics reports it. */
async function blocks(e: RunningEngine, defense: string): Promise<number> {
  const text = await (await fetch(`${e.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`kvcanary_engine_defense_blocks_total{defense="${defense}"}`));
  expect(line, `no defense_blocks line for ${defense}`).toBeDefined();
  return Number(line!.split(' ').pop());
}

async function complete(e: RunningEngine, body: Record<string, unknown>): Promise<{ text: string; cached: number }> {
  const res = await fetch(`${e.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ max_tokens: 24, temperature: 0, ...body }),
  });
  expect(res.status).toBe(200);
  const json = (await res.json()) as { choices: { text: string }[]; usage: { prompt_tokens_details?: { cached_tokens: number } } };
  return { text: json.choices[0]?.text ?? '', cached: json.usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

/** 12-character fragments of the markers' random parts: a hit in a reader's text is another request's text. */
function fragmentsOf(markers: string[]): Set<string> {
  const out = new Set<string>();
  for (const m of markers) for (let j = 9; j + 12 <= m.length; j++) out.add(m.slice(j, j + 12));
  return out;
}
const shows = (text: string, fragments: Set<string>): boolean => {
  for (let i = 0; i + 12 <= text.length; i++) if (fragments.has(text.slice(i, i + 12))) return true;
  return false;
};

interface Outcome {
  cached: number;
  foreignReads: number;
  foreignText: boolean;
}

/** Tenant A plants a marker-bearing prompt; tenant B (another salt) sends the same prompt. */
async function crossSalt(e: RunningEngine): Promise<Outcome> {
  const markers = Array.from({ length: 40 }, marker);
  const prompt = `Keep these reference codes on file: ${markers.join(' ')}\nQuote one reference code: kvcanary-`;
  await complete(e, { prompt, cache_salt: 'tenant-a' });
  const before = e.engine.stats().foreignPageReadsTotal;
  const b = await complete(e, { prompt, cache_salt: 'tenant-b' });
  return { cached: b.cached, foreignReads: e.engine.stats().foreignPageReadsTotal - before, foreignText: false };
}

/**
 * The same salt sends its prompt again: a legitimate hit, which salted-prefix-cache must not refuse. (The
 * prompt starts with its own marker: with the unsalted key, a block another tenant registered first stays
 * that tenant's, and the check refuses it to everyone else.)
 */
async function sameSaltCached(e: RunningEngine): Promise<number> {
  const prompt = `${marker()} Keep these reference codes on file: ${Array.from({ length: 40 }, marker).join(' ')}\nQuote one: kvcanary-`;
  await complete(e, { prompt, cache_salt: 'tenant-c', max_tokens: 1 });
  return (await complete(e, { prompt, cache_salt: 'tenant-c', max_tokens: 1 })).cached;
}

/**
 * weak-prefix-hash: B sends A's marker blocks with each 16-token block's tokens reversed (same multiset,
 * different prompt), then asks for a code. A hit serves A's KV, in A's order, so B's answer continues one of
 * A's markers, which B never sent in that order.
 */
async function permutedBlocks(e: RunningEngine): Promise<Outcome> {
  const markers = Array.from({ length: 40 }, marker);
  const a = encodePrompt(`Keep these reference codes on file: ${markers.join(' ')}`);
  const blocks = Math.floor(a.length / 16);
  const planted = Array.from(a.subarray(0, blocks * 16));
  await complete(e, { prompt: [...planted, ...encodePrompt('\nNothing else.').subarray(1)], max_tokens: 1 });
  const shuffled: number[] = [];
  for (let b = 0; b < blocks; b++) {
    const block = planted.slice(b * 16, b * 16 + 16);
    // Keep BOS first in block 0; reverse the rest of each block.
    shuffled.push(...(b === 0 ? [block[0] as number, ...block.slice(1).reverse()] : block.reverse()));
  }
  const before = e.engine.stats().foreignPageReadsTotal;
  const question = Array.from(encodePrompt('\nQuote one reference code: kvcanary-').subarray(1));
  const r = await complete(e, { prompt: [...shuffled, ...question] });
  return { cached: r.cached, foreignReads: e.engine.stats().foreignPageReadsTotal - before, foreignText: shows(r.text, fragmentsOf(markers)) };
}

/**
 * prompt-cache-restore-race: W caches a shared preamble; planter C then takes most of the pool (the
 * preamble's free, cached pages included) and writes its markers there; B sends W's preamble and asks for a
 * code. A stale entry restores C's pages into B.
 */
async function staleRestore(e: RunningEngine): Promise<Outcome> {
  const preamble = 'You are a helpful assistant for the northern region. Answer briefly and cite figures. '.repeat(4);
  await complete(e, { prompt: `${preamble}Hello.`, max_tokens: 1 });
  // ~2,020 tokens: with a FIFO free list C takes every never-used page, then all of the preamble's.
  const markers = Array.from({ length: 55 }, marker);
  await complete(e, { prompt: `Keep these reference codes on file: ${markers.join(' ')}\nDone.`, max_tokens: 1 });
  const before = e.engine.stats().foreignPageReadsTotal;
  const r = await complete(e, { prompt: `${preamble}\nQuote one reference code: kvcanary-` });
  return { cached: r.cached, foreignReads: e.engine.stats().foreignPageReadsTotal - before, foreignText: shows(r.text, fragmentsOf(markers)) };
}

describe('prefix-cache faults and their defenses', () => {
  it('prefix-cache-ignores-salt: another salt gets the cached pages and reads them; salted-prefix-cache stops it', async () => {
    const leaky = await crossSalt(await start({ faults: ['prefix-cache-ignores-salt'] }));
    expect(leaky.cached).toBeGreaterThan(0);
    expect(leaky.foreignReads).toBeGreaterThan(0);
    expect(await blocks(running[0]!, 'salted-prefix-cache')).toBe(0);
    // Both on: the unsalted key matches tenant A's entry, and the salt check refuses it.
    const defended = await start({ faults: ['prefix-cache-ignores-salt'], defenses: ['salted-prefix-cache'] });
    expect(await crossSalt(defended)).toEqual({ cached: 0, foreignReads: 0, foreignText: false });
    expect(await blocks(defended, 'salted-prefix-cache')).toBe(1);
    // The same tenant still shares: the check refuses other salts only.
    expect(await sameSaltCached(defended)).toBeGreaterThan(0);
    expect(await crossSalt(await start({}))).toEqual({ cached: 0, foreignReads: 0, foreignText: false });
  });

  it('weak-prefix-hash: a permuted block collides and serves another prompt\'s KV and text; strong-prefix-hash stops it', async () => {
    // Every collision reads A's pages (the counter); the answer shows A's text in 59 of 60 trials with fresh
    // random markers (once the copy wandered off into the reversed blocks). Three trials: all read, one shows.
    const trials: Outcome[] = [];
    for (let i = 0; i < 3 && !trials.some((t) => t.foreignText); i++) trials.push(await permutedBlocks(await start({ faults: ['weak-prefix-hash'] })));
    for (const leaky of trials) {
      expect(leaky.cached).toBeGreaterThan(0);
      expect(leaky.foreignReads).toBeGreaterThan(0);
    }
    expect(trials.some((t) => t.foreignText)).toBe(true);
    // Both on: the permuted block's weak key collides, and the token-by-token confirmation refuses it.
    const defended = await start({ faults: ['weak-prefix-hash'], defenses: ['strong-prefix-hash'] });
    expect(await permutedBlocks(defended)).toEqual({ cached: 0, foreignReads: 0, foreignText: false });
    expect(await blocks(defended, 'strong-prefix-hash')).toBe(1);
    expect(await permutedBlocks(await start({}))).toEqual({ cached: 0, foreignReads: 0, foreignText: false });
  });

  it('prompt-cache-restore-race: a stale entry restores pages another request wrote; restore-fencing stops it', async () => {
    const small = { poolTokens: 2048, contextTokens: 2048 };
    // Every trial restores foreign pages (the counter); the answer shows their text in 99 of 100
    // (engine-under-test/bench/results/prefix-fault-rates.json). Up to three trials on fresh engines: all read, one shows.
    const trials: Outcome[] = [];
    for (let i = 0; i < 3 && !trials.some((t) => t.foreignText); i++) trials.push(await staleRestore(await start({ ...small, faults: ['prompt-cache-restore-race'] })));
    for (const leaky of trials) {
      expect(leaky.cached).toBeGreaterThan(0);
      expect(leaky.foreignReads).toBeGreaterThan(0);
    }
    expect(trials.some((t) => t.foreignText)).toBe(true);
    const fenced = await start({ ...small, faults: ['prompt-cache-restore-race'], defenses: ['restore-fencing'] });
    expect(await staleRestore(fenced)).toEqual({ cached: 0, foreignReads: 0, foreignText: false });
    expect(fenced.engine.stats().prefixCache?.staleRestoresRefused).toBeGreaterThan(0);
    expect(await blocks(fenced, 'restore-fencing')).toBe(1);
    expect(await staleRestore(await start(small))).toEqual({ cached: 0, foreignReads: 0, foreignText: false });
  });

  it('lists the faults and defenses at /debug/config, and refuses them with the prefix cache off', async () => {
    const e = await start({ faults: ['weak-prefix-hash'], defenses: ['restore-fencing'] });
    expect(await (await fetch(`${e.url}/debug/config`)).json()).toMatchObject({ faults: ['weak-prefix-hash'], defenses: ['restore-fencing'], prefix_cache: true });
    await expect(startEngine({ preset: 'single', faults: ['weak-prefix-hash'], prefixCache: false })).rejects.toThrow(/cannot be named with the prefix cache off/);
  });
});
