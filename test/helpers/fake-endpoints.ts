/**
 * Small OpenAI-compatible servers for prober tests: one that behaves (echoes the request's own markers
 * and emits noise that looks like markers), and ones that fail in the ways real endpoints fail.
 * Each listens on 127.0.0.1, port 0, and is closed by the test.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';

export interface FakeServer {
  url: string;
  server: Server;
  close(): Promise<void>;
  requests: number;
}

export async function listen(handler: (req: IncomingMessage, res: ServerResponse, body: string) => void): Promise<FakeServer> {
  const state = { requests: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      state.requests++;
      handler(req, res, Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', () => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    get requests() {
      return state.requests;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const B32 = 'abcdefghijklmnopqrstuvwxyz234567';
const WORDS = ['alpha', 'kvcanary', 'internationalization', 'quartermaster', 'the', 'of', 'deadbeefcafe', 'kvcanary-', 'base', 'thirtytwo'];

function noise(rand: () => number, n: number): string {
  const parts: string[] = [];
  while (parts.join(' ').length < n) {
    const k = rand();
    if (k < 0.3) parts.push(randomBytes(8 + Math.floor(rand() * 16)).toString('hex'));
    else if (k < 0.6) parts.push((rand() < 0.5 ? 'kvcanary-' : '') + Array.from({ length: 12 + Math.floor(rand() * 20) }, () => B32[Math.floor(rand() * 32)]).join(''));
    else parts.push(WORDS[Math.floor(rand() * WORDS.length)]!);
  }
  return parts.join(' ');
}

function promptOf(body: Record<string, unknown>): string {
  if (typeof body['prompt'] === 'string') return body['prompt'];
  const msgs = body['messages'];
  if (Array.isArray(msgs)) return msgs.map((m) => (typeof m?.content === 'string' ? m.content : '')).join('\n');
  return '';
}

/**
 * A well-behaved endpoint with a 4-chars-per-token tokenizer: it rejects over-limit prompts with vLLM's
 * text, echoes markers of the request's own prompt, and pads with random hex, base32 and word noise.
 */
/**
 * `prefillMsPerToken`: every completion's first byte waits that long per prompt token, as a real server's
 * prefill does (a prompt-length-blind fake gives a timing test nothing to see, so "no prefix cache" could only
 * ever be inconclusive on it).
 */
/**
 * `errorAfterText`: a streamed answer ends with an error event after its whole text, as llama.cpp's chat
 * parser ends one whose generation was cut mid-character at max_tokens (`data: {"error": …}`, status 200);
 * `errorAfterChars`: after only that many characters of it.
 */
export async function echoNoiseServer(opts: { context?: number; seed?: number; prefillMsPerToken?: number; errorAfterText?: boolean; errorAfterChars?: number } = {}): Promise<FakeServer> {
  const context = opts.context ?? 8192;
  let s = opts.seed ?? 1;
  const rand = (): number => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const tokens = (text: string): number => Math.ceil(text.length / 4) + 1;
  return listen((req, res, raw) => {
    const json = (status: number, value: unknown): void => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    if (req.method === 'GET' && req.url === '/v1/models') return json(200, { object: 'list', data: [{ id: 'echo', object: 'model', owned_by: 'vllm', max_model_len: context }] });
    if (req.method === 'POST' && req.url === '/tokenize') {
      const b = JSON.parse(raw) as Record<string, unknown>;
      const n = tokens(promptOf(b));
      return json(200, { count: n, max_model_len: context, tokens: [] });
    }
    if (req.method === 'POST' && (req.url === '/v1/completions' || req.url === '/v1/chat/completions')) {
      let b: Record<string, unknown>;
      try {
        b = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        return json(400, { error: { message: 'bad json', type: 'BadRequestError', code: 400 } });
      }
      const prompt = promptOf(b);
      const n = tokens(prompt);
      const maxTokens = Number(b['max_tokens'] ?? 16);
      if (n + maxTokens > context) {
        return json(400, {
          error: {
            message: `This model's maximum context length is ${context} tokens. However, you requested ${n + maxTokens} tokens (${n} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`,
            type: 'BadRequestError',
            param: null,
            code: 400,
          },
        });
      }
      if (opts.prefillMsPerToken !== undefined) {
        setTimeout(() => answer(b, prompt, n, maxTokens), n * opts.prefillMsPerToken);
        return;
      }
      return answer(b, prompt, n, maxTokens);
    }
    json(404, { error: { message: 'not found', type: 'NotFoundError', code: 404 } });
    function answer(b: Record<string, unknown>, prompt: string, n: number, maxTokens: number): void {
      const own = prompt.match(/kvcanary-[a-z2-7]{26}/g) ?? [];
      const whole = (own.length > 0 ? own[Math.floor(rand() * own.length)] + ' ' : '') + noise(rand, maxTokens * 3);
      const text = opts.errorAfterChars === undefined ? whole : whole.slice(0, opts.errorAfterChars);
      const chat = req.url === '/v1/chat/completions';
      const usage = { prompt_tokens: n, completion_tokens: maxTokens, total_tokens: n + maxTokens };
      if (b['stream'] === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (let i = 0; i < text.length; i += 7) {
          const piece = text.slice(i, i + 7);
          const choice = chat ? { index: 0, delta: { content: piece }, finish_reason: null } : { index: 0, text: piece, finish_reason: null };
          res.write(`data: ${JSON.stringify({ id: 'x', object: chat ? 'chat.completion.chunk' : 'text_completion', choices: [choice] })}\n\n`);
        }
        if (opts.errorAfterText === true || opts.errorAfterChars !== undefined) {
          const error = { code: 500, message: 'The model produced output that does not match the expected Content-only format', type: 'server_error' };
          res.end(`data: ${JSON.stringify({ error })}\n\n`);
          return;
        }
        res.write(`data: ${JSON.stringify({ id: 'x', choices: [], usage })}\n\n`);
        res.end('data: [DONE]\n\n');
        return;
      }
      const choice = chat ? { index: 0, message: { role: 'assistant', content: text }, finish_reason: 'length' } : { index: 0, text, finish_reason: 'length' };
      json(200, { id: 'x', object: chat ? 'chat.completion' : 'text_completion', choices: [choice], usage });
    }
  });
}

export type FailureMode = '5xx' | 'reset' | 'hang' | 'garbage-sse' | 'huge-body';

/** An endpoint that lists a model but fails every completion in one way. */
export async function failingServer(mode: FailureMode): Promise<FakeServer> {
  return listen((req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ data: [{ id: 'm', object: 'model', max_model_len: 4096 }] }));
      return;
    }
    if (req.method !== 'POST' || !req.url?.includes('completions')) {
      res.writeHead(404).end();
      return;
    }
    switch (mode) {
      case '5xx':
        res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"message":"overloaded"}}');
        return;
      case 'reset':
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"text":"he"}]}\n\n');
        setTimeout(() => res.socket?.destroy(), 5);
        return;
      case 'hang':
        return; // never answers
      case 'garbage-sse':
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end('data: {not json\n\ndata: ]]]\n\n');
        return;
      case 'huge-body': {
        res.writeHead(200, { 'content-type': 'application/json' });
        const block = Buffer.alloc(1 << 20, 'a');
        let sent = 0;
        const pump = (): void => {
          while (sent < 100 && res.write(block)) sent++;
          if (sent >= 100) res.end();
          else res.once('drain', pump);
        };
        res.on('close', () => (sent = 100));
        pump();
        return;
      }
    }
  });
}
