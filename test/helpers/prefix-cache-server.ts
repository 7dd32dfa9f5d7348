/**
 * An OpenAI-compatible test server (node:http, 127.0.0.1, port 0) with a real toy prefix cache, for the
 * prefix-isolation and concurrent-interleave scenarios.
 *
 * Mechanism:
 * - Tokens are characters. A prompt's full blocks of `blockChars` (16) are keyed by a chained hash: block
 *   0 by sha256(salt, block text), block i by sha256(key of block i-1, block text), vLLM's scheme. The
 *   per-request `cache_salt` goes into block 0 only, so different salts never share a block, and a hit on
 *   block i implies the whole prefix up to it matched.
 * - A request walks its blocks until the first miss: those are its cached tokens
 *   (`usage.prompt_tokens_details.cached_tokens`). Its remaining tokens are "prefilled": the first byte of
 *   output waits `prefillBaseMs + uncached x prefillMsPerToken`, so time to first token really depends on
 *   what the cache held. Its blocks enter the cache after that prefill (LRU, `capacityBlocks`).
 * - The "model" copies: it answers with the last marker in the prompt (the request's own), else a fixed
 *   phrase, cut to max_tokens characters.
 * - Faults: `ignoreSalt` (the salt is left out of the hash: tenants share, as SGLang HiCache did),
 *   `noCache` (caching off: nothing is stored, cached_tokens 0), `leaky` (a hit makes the completion
 *   continue the cached entry: the rest of the prompt that wrote the last matched block and that request's
 *   output, so text crosses requests as in llama.cpp #27148), `reportCached: false` (usage without
 *   prompt_tokens_details), `enforceContext: false` (over-limit prompts are answered), `failEvery: N` (every
 *   Nth completion answered 503), `streamErrorEvery: N` (every Nth streamed completion is admitted, starts
 *   answering, then ends with an error event, as llama.cpp does when its output parser rejects the model's
 *   bytes).
 * - `tokenize: true`: POST /tokenize answers llama.cpp's shape, `{tokens: [char codes]}`, and a completions
 *   prompt may be a list of token ids (char codes), so prefix-collision can build its collider.
 * - Ground truth for tests (the prober never sees it): `stats()`.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface PrefixCacheServerOptions {
  /** @default 16 */
  blockChars?: number;
  /** @default 8192 */
  contextTokens?: number;
  /** @default 1 */
  prefillBaseMs?: number;
  /** @default 0.025 (a 1600-token miss waits about 40 ms, a hit on all but 90 tokens about 3 ms) */
  prefillMsPerToken?: number;
  /** @default 16384 */
  capacityBlocks?: number;
  ignoreSalt?: boolean;
  noCache?: boolean;
  leaky?: boolean;
  /** @default true */
  reportCached?: boolean;
  /** @default true */
  enforceContext?: boolean;
  /** Answer every Nth completion request with a 503 (an endpoint that fails some requests). */
  failEvery?: number;
  /** Answer a completion request with a 503 when this says so (its cache salt, or key under `keyBy: 'api-key'`). */
  failWhen?: (req: { salt: string }) => boolean;
  /** Every Nth streamed completion: a first chunk, then `data: {"error": ...}` (HTTP 200), no usage. */
  streamErrorEvery?: number;
  tokenize?: boolean;
  /**
   * A second tier that ignores the salt and shortens prefill on a hit, while cached_tokens report only the
   * salted cache's hits: a real timing side channel that the reported counts do not show.
   */
  hiddenSharedTier?: boolean;
  /**
   * What partitions the cache: the request's `cache_salt` (vLLM, the default), the API key (the
   * `Authorization` header: each key has a cache of its own, whatever the salt) or nothing (`ignoreSalt`).
   */
  keyBy?: 'salt' | 'api-key';
  /**
   * What a hit still costs, as a share of prefilling the tokens it matched (loading them from a slower
   * tier): 0 (the default) saves their whole prefill, 0.5 half of it.
   */
  hitCostShare?: number;
}

