/**
 * Fake OpenAI-compatible servers for the target-client tests, on node:http, 127.0.0.1, port 0. Each
 * dialect answers the routes and in the shapes of the real engine (vLLM, SGLang, llama.cpp), including its
 * over-limit error text and how it reports errors while streaming. Token counts use a toy tokenizer
 * (one token per 4 characters, rounded up, plus one) so tests can size prompts exactly.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

export interface FakeServer {
  url: string;
  port: number;
  seen: SeenRequest[];
  server: Server;
  close(): Promise<void>;
}

export type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void | Promise<void>;

/** A server that reads each request body whole (small test bodies) and hands it to `handler`. */
export async function startServer(handler: Handler, opts: { readBody?: boolean } = {}): Promise<FakeServer> {
  const seen: SeenRequest[] = [];
  const server = createServer((req, res) => {
    if (opts.readBody === false) {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: '' });
      void handler(req, res, '');
      return;
    }
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const body = Buffer.concat(parts).toString('utf8');
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      void handler(req, res, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function json(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export function toyTokens(text: string): number {
  return Math.ceil(text.length / 4) + 1;
}

interface ParsedRequest {
  api: 'chat' | 'completions';
  model: string;
  prompt: string;
  maxTokens: number;
  stream: boolean;
  includeUsage: boolean;
}

function parseCompletion(url: string, body: string): ParsedRequest {
  const v = JSON.parse(body) as Record<string, unknown>;
  const api = url.includes('chat') ? 'chat' : 'completions';
  let prompt = '';
  if (api === 'chat') {
    for (const m of v['messages'] as Array<{ content: string }>) prompt += m.content;
  } else {
    prompt = String(v['prompt']);
  }
  const so = v['stream_options'] as { include_usage?: boolean } | undefined;
  return {
    api,
    model: String(v['model']),
    prompt,
    maxTokens: Number(v['max_tokens']),
    stream: v['stream'] === true,
    includeUsage: so?.include_usage === true,
  };
}

/** The reply every fake generates: multi-byte on purpose. */
export const REPLY = ['Hello', ' wörld', ' 漢字', ' 😀', '!'];

function chunkFor(p: ParsedRequest, text: string, extra: Record<string, unknown> = {}, field = 'content'): Record<string, unknown> {
  const choice = p.api === 'chat' ? { index: 0, delta: { [field]: text }, finish_reason: null } : { index: 0, text, finish_reason: null };
  return { id: 'x', object: p.api === 'chat' ? 'chat.completion.chunk' : 'text_completion', model: p.model, choices: [choice], ...extra };
}

function fullFor(p: ParsedRequest, text: string, usage: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const choice = p.api === 'chat' ? { index: 0, message: { role: 'assistant', content: text }, finish_reason: 'length' } : { index: 0, text, finish_reason: 'length' };
  return { id: 'x', object: p.api === 'chat' ? 'chat.completion' : 'text_completion', model: p.model, choices: [choice], usage, ...extra };
}

function sse(res: ServerResponse): (line: string) => void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  return (line) => res.write(line);
}

export interface DialectOptions {
  contextTokens?: number;
  poolTokens?: number;
}

/** vLLM: owned_by vllm, max_model_len, /tokenize {count}, /metrics cache_config_info, errors as HTTP 400 JSON. */
export function vllmHandler(o: DialectOptions = {}): Handler {
  const ctx = o.contextTokens ?? 4096;
  const blocks = Math.floor((o.poolTokens ?? 16000) / 16);
  return (req, res, body) => {
    const url = req.url ?? '';
    if (url === '/v1/models') {
      return json(res, 200, { object: 'list', data: [{ id: 'meta-llama/Llama-3.1-8B', object: 'model', created: 1, owned_by: 'vllm', root: 'meta-llama/Llama-3.1-8B', parent: null, max_model_len: ctx, permission: [] }] });
    }
    if (url === '/tokenize' && req.method === 'POST') {
      const v = JSON.parse(body) as { prompt?: string };
      if (typeof v.prompt !== 'string') return json(res, 400, { error: { message: 'Field required: prompt', type: 'BadRequestError', code: 400 } });
      const n = toyTokens(v.prompt);
      return json(res, 200, { count: n, max_model_len: ctx, tokens: Array.from({ length: n }, (_, i) => i), token_strs: null });
    }
    if (url === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      return void res.end(
        `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="${blocks}",num_gpu_blocks_override="None",sliding_window="None",swap_space_bytes="4294967296"} 1.0\nvllm:num_requests_running{model_name="m"} 0.0\n`,
      );
    }
    if (url === '/v1/completions' || url === '/v1/chat/completions') {
      const p = parseCompletion(url, body);
      const n = toyTokens(p.prompt);
      if (n + p.maxTokens > ctx) {
        return json(res, 400, {
          error: {
            message: `You passed ${n} input tokens and requested ${p.maxTokens} output tokens. However, the model's context length is only ${ctx} tokens, resulting in a maximum input length of ${ctx - p.maxTokens} tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=${n})`,
            type: 'BadRequestError',
            param: 'input_tokens',
            code: 400,
          },
        });
      }
      const usage = { prompt_tokens: n, completion_tokens: REPLY.length, total_tokens: n + REPLY.length, prompt_tokens_details: { cached_tokens: 16 } };
      if (!p.stream) return json(res, 200, fullFor(p, REPLY.join(''), usage));
      const write = sse(res);
      if (p.api === 'chat') write(`data: ${JSON.stringify(chunkFor(p, '', {}, 'role'))}\n\n`);
      for (const piece of REPLY) write(`data: ${JSON.stringify(chunkFor(p, piece))}\n\n`);
      const last = chunkFor(p, '');
      (last['choices'] as Array<Record<string, unknown>>)[0]!['finish_reason'] = 'length';
      write(`data: ${JSON.stringify(last)}\n\n`);
      if (p.includeUsage) write(`data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', model: p.model, choices: [], usage })}\n\n`);
      write('data: [DONE]\n\n');
      return void res.end();
    }
    json(res, 404, { detail: 'Not Found' });
  };
}

/** SGLang: /get_server_info (or only /server_info), PD shape, `object: error` bodies, errors inside 200 streams. */
export function sglangHandler(o: DialectOptions & { pd?: boolean; legacyInfoPath?: boolean } = {}): Handler {
  const ctx = o.contextTokens ?? 8192;
  const pool = o.poolTokens ?? 6000;
  const maxInput = Math.min(ctx - 1, pool - 1);
  const serverArgs = (total: number) => ({
    model_path: 'Qwen/Qwen3-8B',
    tp_size: 1,
    dp_size: 1,
    mem_fraction_static: 0.88,
    chunked_prefill_size: 8192,
    schedule_policy: 'fcfs',
    page_size: 1,
    context_length: null,
    internal_states: [{ max_total_num_tokens: total, max_req_input_len: Math.min(ctx - 1, total - 1), last_gen_throughput: 0 }],
    version: '0.5.4',
  });
  return (req, res, body) => {
    const url = req.url ?? '';
    if (url === '/v1/models') {
      return json(res, 200, { object: 'list', data: [{ id: 'Qwen/Qwen3-8B', object: 'model', created: 1, owned_by: 'sglang', root: 'Qwen/Qwen3-8B', max_model_len: ctx }] });
    }
    const infoPath = o.legacyInfoPath === true ? '/server_info' : '/get_server_info';
    if (url === infoPath) {
      if (o.pd === true) return json(res, 200, { prefill: [serverArgs(pool)], decode: [serverArgs(pool * 3)] });
      return json(res, 200, serverArgs(pool));
    }
    if (url === '/v1/completions' || url === '/v1/chat/completions') {
      const p = parseCompletion(url, body);
      const n = toyTokens(p.prompt);
      if (n >= ctx) {
        return json(res, 400, { object: 'error', message: `The input (${n} tokens) is longer than the model's context length (${ctx} tokens).`, type: 'BadRequestError', param: null, code: 400 });
      }
      const usage = { prompt_tokens: n, completion_tokens: REPLY.length, total_tokens: n + REPLY.length };
      if (n >= maxInput) {
        // The scheduler rejects after the stream has started: a 200 carrying an error event.
        if (!p.stream) return json(res, 400, { object: 'error', message: `Input length (${n} tokens) exceeds the maximum allowed length (${maxInput} tokens). Use a shorter input or enable --allow-auto-truncate.`, type: 'BadRequestError', param: null, code: 400 });
        const write = sse(res);
        write(`data: ${JSON.stringify({ error: { object: 'error', message: `Input length (${n} tokens) exceeds the maximum allowed length (${maxInput} tokens). Use a shorter input or enable --allow-auto-truncate.`, type: 'BadRequestError', param: null, code: 400 } })}\n\n`);
        write('data: [DONE]\n\n');
        return void res.end();
      }
      if (!p.stream) return json(res, 200, fullFor(p, REPLY.join(''), usage));
      const write = sse(res);
      // A reasoning model: thinking arrives in reasoning_content before the answer.
      if (p.api === 'chat') write(`data: ${JSON.stringify(chunkFor(p, 'Thinking…', {}, 'reasoning_content'))}\n\n`);
      for (const piece of REPLY) write(`data: ${JSON.stringify(chunkFor(p, piece))}\n\n`);
      const last = chunkFor(p, '');
      (last['choices'] as Array<Record<string, unknown>>)[0]!['finish_reason'] = 'length';
      write(`data: ${JSON.stringify(last)}\n\n`);
      if (p.includeUsage) write(`data: ${JSON.stringify({ id: 'x', choices: [], usage })}\n\n`);
      write('data: [DONE]\n\n');
      return void res.end();
    }
    json(res, 404, { detail: 'Not Found' });
  };
}

/** llama.cpp server: /props, /tokenize {content}, meta in /v1/models, exceed_context_size_error, `error:` SSE lines. */
export function llamacppHandler(o: DialectOptions & { midStreamError?: boolean } = {}): Handler {
  const nCtx = o.contextTokens ?? 2048;
  return (req, res, body) => {
    const url = req.url ?? '';
    if (url === '/v1/models') {
      return json(res, 200, { object: 'list', data: [{ id: 'qwen2.5-7b-instruct-q4_k_m.gguf', object: 'model', created: 1, owned_by: 'llamacpp', meta: { vocab_type: 2, n_vocab: 152064, n_ctx_train: 32768, n_ctx: nCtx, n_embd: 3584, n_params: 7615616512, size: 4677120000 } }] });
    }
    if (url === '/props') {
      return json(res, 200, { default_generation_settings: { n_ctx: nCtx, params: { temperature: 0.8 } }, total_slots: 4, model_path: '/models/q.gguf', chat_template: '...', build_info: 'b6000' });
    }
    if (url === '/tokenize' && req.method === 'POST') {
      const v = JSON.parse(body) as { content?: string };
      if (typeof v.content !== 'string') return json(res, 500, { error: { code: 500, message: '"content" must be provided', type: 'server_error' } });
      return json(res, 200, { tokens: Array.from({ length: toyTokens(v.content) }, (_, i) => 1000 + i) });
    }
    if (url === '/metrics') {
      return json(res, 501, { error: { code: 501, message: 'This server does not support metrics endpoint. Start it with `--metrics`', type: 'not_supported_error' } });
    }
    if (url === '/v1/completions' || url === '/v1/chat/completions') {
      const p = parseCompletion(url, body);
      const n = toyTokens(p.prompt);
      if (n > nCtx) {
        return json(res, 400, { error: { code: 400, message: `request (${n} tokens) exceeds the available context size (${nCtx} tokens), try increasing it`, type: 'exceed_context_size_error', n_prompt_tokens: n, n_ctx: nCtx } });
      }
      const timings = { cache_n: 12, prompt_n: n - 12, predicted_n: REPLY.length };
      const usage = { prompt_tokens: n, completion_tokens: REPLY.length, total_tokens: n + REPLY.length, prompt_tokens_details: { cached_tokens: 12 } };
      if (!p.stream) return json(res, 200, fullFor(p, REPLY.join(''), usage, { timings }));
      const write = sse(res);
      for (const piece of REPLY.slice(0, o.midStreamError === true ? 2 : REPLY.length)) write(`data: ${JSON.stringify(chunkFor(p, piece))}\n\n`);
      if (o.midStreamError === true) {
        write(`error: ${JSON.stringify({ code: 500, message: 'llama_decode failed: KV cache is full', type: 'server_error' })}\n\n`);
        return void res.end();
      }
      const last = chunkFor(p, '', { timings });
      (last['choices'] as Array<Record<string, unknown>>)[0]!['finish_reason'] = 'length';
      write(`data: ${JSON.stringify(last)}\n\n`);
      if (p.includeUsage) write(`data: ${JSON.stringify({ id: 'x', choices: [], usage, timings })}\n\n`);
      write('data: [DONE]\n\n');
      return void res.end();
    }
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('File Not Found');
  };
}
