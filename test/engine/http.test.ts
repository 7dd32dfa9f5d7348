import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import { countPromptTokens, renderChat } from '../../engine-under-test/src/tokenizer.js';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
function random(n: number, alphabet = BASE32): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[(bytes[i] as number) % alphabet.length];
  return s;
}

const MODEL = 'kvcanary-engine';
let running: RunningEngine[] = [];

async function start(options: StartEngineOptions = {}): Promise<RunningEngine> {
  const r = await startEngine({ contextTokens: 16_384, poolTokens: 16_640, ...options });
  running.push(r);
  return r;
}

beforeEach(() => {
  running = [];
});
afterEach(async () => {
  await Promise.all(running.map((r) => r.close()));
});

async function post(base: string, path: string, body: unknown, init: RequestInit = {}): Promise<Response> {
  return fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...init,
  });
}

async function json(res: Response): Promise<Record<string, any>> {
  return (await res.json()) as Record<string, any>;
}

/** SSE `data:` payloads of a whole response. */
async function sse(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((block) => block.length > 0)
    .map((block) => {
      expect(block.startsWith('data: ')).toBe(true);
      return block.slice('data: '.length);
    });
}

function planted(size: number): { prompt: string; rest: string } {
  const span = `kvcanary-${random(26)}`;
  const filler = random(size, '0123456789abcdef');
  return { prompt: `${filler.slice(0, size / 2)} ${span} ${filler.slice(size / 2)} ${span.slice(0, 12)}`, rest: span.slice(12) };
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000 && !condition(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!condition()) throw new Error(`never happened: ${what}`);
}