export interface PrefixCacheStats {
  requests: number;
  /** Requests that matched at least one block. */
  hits: number;
  /** Requests that matched a block written under another salt. */
  crossSaltHits: number;
  /** Completions that continued another request's cache entry (leaky mode). */
  continued: number;
}

export interface PrefixCacheServer {
  url: string;
  stats(): PrefixCacheStats;
  close(): Promise<void>;
}

interface Writer {
  prompt: string;
  output: string;
  salt: string;
}

const MODEL = 'toy-prefix';
const MARKER = /kvcanary-[a-z2-7]{26}/g;

export async function startPrefixCacheServer(opts: PrefixCacheServerOptions = {}): Promise<PrefixCacheServer> {
  const blockChars = opts.blockChars ?? 16;
  const context = opts.contextTokens ?? 8192;
  const baseMs = opts.prefillBaseMs ?? 1;
  const perToken = opts.prefillMsPerToken ?? 0.025;
  const capacity = opts.capacityBlocks ?? 16_384;
  const reportCached = opts.reportCached ?? true;
  const enforceContext = opts.enforceContext ?? true;
  // Insertion order is recency order: a hit re-inserts, eviction takes the first key.
  const cache = new Map<string, Writer>();
  const stats: PrefixCacheStats = { requests: 0, hits: 0, crossSaltHits: 0, continued: 0 };
  let streamed = 0;

  const shared = new Set<string>();
  const blockKeys = (prompt: string, salt: string, unsalted = false): string[] => {
    const keys: string[] = [];
    let prev = opts.ignoreSalt || unsalted ? '' : `salt:${salt}`;
    for (let i = 0; i + blockChars <= prompt.length; i += blockChars) {
      prev = createHash('sha256').update(prev).update('\u0000').update(prompt.slice(i, i + blockChars)).digest('hex');
      keys.push(prev);
    }
    return keys;
  };

  const complete = async (req: IncomingMessage, res: ServerResponse, raw: string): Promise<void> => {
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      return json(res, 400, { error: { message: 'bad json', type: 'BadRequestError', code: 400 } });
    }
    const chat = req.url === '/v1/chat/completions';
    const prompt = chat
      ? (Array.isArray(body['messages']) ? body['messages'] : []).map((m: { content?: unknown }) => (typeof m?.content === 'string' ? m.content : '')).join('\n')
      : Array.isArray(body['prompt'])
        ? String.fromCharCode(...(body['prompt'] as number[]))
        : String(body['prompt'] ?? '');
    const maxTokens = Number(body['max_tokens'] ?? 16);
    const salt = opts.keyBy === 'api-key' ? `key:${createHash('sha256').update(String(req.headers['authorization'] ?? '')).digest('hex')}` : typeof body['cache_salt'] === 'string' ? body['cache_salt'] : '';
    const stream = body['stream'] === true;
    stats.requests++;
    if ((opts.failEvery !== undefined && stats.requests % opts.failEvery === 0) || opts.failWhen?.({ salt }) === true) {
      return json(res, 503, { error: { message: 'overloaded', type: 'ServiceUnavailableError', code: 503 } });
    }
    if (enforceContext && prompt.length + maxTokens > context) {
      return json(res, 400, {
        error: {
          message: `This model's maximum context length is ${context} tokens. However, you requested ${prompt.length + maxTokens} tokens (${prompt.length} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`,
          type: 'BadRequestError',
          param: null,
          code: 400,
        },
      });
    }

    const keys = blockKeys(prompt, salt);
    let matched = 0;
    let last: Writer | undefined;
    let crossed = false;
    if (!opts.noCache) {
      for (const key of keys) {
        const hit = cache.get(key);
        if (hit === undefined) break;
        cache.delete(key);
        cache.set(key, hit);
        matched++;
        last = hit;
        if (hit.salt !== salt) crossed = true;
      }
    }
    if (matched > 0) stats.hits++;
    if (crossed) stats.crossSaltHits++;
    const cachedTokens = matched * blockChars;
    let hidden = 0;
    if (opts.hiddenSharedTier) {
      for (const key of blockKeys(prompt, '', true)) {
        if (!shared.has(key)) break;
        hidden++;
      }
    }
    const skipped = Math.max(cachedTokens, hidden * blockChars);

    let text: string;
    if (opts.leaky && last !== undefined) {
      text = last.prompt.slice(cachedTokens) + last.output;
      stats.continued++;
    } else {
      const own = prompt.match(MARKER);
      text = own !== null ? `${own[own.length - 1]!.slice('kvcanary-'.length)} is the code on file.` : 'No code is on file for this request.';
    }
    text = text.slice(0, Math.max(0, maxTokens));
    const writer: Writer = { prompt, output: text, salt };

    if (stream) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    await new Promise((r) => setTimeout(r, baseMs + (prompt.length - skipped * (1 - (opts.hitCostShare ?? 0))) * perToken));
    if (opts.hiddenSharedTier) for (const key of blockKeys(prompt, '', true)) shared.add(key);
    if (!opts.noCache) {
      for (const key of keys) {
        if (cache.has(key)) continue;
        cache.set(key, writer);
        if (cache.size > capacity) cache.delete(cache.keys().next().value!);
      }
    }
    const usage: Record<string, unknown> = { prompt_tokens: prompt.length, completion_tokens: text.length, total_tokens: prompt.length + text.length };
    if (reportCached) usage['prompt_tokens_details'] = { cached_tokens: cachedTokens };
    const object = chat ? 'chat.completion' : 'text_completion';
    if (!stream) {
      const choice = chat ? { index: 0, message: { role: 'assistant', content: text }, finish_reason: 'length' } : { index: 0, text, finish_reason: 'length' };
      return json(res, 200, { id: 'toy', object, model: MODEL, choices: [choice], usage });
    }
    const event = (value: unknown): void => void res.write(`data: ${JSON.stringify(value)}\n\n`);
    if (opts.streamErrorEvery !== undefined && ++streamed % opts.streamErrorEvery === 0) {
      event({ id: 'toy', object: `${object}.chunk`, model: MODEL, choices: [chat ? { index: 0, delta: { content: text.slice(0, 4) }, finish_reason: null } : { index: 0, text: text.slice(0, 4), finish_reason: null }] });
      event({ error: { code: 500, message: 'The model produced output that does not match the expected Content-only format', type: 'server_error' } });
      res.end();
      return;
    }
    for (let i = 0; i < text.length; i += 8) {
      const piece = text.slice(i, i + 8);
      event({ id: 'toy', object: `${object}.chunk`, model: MODEL, choices: [chat ? { index: 0, delta: { content: piece }, finish_reason: null } : { index: 0, text: piece, finish_reason: null }] });
    }
    event({ id: 'toy', object: `${object}.chunk`, model: MODEL, choices: [chat ? { index: 0, delta: {}, finish_reason: 'length' } : { index: 0, text: '', finish_reason: 'length' }] });
    event({ id: 'toy', object: `${object}.chunk`, model: MODEL, choices: [], usage });
    res.end('data: [DONE]\n\n');
  };

  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(parts).toString('utf8');
      if (req.method === 'GET' && req.url === '/v1/models') {
        return json(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model', owned_by: 'kvcanary-test', max_model_len: context }] });
      }
      if (req.method === 'POST' && req.url === '/tokenize' && opts.tokenize) {
        const asked = JSON.parse(raw) as { content?: unknown; prompt?: unknown };
        const content = String(asked.content ?? asked.prompt ?? '');
        return json(res, 200, { tokens: Array.from(content, (c) => c.charCodeAt(0)) });
      }
      if (req.method === 'POST' && (req.url === '/v1/completions' || req.url === '/v1/chat/completions')) {
        complete(req, res, raw).catch((err: unknown) => {
          if (!res.headersSent) json(res, 500, { error: { message: String(err), type: 'InternalServerError', code: 500 } });
          else res.destroy();
        });
        return;
      }
      json(res, 404, { error: { message: 'not found', type: 'NotFoundError', code: 404 } });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    stats: () => ({ ...stats }),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function json(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
