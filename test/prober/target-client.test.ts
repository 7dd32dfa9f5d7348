import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { createTargetClient, type CompletionRequest, type TargetClient, type TargetClientOptions } from '../../prober/src/probe/target/client.js';
import { rejectionOf } from '../../prober/src/probe/target/rejection.js';
import { json, llamacppHandler, REPLY, sglangHandler, startServer, toyTokens, vllmHandler, type FakeServer, type Handler } from './target-fakes.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

async function serve(handler: Handler, opts?: { readBody?: boolean }): Promise<FakeServer> {
  const s = await startServer(handler, opts);
  open.push(s);
  return s;
}

function client(opts: Partial<TargetClientOptions> & { baseUrl: string }): TargetClient {
  const c = createTargetClient({ timeoutMs: 5000, ...opts });
  open.push(c);
  return c;
}

const REPLY_TEXT = REPLY.join('');

function req(over: Partial<CompletionRequest> = {}): CompletionRequest {
  return { api: 'chat', model: 'm', prompt: 'hello', maxTokens: 8, stream: true, ...over };
}

/** Resolves when the server-side response closes, telling whether the client went away before the end. */
function disconnectWatch(res: ServerResponse): Promise<boolean> {
  return new Promise((resolve) => res.on('close', () => resolve(!res.writableEnded)));
}

describe('completions against each dialect', () => {
  const dialects: Array<[string, () => Handler, string]> = [
    ['vLLM', () => vllmHandler(), ''],
    ['SGLang', () => sglangHandler(), 'Thinking…'],
    ['llama.cpp', () => llamacppHandler(), ''],
  ];
  for (const [name, make, reasoning] of dialects) {
    for (const api of ['chat', 'completions'] as const) {
      it(`${name} ${api}: streamed and non-streamed text, finish reason and usage`, async () => {
        const s = await serve(make());
        const c = client({ baseUrl: `${s.url}/v1/` });
        const deltas: string[] = [];
        const streamed = await c.complete(req({ api, onText: (t) => deltas.push(t) }));
        const expectedText = (api === 'chat' ? reasoning : '') + REPLY_TEXT;
        expect(streamed).toMatchObject({ transport: 'ok', status: 200, finishReason: 'length', sawDone: true, generatedChars: expectedText.length });
        expect(deltas.join('')).toBe(expectedText);
        expect(deltas.length).toBeGreaterThan(1);
        expect(streamed.usage).toMatchObject({ promptTokens: toyTokens('hello'), completionTokens: REPLY.length });
        expect(streamed.ttftMs).toBeGreaterThanOrEqual(0);
        // Usage is asked for explicitly when streaming.
        expect(JSON.parse(s.seen.at(-1)!.body)).toMatchObject({ stream: true, stream_options: { include_usage: true } });

        const whole: string[] = [];
        const plain = await c.complete(req({ api, stream: false, onText: (t) => whole.push(t) }));
        expect(plain).toMatchObject({ transport: 'ok', status: 200, finishReason: 'length', generatedChars: REPLY_TEXT.length });
        expect(whole).toEqual([REPLY_TEXT]);
        expect(JSON.parse(s.seen.at(-1)!.body)).not.toHaveProperty('stream_options');
      });
    }
  }

  it('reports cached prompt tokens (vLLM prompt_tokens_details, llama.cpp too)', async () => {
    const v = await serve(vllmHandler());
    const l = await serve(llamacppHandler());
    expect((await client({ baseUrl: v.url }).complete(req({ stream: false }))).usage?.cachedTokens).toBe(16);
    expect((await client({ baseUrl: l.url }).complete(req())).usage?.cachedTokens).toBe(12);
  });

  it('sends the documented request shape: model, max_tokens, temperature, extraBody, system + user messages', async () => {
    const s = await serve(vllmHandler());
    const c = client({ baseUrl: s.url });
    await c.complete(req({ system: 'sys', temperature: 0, extraBody: { cache_salt: 'tenant-a', seed: 7, stream_options: { continuous_usage_stats: true } } }));
    expect(s.seen.at(-1)!.url).toBe('/v1/chat/completions');
    expect(JSON.parse(s.seen.at(-1)!.body)).toEqual({
      model: 'm',
      max_tokens: 8,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true, continuous_usage_stats: true },
      cache_salt: 'tenant-a',
      seed: 7,
      messages: [
        { role: 'system', content: 'sys' },
        { role: 'user', content: 'hello' },
      ],
    });
    await c.complete(req({ api: 'completions', stream: false }));
    expect(s.seen.at(-1)!.url).toBe('/v1/completions');
    expect(JSON.parse(s.seen.at(-1)!.body)).toEqual({ model: 'm', max_tokens: 8, stream: false, prompt: 'hello' });
  });

  it('accepts the server root or the /v1 base, with or without a trailing slash', async () => {
    const s = await serve(vllmHandler());
    for (const base of [s.url, `${s.url}/`, `${s.url}/v1`, `${s.url}/v1/`]) {
      expect((await client({ baseUrl: base }).complete(req())).transport).toBe('ok');
    }
    expect(s.seen.every((r) => r.url === '/v1/chat/completions')).toBe(true);
  });
});