describe('engine HTTP API', () => {
  it('lists the model with its context limit', async () => {
    const e = await start();
    const body = await json(await fetch(`${e.url}/v1/models`));
    expect(body).toMatchObject({ object: 'list', data: [{ id: MODEL, object: 'model', owned_by: 'kvcanary', max_model_len: 16_384 }] });
    expect(typeof body['data'][0].created).toBe('number');
  });

  it('completes a prompt by copying, with exact usage, and streams the same text', async () => {
    const e = await start();
    const { prompt, rest } = planted(4000);
    const res = await post(e.url, '/v1/completions', { model: MODEL, prompt, max_tokens: 23, temperature: 0 });
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body).toMatchObject({
      object: 'text_completion',
      model: MODEL,
      choices: [{ index: 0, text: rest, finish_reason: 'length', logprobs: null }],
      usage: { prompt_tokens: countPromptTokens(prompt), completion_tokens: 23, total_tokens: countPromptTokens(prompt) + 23 },
    });
    expect(body['id']).toMatch(/^cmpl-\d+$/);

    const streamed = await post(e.url, '/v1/completions', { model: MODEL, prompt, max_tokens: 23, temperature: 0, stream: true, stream_options: { include_usage: true } });
    expect(streamed.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await sse(streamed);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    const usage = chunks.at(-1);
    expect(usage).toMatchObject({ choices: [], usage: { prompt_tokens: countPromptTokens(prompt), completion_tokens: 23 } });
    const textChunks = chunks.slice(0, -1);
    expect(textChunks.at(-1).choices[0].finish_reason).toBe('length');
    expect(textChunks.map((c) => c.choices[0].text).join('')).toBe(rest);
    expect(textChunks.every((c) => c.usage === null)).toBe(true);
  });

  it('serves chat, counting the rendered template exactly, streamed and not', async () => {
    const e = await start();
    const { prompt } = planted(2000);
    const messages = [
      { role: 'system', content: 'You repeat things.' },
      { role: 'user', content: [{ type: 'text', text: prompt }] },
    ];
    const rendered = renderChat([
      { role: 'system', content: 'You repeat things.' },
      { role: 'user', content: prompt },
    ]);
    const tokenized = await json(await post(e.url, '/tokenize', { model: MODEL, messages }));
    expect(tokenized['count']).toBe(countPromptTokens(rendered));
    const body = await json(await post(e.url, '/v1/chat/completions', { model: MODEL, messages, max_completion_tokens: 7, temperature: 0 }));
    expect(body).toMatchObject({
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant' }, finish_reason: 'length' }],
      usage: { prompt_tokens: tokenized['count'], completion_tokens: 7, total_tokens: tokenized['count'] + 7 },
    });
    const events = await sse(await post(e.url, '/v1/chat/completions', { model: MODEL, messages, max_tokens: 7, temperature: 0, stream: true }));
    const chunks = events.slice(0, -1).map((x) => JSON.parse(x));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks.at(-1).choices[0]).toMatchObject({ delta: {}, finish_reason: 'length' });
    expect(chunks.map((c) => c.choices[0].delta.content ?? '').join('')).toBe(body['choices'][0].message.content);
    expect(chunks.every((c) => !('usage' in c))).toBe(true); // no include_usage, no usage field
  });

  it('stops at a stop string, leaving it out, streamed and not', async () => {
    const e = await start();
    const { prompt, rest } = planted(3000);
    const stop = rest.slice(6, 9);
    const body = await json(await post(e.url, '/v1/completions', { prompt, max_tokens: 30, temperature: 0, stop: [stop, 'never-there'] }));
    expect(body['choices'][0]).toMatchObject({ text: rest.slice(0, 6), finish_reason: 'stop' });
    expect(body['usage'].completion_tokens).toBe(9);
    const events = await sse(await post(e.url, '/v1/completions', { prompt, max_tokens: 30, temperature: 0, stop, stream: true }));
    const chunks = events.slice(0, -1).map((x) => JSON.parse(x));
    expect(chunks.map((c) => c.choices[0].text).join('')).toBe(rest.slice(0, 6));
    expect(chunks.at(-1).choices[0].finish_reason).toBe('stop');
    await until(() => e.engine.stats().pool.usedPages === 0, 'pages released after stop');
  });

  it('tokenizes like vLLM and describes itself like SGLang', async () => {
    const e = await start();
    expect(await json(await post(e.url, '/tokenize', { model: MODEL, prompt: 'hé' }))).toEqual({ count: 4, max_model_len: 16_384, tokens: [256, 104, 195, 169] });
    expect(await json(await post(e.url, '/tokenize', { prompt: 'hé', add_special_tokens: false }))).toMatchObject({ count: 3 });
    expect(await json(await fetch(`${e.url}/get_server_info`))).toMatchObject({
      context_length: 16_384,
      max_total_num_tokens: 16_640,
      max_req_input_len: 16_383,
      page_size: 16,
      model_path: MODEL,
      disaggregation_mode: 'null',
    });
    expect(await json(await fetch(`${e.url}/health`))).toEqual({ status: 'ok' });
  });

  it('exports metrics, with the ground-truth foreign-read counter at 0 after a mixed load', async () => {
    const e = await start({ poolTokens: 8192 });
    const { prompt } = planted(3000);
    const aborted = new AbortController();
    const jobs = [
      ...Array.from({ length: 6 }, () => post(e.url, '/v1/completions', { prompt, max_tokens: 20, temperature: 0 }).then((r) => r.text())),
      post(e.url, '/v1/completions', { prompt: 'x'.repeat(20_000), max_tokens: 1 }).then((r) => r.text()),
      post(e.url, '/v1/completions', { prompt, max_tokens: 2000, stream: true }, { signal: aborted.signal }).then(async (r) => {
        const reader = (r.body as ReadableStream).getReader();
        await reader.read();
        aborted.abort();
      }),
    ];
    await Promise.allSettled(jobs);
    await until(() => e.engine.stats().running === 0 && e.engine.stats().waiting === 0, 'engine idle');
    const text = await (await fetch(`${e.url}/metrics`)).text();
    expect(text).toMatch(/^kvcanary_engine_foreign_page_reads_total 0$/m);
    expect(text).toMatch(/^kvcanary_engine_http_requests_total\{endpoint="completions",status="200"\} [1-9]/m);
    expect(text).toMatch(/^kvcanary_engine_http_requests_total\{endpoint="completions",status="400"\} 1$/m);
    expect(text).toMatch(/^kvcanary_engine_kv_pool_pages\{state="used"\} 0$/m);
    expect(text).toMatch(/^kvcanary_engine_kv_pool_pages\{state="free"\} 512$/m);
    expect(text).toMatch(/^kvcanary_engine_requests_rejected_total\{code="context_length_exceeded"\} 1$/m);
    expect(text).toMatch(/^kvcanary_engine_requests_finished_total\{reason="aborted"\} 1$/m);
    expect(text).toMatch(/^kvcanary_engine_sequences\{state="running"\} 0$/m);
    expect(text).toMatch(/^kvcanary_engine_generation_tokens_total [1-9]/m);
    expect(text).toMatch(/^kvcanary_engine_prompt_tokens_total [1-9]/m);
    expect(await json(await fetch(`${e.url}/debug/exposures`))).toEqual({ total: 0, exposures: [] });
    expect(e.engine.checkInvariants()).toEqual([]);
  });

  it('answers /health while a ~200k-token prefill is in progress', async () => {
    const e = await start({ contextTokens: 262_144, poolTokens: 262_144, chunkTokens: 4096 });
    const prompt = random(200_000, '0123456789abcdef');
    let done = false;
    const completion = post(e.url, '/v1/completions', { prompt, max_tokens: 1 }).then(async (r) => {
      done = true;
      return r.status;
    });
    await until(() => e.engine.stats().prefilling === 1 || done, 'prefill started');
    let answeredDuringPrefill = 0;
    while (!done) {
      const res = await fetch(`${e.url}/health`);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      // Counted only if the prefill was still unfinished when the answer arrived: a prefill that
      // blocked the event loop from start to end would let no answer in.
      if (e.engine.stats().prefillTokensPending > 0) answeredDuringPrefill++;
    }
    expect(await completion).toBe(200);
    expect(answeredDuringPrefill).toBeGreaterThanOrEqual(3);
  });

  it('frees a request’s pages when its client disconnects, streaming or not', async () => {
    const e = await start({ chunkTokens: 1024 });
    const streaming = new AbortController();
    const res = await post(e.url, '/v1/completions', { prompt: random(2000), max_tokens: 10_000, stream: true }, { signal: streaming.signal });
    const reader = (res.body as ReadableStream).getReader();
    await reader.read();
    expect(e.engine.stats().pool.usedPages).toBeGreaterThan(0);
    streaming.abort();
    await until(() => e.engine.stats().pool.usedPages === 0, 'streaming request freed');

    const blocking = new AbortController();
    const pending = post(e.url, '/v1/completions', { prompt: random(12_000), max_tokens: 4000 }, { signal: blocking.signal }).catch((err: Error) => err.name);
    await until(() => e.engine.stats().running === 1, 'non-streaming request running');
    blocking.abort();
    expect(await pending).toBe('AbortError');
    await until(() => e.engine.stats().pool.usedPages === 0, 'non-streaming request freed');
    expect(e.engine.stats().finishedTotal.aborted).toBe(2);
    expect(e.engine.checkInvariants()).toEqual([]);
  });
});

