/**
 * The engine's HTTP API (node:http): OpenAI-compatible completions and chat (streaming and not), vLLM's
 * /tokenize, SGLang's /get_server_info, /health, /metrics, and the ground truth for tests:
 * /debug/exposures (foreign reads) and /debug/config (enabled faults and defenses).
 *
 * The server only translates: it parses and validates a request, submits it to an `Engine`, and streams
 * the engine's events back. Bad input of any kind gets a 4xx in OpenAI's error shape and touches nothing
 * else. A client that goes away aborts its request, which frees its pages.
 *
 * A streamed response's headers wait for its first text (or its end): a request refused or failed before
 * producing anything (the disaggregated mode's prefill rejects an over-pool prompt only after bootstrap;
 * `page-tags` fails a read closed) gets a real status, 400 or 500, not a 200 with an error event.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Clock } from './clock.js';
import { systemClock } from './clock.js';
import type { Engine } from './engine.js';
import type { EngineMetrics } from './metrics.js';
import { GenerationFailed, textStream, type TextEnd } from './detokenizer.js';
import { ApiError } from './http/api-error.js';
import { readJson } from './http/body.js';
import { parseChatRequest, parseCompletionRequest, parseTokenizeRequest, type GenerationParams, type ParseContext } from './http/requests.js';
import { endSse, startSse, writeEvent } from './http/sse.js';

export interface EngineServerOptions {
  engine: Engine;
  metrics: EngineMetrics;
  /** Request body limit in bytes. */
  maxBodyBytes: number;
  /** Sampling seed for requests that set none. @default 0 */
  defaultSeed?: number;
  clock?: Clock;
  /** Where internal errors are reported (never request bodies). @default stderr */
  log?: (line: string) => void;
}

interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
}

type Handler = (x: Exchange) => Promise<void> | void;

interface Route {
  name: string;
  methods: Partial<Record<'GET' | 'POST', Handler>>;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** How a request that ended without a result is answered: refused 400, failed 500, aborted 503. */
function failureToApiError(err: GenerationFailed): ApiError {
  if (err.code === 'ENGINE_REQUEST_REJECTED' && err.rejection !== undefined) {
    return new ApiError(400, err.message, { code: err.rejection.code, param: err.rejection.param });
  }
  return new ApiError(err.code === 'ENGINE_REQUEST_FAILED' ? 500 : 503, err.message, { code: err.code.toLowerCase() });
}

export function createEngineServer(options: EngineServerOptions): Server {
  const { engine, metrics } = options;
  const clock = options.clock ?? systemClock;
  const log = options.log ?? ((line: string) => process.stderr.write(line + '\n'));
  const info = engine.info();
  const parseContext: ParseContext = { modelId: info.modelId, contextTokens: info.contextTokens, defaultSeed: options.defaultSeed ?? 0 };

  async function generate({ res }: Exchange, params: GenerationParams, kind: 'completion' | 'chat'): Promise<void> {
    const submitted = engine.submit({
      promptTokens: params.promptTokens,
      maxTokens: params.maxTokens,
      sampling: params.sampling,
      promptKind: params.promptKind,
      ...(params.cacheSalt !== undefined ? { cacheSalt: params.cacheSalt } : {}),
    });
    if (!submitted.ok) {
      if ('rejection' in submitted) {
        const r = submitted.rejection;
        throw new ApiError(400, r.message, { code: r.code, param: r.param });
      }
      throw new ApiError(503, submitted.overloaded.message, { type: 'overloaded_error', code: submitted.overloaded.code });
    }
    const handle = submitted.request;
    res.once('close', () => {
      if (!res.writableFinished) handle.abort();
    });
    if (res.socket === null || res.socket.destroyed) handle.abort(); // the client left while we parsed
    const id = `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${handle.id}`;
    const created = Math.floor(clock.now() / 1000);
    const model = info.modelId;
    const usage = (end: TextEnd) => ({
      prompt_tokens: end.promptTokens,
      completion_tokens: end.completionTokens,
      total_tokens: end.promptTokens + end.completionTokens,
      ...(end.cachedTokens !== undefined ? { prompt_tokens_details: { cached_tokens: end.cachedTokens } } : {}),
    });
    const pieces = textStream(handle, params.stop);

    if (!params.stream) {
      let text = '';
      let end: TextEnd;
      for (;;) {
        const next = await pieces.next();
        if (next.done === true) {
          end = next.value;
          break;
        }
        text += next.value;
      }
      const choice =
        kind === 'chat'
          ? { index: 0, message: { role: 'assistant', content: text }, logprobs: null, finish_reason: end.finishReason }
          : { index: 0, text, logprobs: null, finish_reason: end.finishReason };
      sendJson(res, 200, {
        id,
        object: kind === 'chat' ? 'chat.completion' : 'text_completion',
        created,
        model,
        choices: [choice],
        usage: usage(end),
      });
      return;
    }

    const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    const usageField = params.includeUsage ? { usage: null } : {};
    const chunk = (delta: string | undefined, finish: string | null) => ({
      id,
      object,
      created,
      model,
      choices: [
        kind === 'chat'
          ? { index: 0, delta: delta === undefined ? {} : { content: delta }, logprobs: null, finish_reason: finish }
          : { index: 0, text: delta ?? '', logprobs: null, finish_reason: finish },
      ],
      ...usageField,
    });
    let next = await pieces.next(); // a failure before any text is thrown from here, before the headers
    startSse(res);
    if (kind === 'chat') {
      writeEvent(res, { id, object, created, model, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], ...usageField });
    }
    try {
      while (next.done !== true) {
        writeEvent(res, chunk(next.value, null));
        next = await pieces.next();
      }
      const end = next.value;
      writeEvent(res, chunk(undefined, end.finishReason));
      if (params.includeUsage) writeEvent(res, { id, object, created, model, choices: [], usage: usage(end) });
    } catch (err) {
      if (!(err instanceof GenerationFailed)) throw err;
      const apiError = failureToApiError(err);
      writeEvent(res, apiError.toJSON());
      if (apiError.status === 500) log(`kvcanary engine: request ${id} failed: ${err.message}`);
    }
    endSse(res);
  }

