/**
 * The prefix cache in the disaggregated mode, through HTTP: it lives on decode's pool, a hit bootstraps
 * prefill past the shared pages (prefill computes and transfers only the rest), salts keep tenants apart,
 * `page-tags` accepts legitimately shared pages in `hardened`, and `prefix-cache-ignores-salt` on top of
 * `incident` shares across salts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import { countPromptTokens } from '../../engine-under-test/src/tokenizer.js';

let running: RunningEngine[] = [];
afterEach(async () => {
  await Promise.all(running.map((r) => r.close()));
  running = [];
});

async function start(options: StartEngineOptions): Promise<RunningEngine> {
  const e = await startEngine({ scale: 64, log: () => {}, ...options });
  running.push(e);
  return e;
}

async function complete(e: RunningEngine, body: Record<string, unknown>): Promise<{ status: number; cached: number | undefined }> {
  const res = await fetch(`${e.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ max_tokens: 8, temperature: 0, ...body }) });
  const json = (await res.json()) as { usage?: { prompt_tokens_details?: { cached_tokens: number } } };
  return { status: res.status, cached: json.usage?.prompt_tokens_details?.cached_tokens };
}

const doc = (seed: string, n = 40): string =>
  Array.from({ length: n }, (_, i) => `${seed} paragraph ${i} reports figures for region ${(i * 7919) % 97}.`).join(' ');

async function drained(e: RunningEngine): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const p = e.engine.stats().pools;
    if (p !== undefined && p.decode.freePages === p.decode.numPages && p.prefill.freePages === p.prefill.numPages) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error('pages were not returned');
}

describe('prefix cache, disaggregated', () => {
  for (const preset of ['incident', 'hardened']) {
    it(`${preset}: a same-salt repeat skips prefill of the shared pages; another salt shares nothing`, async () => {
      const e = await start({ preset });
      const prompt = doc(preset);
      const tokens = countPromptTokens(prompt);
      const cacheable = Math.floor((tokens - 1) / 16) * 16;
      const prefilled = () => e.engine.stats().promptTokensTotal;
      let before = prefilled();
      expect(await complete(e, { prompt, cache_salt: 'a' })).toEqual({ status: 200, cached: 0 });
      expect(prefilled() - before).toBe(tokens);
      before = prefilled();
      expect(await complete(e, { prompt, cache_salt: 'a' })).toEqual({ status: 200, cached: cacheable });
      expect(prefilled() - before).toBe(tokens - cacheable);
      expect(await complete(e, { prompt, cache_salt: 'b' })).toEqual({ status: 200, cached: 0 });
      await drained(e);
      const s = e.engine.stats();
      expect(s.foreignPageReadsTotal).toBe(0);
      expect(s.defended?.pageTagMismatches).toBe(0);
      expect(s.prefixCache).toMatchObject({ hitRequests: 1, cachedTokensTotal: cacheable });
      expect(e.engine.checkInvariants()).toEqual([]);
    });
  }

  it('incident + prefix-cache-ignores-salt: another salt is served the cached pages and the counter rises', async () => {
    const e = await start({ preset: 'incident', faults: ['prefix-cache-ignores-salt'] });
    const prompt = doc('leaky');
    await complete(e, { prompt, cache_salt: 'a' });
    const r = await complete(e, { prompt, cache_salt: 'b' });
    expect(r.cached).toBeGreaterThan(0);
    expect(e.engine.stats().foreignPageReadsTotal).toBeGreaterThan(0);
  });
});