describe('over-limit rejections as each dialect sends them', () => {
  const long = 'x'.repeat(40_000); // 10,001 toy tokens: over every fake's limits

  it('vLLM: HTTP 400 JSON, recognised, no text', async () => {
    const s = await serve(vllmHandler());
    const r = await client({ baseUrl: s.url }).complete(req({ prompt: long }));
    expect(r).toMatchObject({ transport: 'http-4xx', status: 400, generatedChars: 0 });
    expect(r.errorBody).toMatch(/^You passed 10001 input tokens/);
    expect(rejectionOf(r)).toMatchObject({ overLimit: true, dialect: 'vllm', limit: 4096, count: 10001 });
  });

  it('SGLang: 400 from the tokenizer manager; between pool and context, an error event inside a 200 stream', async () => {
    const s = await serve(sglangHandler({ contextTokens: 8192, poolTokens: 6000 }));
    const c = client({ baseUrl: s.url });
    const over = await c.complete(req({ prompt: long }));
    expect(over).toMatchObject({ transport: 'http-4xx', status: 400 });
    expect(rejectionOf(over)).toMatchObject({ overLimit: true, dialect: 'sglang', limit: 8192, limitKind: 'context' });

    const between = await c.complete(req({ prompt: 'y'.repeat(26_000) })); // 6,501 tokens: above pool, below context
    expect(between).toMatchObject({ transport: 'http-4xx', status: 200, errorInStream: true, generatedChars: 0 });
    expect(rejectionOf(between)).toMatchObject({ overLimit: true, dialect: 'sglang', limit: 5999, limitKind: 'input' });
  });

  it('llama.cpp: 400 JSON even for a stream request, numbers in fields', async () => {
    const s = await serve(llamacppHandler());
    const r = await client({ baseUrl: s.url }).complete(req({ prompt: long }));
    expect(r).toMatchObject({ transport: 'http-4xx', status: 400 });
    expect(rejectionOf(r)).toMatchObject({ overLimit: true, dialect: 'llamacpp', limit: 2048, count: 10001 });
  });

  it("llama.cpp: an `error:` line mid-stream is an error, and the text before it still counts", async () => {
    const s = await serve(llamacppHandler({ midStreamError: true }));
    const r = await client({ baseUrl: s.url }).complete(req());
    expect(r).toMatchObject({ transport: 'http-5xx', status: 200, errorInStream: true, generatedChars: (REPLY[0]! + REPLY[1]!).length });
    expect(r.errorBody).toBe('llama_decode failed: KV cache is full');
  });
});