  const routes = new Map<string, Route>([
    [
      '/v1/models',
      {
        name: 'models',
        methods: {
          GET: ({ res }) =>
            sendJson(res, 200, {
              object: 'list',
              data: [
                { id: info.modelId, object: 'model', created: info.startedAt, owned_by: 'kvcanary', root: info.modelId, parent: null, max_model_len: info.contextTokens },
              ],
            }),
        },
      },
    ],
    [
      '/v1/completions',
      {
        name: 'completions',
        methods: {
          POST: async (x) => generate(x, parseCompletionRequest(await readJson(x.req, options.maxBodyBytes), parseContext), 'completion'),
        },
      },
    ],
    [
      '/v1/chat/completions',
      {
        name: 'chat_completions',
        methods: {
          POST: async (x) => generate(x, parseChatRequest(await readJson(x.req, options.maxBodyBytes), parseContext), 'chat'),
        },
      },
    ],
    [
      '/tokenize',
      {
        name: 'tokenize',
        methods: {
          POST: async ({ req, res }) => {
            const tokens = parseTokenizeRequest(await readJson(req, options.maxBodyBytes), parseContext);
            sendJson(res, 200, { count: tokens.length, max_model_len: info.contextTokens, tokens: Array.from(tokens) });
          },
        },
      },
    ],
    ['/get_server_info', { name: 'get_server_info', methods: { GET: ({ res }) => sendJson(res, 200, serverInfo()) } }],
    ['/server_info', { name: 'get_server_info', methods: { GET: ({ res }) => sendJson(res, 200, serverInfo()) } }],
    ['/health', { name: 'health', methods: { GET: ({ res }) => sendJson(res, 200, { status: 'ok' }) } }],
    [
      '/metrics',
      {
        name: 'metrics',
        methods: {
          GET: async ({ res }) => {
            const text = await metrics.registry.metrics();
            res.writeHead(200, { 'content-type': metrics.registry.contentType });
            res.end(text);
          },
        },
      },
    ],
    ['/debug/exposures', { name: 'debug_exposures', methods: { GET: ({ res }) => sendJson(res, 200, engine.exposures()) } }],
    ['/debug/config', { name: 'debug_config', methods: { GET: ({ res }) => sendJson(res, 200, debugConfig()) } }],
  ]);

  /** Ground truth for tests (never for the prober): what this engine was built to get right or wrong. */
  function debugConfig(): Record<string, unknown> {
    const i = engine.info();
    return {
      preset: i.preset,
      mode: i.mode,
      faults: i.faults,
      defenses: i.defenses,
      context_length: i.contextTokens,
      page_size: i.pageSize,
      kv_free_list_policy: i.freeList,
      kv_zero_on_release: i.zeroOnRelease,
      prefix_cache: i.prefixCache === true,
      ...(i.details !== undefined ? { details: i.details } : {}),
    };
  }

  function serverInfo(): Record<string, unknown> {
    const i = engine.info();
    return {
      model_path: i.modelId,
      served_model_name: i.modelId,
      context_length: i.contextTokens,
      max_total_num_tokens: i.poolTokens,
      max_req_input_len: Math.min(i.contextTokens, i.poolTokens) - 1,
      page_size: i.pageSize,
      chunked_prefill_size: i.chunkTokens,
      max_running_requests: i.maxRunning,
      disaggregation_mode: i.mode === 'single' ? 'null' : i.mode,
      preset: i.preset,
      kv_free_list_policy: i.freeList,
      kv_zero_on_release: i.zeroOnRelease,
      attention_kernel: i.kernel,
      version: 'kvcanary-engine 0.1.0',
      ...i.details,
    };
  }

  async function dispatch(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const path = (req.url ?? '/').split('?', 1)[0] as string;
    const route = routes.get(path);
    res.once('close', () => metrics.observeHttp(route?.name ?? 'unknown', res.headersSent ? res.statusCode : 499));
    try {
      if (route === undefined) {
        req.resume();
        throw new ApiError(404, `Unknown endpoint: ${method} ${path.slice(0, 200)}`, { type: 'not_found_error', code: 'unknown_endpoint' });
      }
      const handler = route.methods[method as 'GET' | 'POST'];
      if (handler === undefined) {
        req.resume();
        const allowed = Object.keys(route.methods).join(', ');
        throw new ApiError(405, `Method ${method} is not allowed on ${path}; allowed: ${allowed}.`, {
          code: 'method_not_allowed',
          headers: { allow: allowed },
        });
      }
      await handler({ req, res });
    } catch (err) {
      const apiError =
        err instanceof ApiError
          ? err
          : err instanceof GenerationFailed
            ? failureToApiError(err)
            : new ApiError(500, 'Internal server error.', { code: 'internal_error' });
      // 503s are aborts (client gone, shutting down) and overload: expected, not worth a log line.
      if (apiError.status === 500) log(`kvcanary engine: ${method} ${path} -> 500: ${(err as Error).message}`);
      if (res.headersSent) {
        writeEvent(res, apiError.toJSON());
        endSse(res);
        return;
      }
      const headers = { ...apiError.headers, ...(apiError.status === 413 ? { connection: 'close' } : {}) };
      sendJson(res, apiError.status, apiError.toJSON(), headers);
    }
  }

  return createServer((req, res) => {
    void dispatch(req, res);
  });
}
