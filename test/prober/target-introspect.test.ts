import { afterEach, describe, expect, it } from 'vitest';
import { createTargetClient, type TargetClient } from '../../prober/src/probe/target/client.js';
import { introspect } from '../../prober/src/probe/target/introspect.js';
import { json, llamacppHandler, sglangHandler, startServer, toyTokens, vllmHandler, type FakeServer, type Handler } from './target-fakes.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

async function target(handler: Handler, base = ''): Promise<{ s: FakeServer; c: TargetClient }> {
  const s = await startServer(handler);
  open.push(s);
  const c = createTargetClient({ baseUrl: s.url + base, timeoutMs: 5000 });
  open.push(c);
  return { s, c };
}

describe('introspect', () => {
  it('vLLM: context from /v1/models, pool from /metrics, /tokenize {model, prompt}', async () => {
    const { s, c } = await target(vllmHandler({ contextTokens: 4096, poolTokens: 16_000 }), '/v1');
    const info = await introspect(c);
    expect(info).toMatchObject({ models: ['meta-llama/Llama-3.1-8B'], contextTokens: 4096, poolTokens: 16_000, pageSize: 16, dialect: 'vllm', reachable: true });
    expect(await info.tokenize!('hello world')).toBe(toyTokens('hello world'));
    expect(await info.tokenizeIds!('hello world')).toEqual(Array.from({ length: toyTokens('hello world') }, (_, i) => i));
    const tokenizeCall = s.seen.find((r) => r.url === '/tokenize');
    expect(JSON.parse(tokenizeCall!.body)).toMatchObject({ model: 'meta-llama/Llama-3.1-8B' });
    // A streamed source is tokenized without being materialised, and the count read from the response.
    const big = { chunks: () => Array.from({ length: 16 }, () => 'w'.repeat(62_500)) };
    expect(await info.tokenize!(big)).toBe(toyTokens('w'.repeat(1_000_000)));
    expect(info.notes.join('\n')).toMatch(/num_gpu_blocks 1000 × block_size 16 = 16000 tokens/);
  });

  it('SGLang: context_length null falls back to max_model_len; pool and input cap from internal_states', async () => {
    const { c } = await target(sglangHandler({ contextTokens: 8192, poolTokens: 6000 }));
    const info = await introspect(c);
    expect(info).toMatchObject({ models: ['Qwen/Qwen3-8B'], contextTokens: 8192, poolTokens: 6000, maxInputTokens: 5999, pageSize: 1, dialect: 'sglang' });
    expect(info.tokenize).toBeUndefined();
    expect(info.notes.join('\n')).toMatch(/POST \/tokenize .*HTTP 404/);
  });

  it('SGLang PD: the smallest pool of prefill and decode binds, each is noted', async () => {
    const { c } = await target(sglangHandler({ contextTokens: 1_048_576, poolTokens: 681_280, pd: true }));
    const info = await introspect(c);
    expect(info).toMatchObject({ contextTokens: 1_048_576, poolTokens: 681_280, dialect: 'sglang' });
    const notes = info.notes.join('\n');
    expect(notes).toMatch(/prefill\[0\]\): .*max_total_num_tokens 681280/);
    expect(notes).toMatch(/decode\[0\]\): .*max_total_num_tokens 2043840/);
  });

  it('SGLang before /get_server_info existed: falls back to /server_info', async () => {
    const { c } = await target(sglangHandler({ poolTokens: 5000, legacyInfoPath: true }));
    const info = await introspect(c);
    expect(info.poolTokens).toBe(5000);
    expect(info.notes.join('\n')).toMatch(/GET \/get_server_info: HTTP 404[\s\S]*GET \/server_info \(server\)/);
  });

  it('llama.cpp: n_ctx from /v1/models meta and /props, /tokenize {content}, no pool', async () => {
    const { s, c } = await target(llamacppHandler({ contextTokens: 2048 }));
    const info = await introspect(c);
    expect(info).toMatchObject({ models: ['qwen2.5-7b-instruct-q4_k_m.gguf'], contextTokens: 2048, dialect: 'llamacpp' });
    expect(info.poolTokens).toBeUndefined();
    expect(await info.tokenize!('some text to count')).toBe(toyTokens('some text to count'));
    expect((await info.tokenizeIds!('some text to count'))?.[0]).toBe(1000);
    expect(JSON.parse(s.seen.filter((r) => r.url === '/tokenize').at(-1)!.body)).toHaveProperty('content');
    // A million characters: a 250,001-element tokens array, counted as it streams.
    expect(await info.tokenize!({ chunks: () => Array.from({ length: 10 }, () => 'v'.repeat(100_000)) })).toBe(toyTokens('v'.repeat(1_000_000)));
    const notes = info.notes.join('\n');
    expect(notes).toMatch(/n_ctx 2048 per slot, 4 slot\(s\)/);
    expect(notes).toMatch(/n_ctx_train 32768 is the model's training context/);
  });

  it('an endpoint with nothing but chat: everything optional is absent, nothing throws', async () => {
    const { c } = await target((q, res) => {
      if (q.url === '/v1/chat/completions') return json(res, 200, { choices: [{ index: 0, message: { content: 'hi' } }] });
      res.writeHead(404);
      res.end();
    });
    const info = await introspect(c);
    expect(info).toMatchObject({ models: [], dialect: 'unknown', reachable: true });
    expect(info.contextTokens).toBeUndefined();
    expect(info.poolTokens).toBeUndefined();
    expect(info.tokenize).toBeUndefined();
    expect(info.notes.join('\n')).toMatch(/GET \/v1\/models: HTTP 404/);
  });

  it('odd shapes, hangs and HTML are noted, not trusted', async () => {
    const { c } = await target((q, res) => {
      if (q.url === '/v1/models') return json(res, 200, { data: [{ id: 'm', max_model_len: 'lots' }, 'junk'] });
      if (q.url === '/props') return; // hangs
      if (q.url === '/get_server_info') {
        res.writeHead(200, { 'content-type': 'text/html' });
        return void res.end('<html>sign in</html>');
      }
      if (q.url === '/tokenize') return json(res, 200, { tokens: [] }); // answers anything with zero tokens
      res.writeHead(404);
      res.end();
    });
    const info = await introspect(c, { timeoutMs: 300 });
    expect(info).toMatchObject({ models: ['m'], dialect: 'unknown' });
    expect(info.contextTokens).toBeUndefined();
    expect(info.tokenize).toBeUndefined();
    const notes = info.notes.join('\n');
    expect(notes).toMatch(/GET \/props: timeout/);
    expect(notes).toMatch(/GET \/get_server_info: not an object|GET \/get_server_info: HTTP|malformed/);
    expect(notes).toMatch(/counts not sane|no count/);
  });

  it('an unreachable endpoint: reachable false, no throw', async () => {
    const s = await startServer(() => undefined);
    await s.close();
    const c = createTargetClient({ baseUrl: s.url, timeoutMs: 1000 });
    open.push(c);
    const info = await introspect(c);
    expect(info).toMatchObject({ reachable: false, models: [], dialect: 'unknown' });
  });

  it('an endpoint that mimics two engines (like the bundled one) stays unknown, with its limits read', async () => {
    const { c } = await target((q, res, body) => {
      if (q.url === '/v1/models') return json(res, 200, { object: 'list', data: [{ id: 'kvcanary-engine', object: 'model', owned_by: 'kvcanary', max_model_len: 16_384 }] });
      if (q.url === '/get_server_info') return json(res, 200, { model_path: 'kvcanary-engine', context_length: 16_384, max_total_num_tokens: 10_645, page_size: 16 });
      if (q.url === '/tokenize') {
        const prompt = (JSON.parse(body) as { prompt?: string }).prompt;
        if (prompt === undefined) return json(res, 400, { error: { message: 'prompt required' } });
        return json(res, 200, { count: toyTokens(prompt), max_model_len: 16_384, tokens: [] });
      }
      res.writeHead(404);
      res.end();
    });
    const info = await introspect(c, { model: 'kvcanary-engine' });
    expect(info).toMatchObject({ contextTokens: 16_384, poolTokens: 10_645, pageSize: 16, dialect: 'unknown' });
    expect(await info.tokenize!('abcdefgh')).toBe(toyTokens('abcdefgh'));
  });
});