describe('transport faults are classified, never thrown', () => {
  it('connection refused', async () => {
    const s = await startServer(() => undefined);
    await s.close();
    const r = await client({ baseUrl: s.url }).complete(req());
    expect(r.transport).toBe('refused');
    expect(r.detail).toMatch(/ECONNREFUSED/);
  });

  it('5xx with a plain-text body', async () => {
    const s = await serve((_q, res) => {
      res.writeHead(503, { 'content-type': 'text/plain' });
      res.end('upstream overloaded');
    });
    const r = await client({ baseUrl: s.url }).complete(req());
    expect(r).toMatchObject({ transport: 'http-5xx', status: 503, errorBody: 'upstream overloaded', generatedChars: 0 });
  });

  it('a 400 labelled as an event stream carrying data: {"error": ...}', async () => {
    const s = await serve((_q, res) => {
      res.writeHead(400, { 'content-type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify({ error: { message: 'bad request: messages', type: 'BadRequestError', code: 400 } })}\n\n`);
    });
    const r = await client({ baseUrl: s.url }).complete(req());
    expect(r).toMatchObject({ transport: 'http-4xx', status: 400, errorBody: 'bad request: messages' });
  });

  it('reset mid-stream keeps the text that arrived', async () => {
    const s = await serve((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'partial' } }] })}\n\n`, () => res.socket?.destroy());
    });
    const r = await client({ baseUrl: s.url }).complete(req());
    expect(r).toMatchObject({ transport: 'reset', status: 200, generatedChars: 'partial'.length });
  });

  it('a server that never answers, and one that stalls mid-body, time out', async () => {
    const hang = await serve(() => undefined);
    const r1 = await client({ baseUrl: hang.url, timeoutMs: 300 }).complete(req());
    expect(r1.transport).toBe('timeout');
    const stall = await serve((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'a' } }] })}\n\n`);
    });
    const r2 = await client({ baseUrl: stall.url }).complete(req({ timeoutMs: 300 }));
    expect(r2).toMatchObject({ transport: 'timeout', status: 200, generatedChars: 1 });
  });

  it('garbage SSE, a stream with no events, and a non-JSON 200 are malformed', async () => {
    const garbage = await serve((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end('data: <html>oops</html>\n\ndata: {"choices":[{"delta":{"content":"x"}}]}\n\n');
    });
    const r1 = await client({ baseUrl: garbage.url }).complete(req());
    expect(r1).toMatchObject({ transport: 'malformed', generatedChars: 1 });
    const empty = await serve((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(': just a comment\n\n');
    });
    expect((await client({ baseUrl: empty.url }).complete(req())).transport).toBe('malformed');
    const html = await serve((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html>login page</html>');
    });
    expect((await client({ baseUrl: html.url }).complete(req({ stream: false }))).transport).toBe('malformed');
    expect((await client({ baseUrl: html.url }).complete(req({ stream: true }))).transport).toBe('malformed');
  });

  it('a JSON answer to a stream request is read as a completion', async () => {
    const s = await serve((_q, res) => json(res, 200, { choices: [{ index: 0, message: { content: 'whole' }, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1 } }));
    const r = await client({ baseUrl: s.url }).complete(req({ stream: true }));
    expect(r).toMatchObject({ transport: 'ok', generatedChars: 5, finishReason: 'stop', usage: { promptTokens: 3, completionTokens: 1 } });
  });

  it('a 100 MB response is cut at maxResponseBytes (streamed, JSON and error bodies), and the server sees the disconnect', async () => {
    const total = 100 * 1024 * 1024;
    const make = (status: number, contentType: string, piece: Buffer): { handler: Handler; stats: { written: number; closedEarly: Promise<boolean> } } => {
      const stats = { written: 0, closedEarly: Promise.resolve(false) };
      const handler: Handler = (_q, res) => {
        stats.closedEarly = disconnectWatch(res);
        res.writeHead(status, { 'content-type': contentType });
        const pump = (): void => {
          while (stats.written < total && !res.destroyed) {
            stats.written += piece.length;
            if (!res.write(piece)) {
              res.once('drain', pump);
              return;
            }
          }
          if (!res.destroyed) res.end();
        };
        pump();
      };
      return { handler, stats };
    };
    const sseLine = Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'z'.repeat(60_000) } }] })}\n\n`);
    const cases = [
      { m: make(200, 'text/event-stream', sseLine), stream: true, transport: 'too-large', bound: 1024 * 1024 },
      { m: make(200, 'application/json', Buffer.from('{"choices":[{"text":"' + 'a'.repeat(65_000))), stream: false, transport: 'too-large', bound: 1024 * 1024 },
      { m: make(500, 'text/plain', Buffer.alloc(65_536, 0x41)), stream: false, transport: 'http-5xx', bound: 64 * 1024 },
    ] as const;
    for (const k of cases) {
      const s = await serve(k.m.handler);
      const r = await client({ baseUrl: s.url, maxResponseBytes: 1024 * 1024 }).complete(req({ stream: k.stream }));
      expect(r.transport).toBe(k.transport);
      expect(r.bytesReceived).toBeLessThan(k.bound + 128 * 1024);
      expect(await k.m.stats.closedEarly).toBe(true);
      expect(k.m.stats.written).toBeLessThan(total / 4);
    }
  });

  it('text split at every byte boundary of multi-byte characters arrives intact', async () => {
    const body = Buffer.from(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'é漢😀' } }] })}\n\ndata: [DONE]\n\n`);
    let split = 0;
    const s = await serve((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(body.subarray(0, split), () => setTimeout(() => res.end(body.subarray(split)), 2));
    });
    const c = client({ baseUrl: s.url });
    for (split = 1; split < body.length; split++) {
      const got: string[] = [];
      const r = await c.complete(req({ onText: (t) => got.push(t) }));
      expect(r.transport, `split at ${split}`).toBe('ok');
      expect(got.join(''), `split at ${split}`).toBe('é漢😀');
    }
    // And one byte per write.
    const slow = await serve(async (_q, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const b of body) await new Promise<void>((resolve) => res.write(Uint8Array.of(b), () => setImmediate(resolve)));
      res.end();
    });
    const got: string[] = [];
    expect((await client({ baseUrl: slow.url }).complete(req({ onText: (t) => got.push(t) }))).transport).toBe('ok');
    expect(got.join('')).toBe('é漢😀');
  });

  it('a server that answers before reading a large upload is still heard', async () => {
    const s = await serve(
      (_q, res) => {
        res.writeHead(413, { 'content-type': 'application/json', connection: 'close' });
        res.end(JSON.stringify({ error: { message: 'body too large' } }));
      },
      { readBody: false },
    );
    const big = { chunks: () => Array.from({ length: 64 }, () => 'q'.repeat(65_536)) };
    const r = await client({ baseUrl: s.url }).complete(req({ prompt: big }));
    expect(r).toMatchObject({ transport: 'http-4xx', status: 413, errorBody: 'body too large' });
  });
});