describe('engine HTTP API: bad input', () => {
  const cases: [string, string, unknown, number, string | null, RegExp][] = [
    ['malformed JSON', '/v1/completions', '{"prompt": "x",', 400, 'invalid_json', /parse the JSON body/],
    ['an empty body', '/v1/completions', '', 400, 'invalid_json', /empty/],
    ['a JSON array body', '/v1/chat/completions', '[1,2]', 400, 'invalid_type', /must be a JSON object/],
    ['a prompt of the wrong type', '/v1/completions', { prompt: 42 }, 400, 'invalid_type', /`prompt` must be a string/],
    ['no prompt', '/v1/completions', { max_tokens: 3 }, 400, 'missing_required_parameter', /`prompt` is required/],
    ['token ids out of range', '/v1/completions', { prompt: [1, 2, 999] }, 400, 'invalid_value', /token ids .* 999/],
    ['an unknown model', '/v1/completions', { model: 'gpt-4', prompt: 'x' }, 404, 'model_not_found', /`gpt-4` does not exist/],
    ['a negative max_tokens', '/v1/completions', { prompt: 'x', max_tokens: -5 }, 400, 'invalid_value', /`max_tokens` .* got -5/],
    ['a fractional max_tokens', '/v1/completions', { prompt: 'x', max_tokens: 1.5 }, 400, 'invalid_value', /`max_tokens`/],
    ['a string max_tokens', '/v1/completions', { prompt: 'x', max_tokens: '10' }, 400, 'invalid_type', /`max_tokens` .* \(string\)/],
    ['an absurd max_tokens', '/v1/completions', { prompt: 'x', max_tokens: 1e30 }, 400, 'invalid_value', /`max_tokens`/],
    ['a huge max_tokens', '/v1/completions', { prompt: 'x', max_tokens: 1_000_000_000 }, 400, 'context_length_exceeded', /maximum context length is 16384 tokens\. However, you requested 1000000002 tokens \(2 in the prompt, 1000000000 in the completion\)/],
    ['a negative max_completion_tokens', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_completion_tokens: 0 }, 400, 'invalid_value', /`max_completion_tokens`/],
    ['a too-hot temperature', '/v1/completions', { prompt: 'x', temperature: 5 }, 400, 'invalid_value', /`temperature` must be a number in \[0, 2\]/],
    ['a string temperature', '/v1/completions', { prompt: 'x', temperature: 'hot' }, 400, 'invalid_type', /`temperature`/],
    ['top_p of 0', '/v1/completions', { prompt: 'x', top_p: 0 }, 400, 'invalid_value', /`top_p`/],
    ['five stop strings', '/v1/completions', { prompt: 'x', stop: ['a', 'b', 'c', 'd', 'e'] }, 400, 'invalid_value', /`stop`/],
    ['n = 2', '/v1/completions', { prompt: 'x', n: 2 }, 400, 'unsupported_value', /`n`/],
    ['logprobs', '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], logprobs: true }, 400, 'unsupported_value', /`logprobs`/],
    ['a string stream flag', '/v1/completions', { prompt: 'x', stream: 'yes' }, 400, 'invalid_type', /`stream` must be a boolean/],
    ['stream_options without stream', '/v1/completions', { prompt: 'x', stream_options: { include_usage: true } }, 400, 'invalid_value', /only allowed when `stream` is true/],
    ['no messages', '/v1/chat/completions', { model: MODEL }, 400, 'missing_required_parameter', /`messages` must be a non-empty array/],
    ['empty messages', '/v1/chat/completions', { messages: [] }, 400, 'invalid_type', /`messages` must be a non-empty array/],
    ['an unknown role', '/v1/chat/completions', { messages: [{ role: 'wizard', content: 'x' }] }, 400, 'invalid_value', /`messages\[0\]\.role` must be one of/],
    ['content of the wrong type', '/v1/chat/completions', { messages: [{ role: 'user', content: 7 }] }, 400, 'invalid_type', /`messages\[0\]\.content`/],
    ['an image part', '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] }, 400, 'invalid_value', /only text parts/],
    ['a prompt over the context limit', '/v1/completions', { prompt: 'y'.repeat(16_380), max_tokens: 10 }, 400, 'context_length_exceeded', /maximum context length is 16384 tokens\. However, you requested 16391 tokens \(16381 in the prompt, 10 in the completion\)/],
    ['messages over the context limit', '/v1/chat/completions', { messages: [{ role: 'user', content: 'y'.repeat(16_380) }], max_tokens: 10 }, 400, 'context_length_exceeded', /in the messages, 10 in the completion\)\. Please reduce the length of the messages or completion\./],
    ['tokenize without a prompt', '/tokenize', { model: MODEL }, 400, 'missing_required_parameter', /`prompt`/],
  ];

  it.each(cases)('answers %s with a clear 4xx in the OpenAI error shape', async (_, path, body, status, code, message) => {
    const e = await start();
    const res = await post(e.url, path, body);
    expect(res.status).toBe(status);
    const error = (await json(res))['error'];
    expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
    expect(error.code).toBe(code);
    expect(error.message).toMatch(message);
    expect(error.type).toBe(status === 404 ? 'not_found_error' : 'invalid_request_error');
    expect(e.engine.stats().pool.allocatedPagesTotal).toBe(0); // nothing was allocated for it
  });

  it('rejects a prompt between pool capacity and context limit with the pool named', async () => {
    const e = await start({ contextTokens: 16_384, poolTokens: 8192 });
    const res = await post(e.url, '/v1/completions', { prompt: 'z'.repeat(12_000), max_tokens: 16 });
    expect(res.status).toBe(400);
    expect((await json(res))['error']).toEqual({
      message: 'The prompt (12001 tokens) exceeds the KV cache pool capacity (8192 tokens).',
      type: 'invalid_request_error',
      param: 'prompt',
      code: 'kv_pool_capacity_exceeded',
    });
    expect(e.engine.stats().pool.allocatedPagesTotal).toBe(0);
  });

  it('refuses bodies over the size limit with 413, declared or streamed, answering at the limit', async () => {
    const e = await start({ maxBodyBytes: 64 * 1024 });
    const declared = await post(e.url, '/v1/completions', { prompt: 'q'.repeat(100_000) });
    expect(declared.status).toBe(413);
    expect((await json(declared))['error']).toMatchObject({ code: 'request_too_large', message: expect.stringMatching(/limit is 65536 bytes/) });

    // No Content-Length (chunked): the server counts as it reads and answers as soon as the limit is
    // passed, while the client is still sending; it never waits for (or holds) the whole body.
    const total = 32 * 1024 * 1024;
    const { status, sentWhenAnswered } = await new Promise<{ status: number; sentWhenAnswered: number }>((resolve, reject) => {
      const url = new URL(`${e.url}/v1/completions`);
      let sent = 0;
      let answered = false;
      const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
        answered = true;
        res.resume();
        resolve({ status: res.statusCode ?? 0, sentWhenAnswered: sent });
        req.destroy();
      });
      req.on('error', (err) => {
        if (!answered) reject(err);
      });
      const chunk = Buffer.alloc(64 * 1024, 'w');
      req.write('{"prompt": "');
      const pump = (): void => {
        while (!answered && sent < total) {
          sent += chunk.length;
          if (!req.write(chunk)) {
            req.once('drain', pump);
            return;
          }
        }
        if (!answered) req.end('"}');
      };
      pump();
    });
    expect(status).toBe(413);
    expect(sentWhenAnswered).toBeLessThan(total);
  });

  it('answers unknown endpoints with 404 and wrong methods with 405 naming the allowed ones', async () => {
    const e = await start();
    const missing = await fetch(`${e.url}/v1/embeddings`, { method: 'POST', body: '{}' });
    expect(missing.status).toBe(404);
    expect((await json(missing))['error']).toMatchObject({ code: 'unknown_endpoint', message: 'Unknown endpoint: POST /v1/embeddings' });
    const wrong = await fetch(`${e.url}/v1/completions`);
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('POST');
    expect((await json(wrong))['error']).toMatchObject({ code: 'method_not_allowed', message: expect.stringMatching(/GET is not allowed on \/v1\/completions; allowed: POST/) });
    const wrong2 = await fetch(`${e.url}/metrics`, { method: 'POST' });
    expect(wrong2.status).toBe(405);
  });

  it('keeps serving, and leaves an in-flight request untouched, through a barrage of bad input', async () => {
    const e = await start();
    const { prompt, rest } = planted(6000);
    const inFlight = post(e.url, '/v1/completions', { prompt, max_tokens: rest.length, temperature: 0, stream: true }).then(sse);
    const bad = await Promise.all(cases.map(([, path, body]) => post(e.url, path, body).then((r) => r.status)));
    expect(bad.every((s) => s >= 400 && s < 500)).toBe(true);
    const events = await inFlight;
    const text = events.slice(0, -1).map((x) => JSON.parse(x).choices[0].text).join('');
    expect(text).toBe(rest);
    const ok = await json(await post(e.url, '/v1/completions', { prompt, max_tokens: rest.length, temperature: 0 }));
    expect(ok['choices'][0].text).toBe(rest);
    expect(e.engine.checkInvariants()).toEqual([]);
    expect(e.engine.stats().foreignPageReadsTotal).toBe(0);
  });
});
