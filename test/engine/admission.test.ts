import { describe, expect, it } from 'vitest';
import { checkAdmission } from '../../engine-under-test/src/admission.js';
import { resolveEngineConfig } from '../../engine-under-test/src/config.js';
import { createSingleNodeEngine } from '../../engine-under-test/src/single-node.js';
import type { GenerationRequest } from '../../engine-under-test/src/engine.js';
import { encodePrompt } from '../../engine-under-test/src/tokenizer.js';

const sampling = { temperature: 0, topP: 1, seed: 0 };

describe('admission rules', () => {
  const limits = { contextTokens: 16_384, poolTokens: 10_645 };

  it('names the context limit and the counts, in the wording clients know', () => {
    expect(checkAdmission({ promptTokens: 16_990, maxTokens: 10, promptKind: 'messages' }, { contextTokens: 16_384, poolTokens: 20_000 })).toEqual({
      code: 'context_length_exceeded',
      param: 'messages',
      limit: 16_384,
      count: 17_000,
      message:
        "This model's maximum context length is 16384 tokens. However, you requested 17000 tokens " +
        '(16990 in the messages, 10 in the completion). Please reduce the length of the messages or completion.',
    });
  });

  it('checks the pool independently of the context limit', () => {
    expect(checkAdmission({ promptTokens: 12_000, maxTokens: 16, promptKind: 'prompt' }, limits)).toMatchObject({
      code: 'kv_pool_capacity_exceeded',
      message: 'The prompt (12000 tokens) exceeds the KV cache pool capacity (10645 tokens).',
    });
    expect(checkAdmission({ promptTokens: 10_600, maxTokens: 100, promptKind: 'prompt' }, limits)).toMatchObject({
      code: 'kv_pool_capacity_exceeded',
      message: 'The prompt (10600 tokens) plus max_tokens (100) exceeds the KV cache pool capacity (10645 tokens).',
    });
  });

  it('accepts exactly at the limits', () => {
    expect(checkAdmission({ promptTokens: 10_000, maxTokens: 645, promptKind: 'prompt' }, limits)).toBeUndefined();
    expect(checkAdmission({ promptTokens: 16_000, maxTokens: 384, promptKind: 'prompt' }, { contextTokens: 16_384, poolTokens: 16_384 })).toBeUndefined();
  });
});

describe('admission in the engine', () => {
  function engineWith(contextTokens: number, poolTokens: number) {
    return createSingleNodeEngine(resolveEngineConfig({ contextTokens, poolTokens }));
  }
  const request = (promptLength: number, maxTokens: number): GenerationRequest => ({
    promptTokens: encodePrompt('a'.repeat(promptLength - 1)),
    maxTokens,
    sampling,
  });

  it('allocates no page for a rejected request, over the context limit or over the pool', async () => {
    const engine = engineWith(4096, 2048);
    const before = engine.stats().pool;
    for (const [prompt, max] of [
      [5000, 16], // over context
      [4000, 200], // prompt fits the context, prompt + max_tokens does not
      [3000, 16], // under the context limit, over the pool (the incident's band)
      [2040, 16], // prompt fits the pool, prompt + max_tokens does not
    ] as const) {
      const result = engine.submit(request(prompt, max));
      expect(result.ok).toBe(false);
      await new Promise((r) => setImmediate(r)); // let the scheduler run, should anything have been queued
      const after = engine.stats().pool;
      expect(after.allocatedPagesTotal).toBe(before.allocatedPagesTotal);
      expect(after.freePages).toBe(before.freePages);
    }
    expect(engine.stats().rejectedTotal).toEqual({ context_length_exceeded: 2, kv_pool_capacity_exceeded: 2 });
    expect(engine.stats().waiting + engine.stats().running).toBe(0);
    await engine.close();
  });

  it('admits a request that fits both limits and allocates its whole reservation up front', async () => {
    const engine = engineWith(4096, 2048);
    const result = engine.submit(request(1000, 24));
    if (!result.ok) throw new Error('expected admission');
    const iterator = result.request.events[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.value).toMatchObject({ type: 'token' });
    expect(engine.stats().pool.usedPages).toBe(Math.ceil(1024 / 16));
    for (let r = await iterator.next(); r.done !== true; r = await iterator.next()) {
      /* drain */
    }
    expect(engine.stats().pool.usedPages).toBe(0);
    await engine.close();
  });
});