describe('abortAfter', () => {
  function slowStream(): { handler: Handler; disconnected: Promise<boolean> } {
    let resolveDisc!: (v: boolean) => void;
    const disconnected = new Promise<boolean>((r) => (resolveDisc = r));
    const handler: Handler = (_q, res) => {
      void disconnectWatch(res).then(resolveDisc);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let n = 0;
      const timer = setInterval(() => {
        if (res.destroyed || n >= 200) {
          clearInterval(timer);
          if (!res.destroyed) res.end('data: [DONE]\n\n');
          return;
        }
        n++;
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'abcd' } }] })}\n\n`);
      }, 10);
    };
    return { handler, disconnected };
  }

  it('after N characters: stops, reports aborted, and the server sees the disconnect', async () => {
    const { handler, disconnected } = slowStream();
    const s = await serve(handler);
    const r = await client({ baseUrl: s.url }).complete(req({ abortAfter: { chars: 10 } }));
    expect(r.transport).toBe('aborted');
    expect(r.generatedChars).toBeGreaterThanOrEqual(10);
    expect(r.generatedChars).toBeLessThan(800);
    expect(await disconnected).toBe(true);
  });

  it('after N ms while the server is still "prefilling" (no headers yet)', async () => {
    let resolveClosed!: () => void;
    const closed = new Promise<void>((r) => (resolveClosed = r));
    const s = await serve((q) => {
      q.socket.on('close', resolveClosed);
    });
    const r = await client({ baseUrl: s.url }).complete(req({ abortAfter: { ms: 100 } }));
    expect(r).toMatchObject({ transport: 'aborted', generatedChars: 0 });
    expect(r.status).toBeUndefined();
    await closed;
  });

  it('with an AbortSignal, including one already aborted', async () => {
    const { handler, disconnected } = slowStream();
    const s = await serve(handler);
    const ctl = new AbortController();
    const r = await client({ baseUrl: s.url }).complete(req({ abortAfter: ctl.signal, onText: () => ctl.abort() }));
    expect(r.transport).toBe('aborted');
    expect(r.generatedChars).toBeGreaterThan(0);
    expect(await disconnected).toBe(true);

    // A signal alongside a planned abort: whichever comes first.
    const ctl2 = new AbortController();
    const r3 = await client({ baseUrl: s.url }).complete(req({ abortAfter: { chars: 1_000_000, signal: ctl2.signal }, onText: () => ctl2.abort() }));
    expect(r3.transport).toBe('aborted');

    const before = s.seen.length;
    const r2 = await client({ baseUrl: s.url }).complete(req({ abortAfter: AbortSignal.abort() }));
    expect(r2).toMatchObject({ transport: 'aborted', generatedChars: 0 });
    expect(s.seen.length).toBe(before);
  });
});

describe('the API key', () => {
  const KEY = 'sk-kvcanary-test-7f3a9c1e5b2d4068';

  it('goes in the Authorization header and nowhere in results, errors or the client itself', async () => {
    const s = await serve((q, res) => {
      // A careless gateway that echoes the request headers into its error body.
      json(res, 401, { error: { message: `invalid key ${String(q.headers['authorization'])}`, echoed: q.headers } });
    });
    const c = client({ baseUrl: s.url, apiKey: KEY, headers: { 'X-Tenant': 'a' } });
    const r = await c.complete(req());
    expect(s.seen[0]!.headers['authorization']).toBe(`Bearer ${KEY}`);
    expect(s.seen[0]!.headers['x-tenant']).toBe('a');
    expect(r.transport).toBe('http-4xx');
    expect(r.errorBody).toContain('[redacted]');
    expect(JSON.stringify(r)).not.toContain(KEY);
    expect(String(c)).not.toContain(KEY);
    expect(JSON.stringify(c)).not.toContain(KEY);
    expect(inspect(c, { depth: 5, showHidden: true })).not.toContain(KEY);

    // Echoed where the 2 KB bound cuts, and inside a 200 stream: no prefix of the key survives either.
    const cutting = await serve((q, res) => {
      const echo = `${'x'.repeat(2048 - 'Bearer '.length - 8)}${String(q.headers['authorization'])} and more`;
      if (q.url === '/v1/completions') return json(res, 403, { error: { message: echo } });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify({ error: { message: echo, code: 401 } })}\n\n`);
    });
    const cc = client({ baseUrl: cutting.url, apiKey: KEY });
    for (const r2 of [await cc.complete(req({ api: 'completions' })), await cc.complete(req())]) {
      expect(r2.transport).toBe('http-4xx');
      expect(JSON.stringify(r2)).not.toContain(KEY.slice(0, 8));
    }

    const gone = await startServer(() => undefined);
    await gone.close();
    const refused = await client({ baseUrl: gone.url, apiKey: KEY }).complete(req());
    expect(JSON.stringify(refused)).not.toContain(KEY);

    // Bad options never echo values: a key pasted into the wrong field stays out of the message.
    let message = '';
    try {
      createTargetClient({ baseUrl: s.url, timeoutMs: 1000, apiKey: KEY, headers: { 'content-type': KEY } });
    } catch (err) {
      message = String(err) + JSON.stringify(err);
    }
    expect(message).toMatch(/content-type/);
    expect(message).not.toContain(KEY);
  });
});

