/**
 * The prefix cache, through HTTP: cached_tokens on a same-salt repeat and none across salts, the prefill
 * it skips (the engine's own prefill token counter), the openai client reading cached_tokens, reference
 * counts (no page freed while a table holds it; every page back on the free list once the cache is
 * flushed), LRU eviction under pool pressure, and `--no-prefix-cache`.
 */
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { KvPool } from '../../engine-under-test/src/kv-pool.js';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import { countPromptTokens } from '../../engine-under-test/src/tokenizer.js';

let running: RunningEngine[] = [];
afterEach(async () => {
  await Promise.all(running.map((r) => r.close()));
  running = [];
});

async function start(options: StartEngineOptions = {}): Promise<RunningEngine> {
  const e = await startEngine({ preset: 'single', scale: 64, log: () => {}, ...options });
  running.push(e);
  return e;
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

async function complete(e: RunningEngine, body: Record<string, unknown>): Promise<{ text: string; usage: Usage }> {
  const res = await fetch(`${e.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ max_tokens: 8, temperature: 0, ...body }),
  });
  expect(res.status).toBe(200);
  const json = (await res.json()) as { choices: { text: string }[]; usage: Usage };
  return { text: json.choices[0]?.text ?? '', usage: json.usage };
}

const doc = (seed: string, n = 120): string =>
  Array.from({ length: n }, (_, i) => `${seed} paragraph ${i} reports figures for region ${(i * 7919) % 97}.`).join(' ');

describe('prefix cache', () => {
  it('serves a same-salt repeat from the cache, skips its prefill, and shares nothing across salts', async () => {
    const e = await start();
    const prompt = doc('Alpha', 40); // ~2,000 tokens: four of them fit the pool without evicting
    const tokens = countPromptTokens(prompt);
    const cacheable = Math.floor((tokens - 1) / 16) * 16;
    const prefilled = () => e.engine.stats().promptTokensTotal;

    let before = prefilled();
    const first = await complete(e, { prompt, cache_salt: 'tenant-a' });
    expect(first.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    expect(prefilled() - before).toBe(tokens);

    before = prefilled();
    const repeat = await complete(e, { prompt, cache_salt: 'tenant-a' });
    expect(repeat.usage.prompt_tokens_details).toEqual({ cached_tokens: cacheable });
    expect(prefilled() - before).toBe(tokens - cacheable); // only the tail was computed
    expect(repeat.text).toBe(first.text); // same KV, same answer

    before = prefilled();
    const other = await complete(e, { prompt, cache_salt: 'tenant-b' });
    expect(other.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    expect(prefilled() - before).toBe(tokens);
    const unsalted = await complete(e, { prompt });
    expect(unsalted.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });

    // Streamed usage carries it too.
    const res = await fetch(`${e.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt, cache_salt: 'tenant-a', max_tokens: 4, stream: true, stream_options: { include_usage: true } }),
    });
    const events = (await res.text()).split('\n\n').filter((b) => b.startsWith('data: {')).map((b) => JSON.parse(b.slice(6)) as { usage?: Usage | null });
    expect(events.at(-1)?.usage?.prompt_tokens_details).toEqual({ cached_tokens: cacheable });

    const s = e.engine.stats();
    expect(s.foreignPageReadsTotal).toBe(0); // same-salt reuse is legitimate
    expect(s.prefixCache).toMatchObject({ hitRequests: 2, cachedTokensTotal: 2 * cacheable });
    const metrics = await (await fetch(`${e.url}/metrics`)).text();
    expect(metrics).toContain(`kvcanary_engine_prefix_cache_cached_tokens_total ${2 * cacheable}`);
    expect(await (await fetch(`${e.url}/debug/config`)).json()).toMatchObject({ prefix_cache: true, faults: [], defenses: [] });
  });

  it('reports cached_tokens to the official openai client on chat completions', async () => {
    const e = await start();
    const client = new OpenAI({ baseURL: `${e.url}/v1`, apiKey: 'sk-test-not-a-secret', maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: doc('Chat') }];
    const body = { model: 'kvcanary-engine', messages, max_completion_tokens: 4, temperature: 0, cache_salt: 's1' } as OpenAI.ChatCompletionCreateParamsNonStreaming;
    const cold = await client.chat.completions.create(body);
    const warm = await client.chat.completions.create(body);
    expect(cold.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
    expect(warm.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThan(cold.usage!.prompt_tokens - 17);
    expect(warm.choices[0]?.message.content).toBe(cold.choices[0]?.message.content);
    const other = await client.chat.completions.create({ ...body, cache_salt: 's2' } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(other.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
  });

  it('rejects a cache_salt that is not a non-empty string', async () => {
    const e = await start();
    const res = await fetch(`${e.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'x', cache_salt: 42 }) });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { param: 'cache_salt', message: expect.stringContaining('`cache_salt` must be a non-empty string') } });
  });

  it('shares pages between concurrent requests by reference count and returns every page once flushed', async () => {
    const e = await start();
    const prompt = doc('Shared', 200);
    await complete(e, { prompt }); // warm
    const streams = await Promise.all(
      Array.from({ length: 6 }, () => complete(e, { prompt: prompt + ' and then', max_tokens: 24 })),
    );
    for (const r of streams) expect(r.usage.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    expect(e.engine.stats().pool.sharedPagesTotal).toBeGreaterThan(0);
    expect(e.engine.checkInvariants()).toEqual([]);
    // Cached pages are free pages whose keys are kept: nothing is held once requests end.
    expect(e.engine.stats().pool.usedPages).toBe(0);
    expect(e.engine.stats().prefixCache!.entries).toBeGreaterThan(0);
    expect(e.engine.flushPrefixCache!()).toBeGreaterThan(0);
    const s = e.engine.stats();
    expect(s.prefixCache!.entries).toBe(0);
    expect(s.pool.freePages).toBe(s.pool.numPages);
    expect((await complete(e, { prompt })).usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    expect(e.engine.stats().foreignPageReadsTotal).toBe(0);
  });

  it('evicts least recently released cached pages when the pool needs them', async () => {
    const e = await start({ poolTokens: 2048, contextTokens: 2048 });
    const a = doc('Old', 25); // ~1,300 tokens
    await complete(e, { prompt: a });
    expect((await complete(e, { prompt: a })).usage.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    await complete(e, { prompt: doc('New', 30) }); // needs most of the pool: evicts a's pages
    expect(e.engine.stats().prefixCache!.evictions).toBeGreaterThan(0);
    expect((await complete(e, { prompt: a })).usage.prompt_tokens_details!.cached_tokens).toBe(0);
    expect(e.engine.checkInvariants()).toEqual([]);
  });

  it('is off with --no-prefix-cache: no cached_tokens field, every prompt token prefilled', async () => {
    const e = await start({ prefixCache: false });
    const prompt = doc('Off');
    await complete(e, { prompt, cache_salt: 'x' });
    const before = e.engine.stats().promptTokensTotal;
    const again = await complete(e, { prompt, cache_salt: 'x' });
    expect(again.usage.prompt_tokens_details).toBeUndefined();
    expect(e.engine.stats().promptTokensTotal - before).toBe(countPromptTokens(prompt));
    expect(await (await fetch(`${e.url}/debug/config`)).json()).toMatchObject({ prefix_cache: false });
  });
});

describe('KvPool sharing', () => {
  it('frees a shared page only when its last holder releases it', () => {
    const pool = new KvPool({ numPages: 4, pageSize: 16 });
    const a = pool.createTable(1);
    const pages = pool.allocate(a, 2);
    if (!pages.ok) throw new Error('allocation failed');
    const b = pool.createTable(2);
    pool.share(b, [pages.pages[0] as number]);
    expect(pool.checkInvariants()).toEqual([]);
    pool.release(a);
    expect(pool.isFree(pages.pages[0] as number)).toBe(false); // b still holds it
    expect(pool.isFree(pages.pages[1] as number)).toBe(true);
    expect(pool.checkInvariants()).toEqual([]);
    pool.release(b);
    expect(pool.freePages).toBe(4);
    // A free page can be revived by a cache hit: it comes off the free list.
    const c = pool.createTable(3);
    pool.share(c, [pages.pages[0] as number]);
    expect(pool.freePages).toBe(3);
    expect(pool.checkInvariants()).toEqual([]);
    pool.release(c);
    expect(pool.checkInvariants()).toEqual([]);
  });

  it('does not let a cache hit take a page parked for deferred release', () => {
    const pool = new KvPool({ numPages: 2, pageSize: 16, deferRelease: true });
    const a = pool.createTable(1);
    const got = pool.allocate(a, 1);
    if (!got.ok) throw new Error('allocation failed');
    const page = got.pages[0] as number;
    Atomics.add(pool.memory.leases, page, 1); // a transfer may still land
    pool.release(a);
    expect(pool.canShare(page)).toBe(false);
    Atomics.sub(pool.memory.leases, page, 1);
    pool.reclaim();
    expect(pool.canShare(page)).toBe(true);
    expect(pool.checkInvariants()).toEqual([]);
  });
});