describe('caller errors throw with a stable code and name the field', () => {
  it('bad options and requests', async () => {
    const s = await serve(vllmHandler());
    expect(() => createTargetClient({ baseUrl: 'ftp://x', timeoutMs: 10 })).toThrow(/baseUrl/);
    expect(() => createTargetClient({ baseUrl: 'http://u:p@h', timeoutMs: 10 })).toThrow(/user:password/);
    expect(() => createTargetClient({ baseUrl: s.url, timeoutMs: 0 })).toThrow(/timeoutMs/);
    expect(() => createTargetClient({ baseUrl: s.url, timeoutMs: 10, retries: 3 } as unknown as TargetClientOptions)).toThrow(/options\.retries/);
    const c = client({ baseUrl: s.url });
    await expect(c.complete(req({ extraBody: { model: 'other' } }))).rejects.toMatchObject({ code: 'KVC_TARGET_INVALID_ARG', field: 'req.extraBody.model' });
    await expect(c.complete(req({ api: 'completions', system: 's' }))).rejects.toMatchObject({ field: 'req.system' });
    await expect(c.complete(req({ abortAfter: {} }))).rejects.toMatchObject({ field: 'req.abortAfter' });
    await expect(c.complete(req({ maxTokens: -1 }))).rejects.toMatchObject({ field: 'req.maxTokens' });
    await expect(c.complete(req({ prompt: '', tokenIds: [1, 2] }))).rejects.toMatchObject({ field: 'req.tokenIds' }); // chat takes no token ids
    await expect(c.complete(req({ api: 'completions', prompt: '', tokenIds: [1, -2] }))).rejects.toMatchObject({ field: 'req.tokenIds' });
    await expect(c.complete(req({ api: 'completions', prompt: 'text too', tokenIds: [1, 2] }))).rejects.toMatchObject({ field: 'req.prompt' });
    await expect(c.complete({ ...req(), n: 2 } as unknown as CompletionRequest)).rejects.toMatchObject({ field: 'req.n' });
    await c.close();
    await expect(c.complete(req())).rejects.toMatchObject({ code: 'KVC_TARGET_CLOSED' });
  });

  it('a prompt source that changes between its two passes is a caller error, not a target fault', async () => {
    const s = await serve(vllmHandler());
    let pass = 0;
    const shifty = { chunks: () => (pass++ === 0 ? ['short'] : ['a good deal longer than before']) };
    await expect(client({ baseUrl: s.url }).complete(req({ prompt: shifty }))).rejects.toMatchObject({ code: 'KVC_PROMPT_SOURCE_UNSTABLE' });
    let pass2 = 0;
    const failing = {
      *chunks() {
        yield 'first part ';
        if (pass2++ > 0) throw new Error('source broke');
        yield 'second part';
      },
    };
    await expect(client({ baseUrl: s.url }).complete(req({ prompt: failing }))).rejects.toMatchObject({ code: 'KVC_PROMPT_SOURCE_FAILED' });
  });

  it('an onText that throws aborts the request and rethrows', async () => {
    const s = await serve(vllmHandler());
    const boom = new Error('scanner bug');
    await expect(
      client({ baseUrl: s.url }).complete(
        req({
          onText: () => {
            throw boom;
          },
        }),
      ),
    ).rejects.toBe(boom);
  });
});

describe('a streamed 4 MB prompt', () => {
  it('reaches the server intact as valid JSON while the client holds a small fraction of it', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const retained = (): number => {
      gc();
      gc();
      const m = process.memoryUsage();
      return m.heapUsed + m.arrayBuffers;
    };

    const dir = mkdtempSync(join(tmpdir(), 'kvcanary-target-'));
    open.push({ close: async () => rmSync(dir, { recursive: true, force: true }) });
    const unit = 'The committee "reviewed" the figures;\tnew line\n and é漢😀 ';
    const reps = Math.ceil((4 * 1024 * 1024) / unit.length);
    const prompt = { totalChars: unit.length * reps, *chunks() {
      for (let i = 0; i < reps; i += 500) yield unit.repeat(Math.min(500, reps - i));
    } };

    let halfway!: (resume: () => void) => void;
    let file = '';
    const server = await serve(
      (q, res) => {
        file = join(dir, `body-${Date.now()}.json`);
        // Written synchronously: the server keeps none of the body in memory while the client is measured.
        const fd = openSync(file, 'w');
        let received = 0;
        let paused = false;
        const half = Number(q.headers['content-length']) / 2;
        q.on('data', (c: Buffer) => {
          writeSync(fd, c);
          received += c.length;
          if (!paused && received >= half) {
            paused = true;
            q.pause();
            halfway(() => q.resume());
          }
        });
        q.on('end', () => {
          closeSync(fd);
          json(res, 200, { choices: [{ index: 0, text: 'ok', finish_reason: 'stop' }] });
        });
      },
      { readBody: false },
    );
    const c = client({ baseUrl: server.url, timeoutMs: 30_000 });

    const measure = async (p: typeof prompt | string): Promise<{ growth: number; result: Awaited<ReturnType<TargetClient['complete']>> }> => {
      const base = retained();
      let growth = 0;
      const atHalf = new Promise<void>((resolve) => {
        halfway = (resume) => {
          growth = retained() - base;
          resume();
          resolve();
        };
      });
      const result = await c.complete(req({ api: 'completions', stream: false, prompt: p }));
      await atHalf;
      return { growth, result };
    };

    // Warm up: the first request through each code path compiles code, which the heap keeps.
    halfway = (resume) => resume();
    await c.complete(req({ api: 'completions', stream: false, prompt: { chunks: () => [unit.repeat(40_000)] } }));
    const streamed = await measure(prompt);
    expect(streamed.result.transport).toBe('ok');
    const promptBytes = Buffer.byteLength(unit) * reps;
    const sent = JSON.parse(readFileSync(file, 'utf8')) as { prompt: string };
    expect(sent.prompt.length).toBe(unit.length * reps);
    expect(sent.prompt === unit.repeat(reps)).toBe(true);
    expect(streamed.result.requestBytes).toBe(readFileSync(file).byteLength);

    // Control: the same prompt held as one string during the upload shows up in the measure.
    const whole = unit.repeat(reps);
    const held = await measure(whole);
    expect(held.result.transport).toBe('ok');
    expect(whole.length).toBe(unit.length * reps);

    console.log(`4 MB prompt (${promptBytes} bytes UTF-8): retained mid-upload ${streamed.growth} bytes streamed vs ${held.growth} bytes with the prompt held as a string`);
    expect(held.growth).toBeGreaterThan(promptBytes / 2);
    expect(streamed.growth).toBeLessThan(promptBytes / 4);
  });
});
