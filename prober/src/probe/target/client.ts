/**
 * The OpenAI-compatible client kvcanary probes a target with, on undici.
 *
 * Design:
 * - Faults of the target are data. `complete()` resolves to a CompletionResult whose `transport` says how
 *   the exchange ended (ok, http-4xx/5xx, refused, reset, timeout, aborted, malformed, too-large); it throws
 *   only for the caller's mistakes (TargetError: bad arguments, an unstable PromptSource, an `onText` that
 *   threw, use after close).
 * - One deadline per request covers connect, upload, headers and body. Aborts (deadline, `abortAfter`,
 *   an external signal, the byte bound) go through one AbortController, and the reason is recorded before
 *   aborting, so classification never depends on which error undici happens to surface.
 * - Memory is bounded: the prompt is streamed into the body (prompt-body.ts); a streamed response keeps only
 *   the current SSE line; a JSON response at most `maxResponseBytes`; an error body at most 64 KiB, after
 *   which the socket is destroyed. Exceeding `maxResponseBytes` cuts the response (`too-large`).
 * - The API key lives in a private field: it is sent in the Authorization header and appears nowhere else
 *   (not in results, errors, toString, JSON or util.inspect); target text that echoes it is redacted.
 * - Time is read through an injectable `now()` so latency figures can be driven in tests.
 */
import { Buffer } from 'node:buffer';
import { Readable } from 'node:stream';
import { inspect } from 'node:util';
import type { Dispatcher } from 'undici';
import { Agent, request } from './undici-parts.js';
import type { TransportClass } from '../result.js';
import { parseBaseUrl } from './base-url.js';
import { createCompletionReader } from './completion-reader.js';
import type { Usage } from './completion-shape.js';
import { bound, parseErrorText, statusOfError, type TargetErrorInfo } from './error-body.js';
import { InvalidTargetArgError, PromptSourceError, TargetError } from './errors.js';
import { fixedJsonBody, PROMPT_HOLE, streamedJsonBody, type Prompt, type PromptSource, type StreamedJsonBody } from './prompt-body.js';
import { createSseParser } from './sse.js';
import { createTokenCountScanner } from './token-count.js';
import { classifyFault } from './transport-fault.js';

export type { Prompt, PromptSource } from './prompt-body.js';
export type { Usage } from './completion-shape.js';

export interface TargetClientOptions {
  /** Server root, with or without `/v1`, trailing slash or not. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <apiKey>`; the caller reads it from an environment variable. */
  apiKey?: string;
  /** Extra request headers (e.g. a tenant or routing header). */
  headers?: Record<string, string>;
  /** Deadline per request, from sending to the last byte, in milliseconds. */
  timeoutMs: number;
  /** Responses larger than this are cut and classified `too-large`. @default 8 MiB */
  maxResponseBytes?: number;
  /** An undici dispatcher the caller owns (not closed by `close()`). @default a new Agent per client */
  dispatcher?: Dispatcher;
  /** Clock for latency figures, in milliseconds. @default performance.now */
  now?: () => number;
}

export interface AbortAfter {
  /** Abort this many milliseconds after the request starts (during upload, prefill or decode). */
  ms?: number;
  /** Abort once this many generated characters have arrived. */
  chars?: number;
  /** Also abort when this fires (e.g. the probe cycle's cancellation), whichever comes first. */
  signal?: AbortSignal;
}

export interface CompletionRequest {
  api: 'completions' | 'chat';
  model: string;
  /** The prompt text (completions), or the user message's content (chat). */
  prompt: Prompt;
  /**
   * Completions only: send these token ids as `prompt` instead of the text (vLLM, SGLang and llama.cpp all
   * accept a token-id array there). `prompt` must then be ''. Lets a probe control the exact token sequence.
   */
  tokenIds?: readonly number[];
  /** Chat only: a system message placed before the user message. */
  system?: string;
  maxTokens: number;
  temperature?: number;
  stream: boolean;
  /** Merged into the request JSON (cache_salt, seed, stream_options, ...); may not set model/prompt/messages/stream. */
  extraBody?: Record<string, unknown>;
  abortAfter?: AbortAfter | AbortSignal;
  /** Every generated text delta, in order; for a non-streamed response the whole text once. */
  onText?: (chunk: string) => void;
  /** Overrides the client's deadline for this request. */
  timeoutMs?: number;
}

export interface CompletionResult {
  transport: TransportClass;
  /** HTTP status, when a response arrived. */
  status?: number;
  /** Generated characters received (UTF-16 code units), including any received before a fault. */
  generatedChars: number;
  finishReason?: string;
  usage?: Usage;
  /** The target's error message (parsed from JSON where it was JSON), at most 2 KB, key redacted. */
  errorBody?: string;
  /** The target's raw error text, at most 2 KB, key redacted: keeps codes and fields for classifyRejection. */
  errorRaw?: string;
  /** The error arrived inside a 2xx stream or body (SGLang and llama.cpp do this) rather than as the status. */
  errorInStream?: boolean;
  /** Milliseconds from sending to the first generated text (streamed responses). */
  ttftMs?: number;
  latencyMs: number;
  bytesReceived: number;
  /** Size of the request body in bytes. */
  requestBytes: number;
  /** Length of the prompt sent, in UTF-16 code units. */
  promptChars: number;
  /** A streamed response ended with `data: [DONE]`. */
  sawDone?: boolean;
  /** Why the transport class is what it is, when it is not `ok` (fault code, what was malformed). */
  detail?: string;
}

/** What a non-completion call (introspection) returned. */
export interface CallResult<T> {
  transport: TransportClass;
  status?: number;
  value?: T;
  errorBody?: string;
  detail?: string;
  latencyMs: number;
  bytesReceived: number;
}

export interface CallOptions {
  /** @default the client's timeoutMs */
  timeoutMs?: number;
  /** @default the client's maxResponseBytes */
  maxBytes?: number;
  signal?: AbortSignal;
}

const DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
/** Non-2xx bodies are read up to this, then the socket is destroyed. */
const ERROR_READ_BYTES = 64 * 1024;
const HEADER_NAME = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const RESERVED_HEADERS = new Set(['content-length', 'content-type', 'transfer-encoding', 'host', 'connection', 'accept-encoding']);
const OPTION_KEYS = new Set(['baseUrl', 'apiKey', 'headers', 'timeoutMs', 'maxResponseBytes', 'dispatcher', 'now']);
const REQUEST_KEYS = new Set(['api', 'model', 'prompt', 'tokenIds', 'system', 'maxTokens', 'temperature', 'stream', 'extraBody', 'abortAfter', 'onText', 'timeoutMs']);
const RESERVED_BODY_KEYS = new Set(['model', 'prompt', 'messages', 'stream']);

export function createTargetClient(opts: TargetClientOptions): TargetClient {
  return new TargetClient(opts);
}

type AbortCause = 'timeout' | 'aborted' | 'too-large' | 'caller';

interface Sink {
  push(chunk: Uint8Array): void;
  end(): void;
}

interface ExchangeSpec {
  method: 'GET' | 'POST';
  path: string;
  body?: StreamedJsonBody;
  accept: string;
  timeoutMs: number;
  maxBytes: number;
  abortAfterMs?: number;
  signal?: AbortSignal;
  /** Builds the sink for a 2xx body; may keep `abort` to stop the exchange (abortAfter.chars). */
  success: (contentType: string, abort: (cause: AbortCause) => void) => Sink;
}

interface ExchangeOutcome {
  /** Set when the exchange did not complete as a 2xx with a fully read body. */
  transport?: TransportClass;
  status?: number;
  error?: { info: TargetErrorInfo; raw: string };
  detail?: string;
  latencyMs: number;
  bytesReceived: number;
}

export class TargetClient {
  /** Server root the client talks to (no credentials, no trailing slash). */
  readonly root: string;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;
  readonly #apiKey: string | undefined;
  readonly #headers: Record<string, string>;
  readonly #dispatcher: Dispatcher;
  readonly #ownsDispatcher: boolean;
  readonly #now: () => number;
  #closed = false;

  constructor(opts: TargetClientOptions) {
    if (typeof opts !== 'object' || opts === null) throw new InvalidTargetArgError('options', 'an object', opts);
    for (const key of Object.keys(opts)) {
      if (!OPTION_KEYS.has(key)) throw new InvalidTargetArgError(`options.${key}`, `one of ${[...OPTION_KEYS].join(', ')} (unknown option)`, 'an unknown key');
    }
    this.root = parseBaseUrl(opts.baseUrl, 'options.baseUrl').root;
    this.timeoutMs = positiveInt(opts.timeoutMs, 'options.timeoutMs', 24 * 3600 * 1000);
    this.maxResponseBytes =
      opts.maxResponseBytes === undefined ? DEFAULT_MAX_RESPONSE_BYTES : positiveInt(opts.maxResponseBytes, 'options.maxResponseBytes', 2 ** 40, 1024);
    if (opts.apiKey !== undefined && (typeof opts.apiKey !== 'string' || opts.apiKey === '' || /[\s\u0000-\u001f\u007f]/.test(opts.apiKey))) {
      throw new InvalidTargetArgError('options.apiKey', 'a non-empty string without whitespace or control characters', opts.apiKey);
    }
    this.#apiKey = opts.apiKey;
    this.#headers = validateHeaders(opts.headers, opts.apiKey !== undefined);
    if (opts.now !== undefined && typeof opts.now !== 'function') throw new InvalidTargetArgError('options.now', 'a function returning milliseconds', opts.now);
    this.#now = opts.now ?? (() => performance.now());
    if (opts.dispatcher !== undefined) {
      if (typeof opts.dispatcher !== 'object' || opts.dispatcher === null || typeof (opts.dispatcher as Dispatcher).dispatch !== 'function') {
        throw new InvalidTargetArgError('options.dispatcher', 'an undici Dispatcher', opts.dispatcher);
      }
      this.#dispatcher = opts.dispatcher;
      this.#ownsDispatcher = false;
    } else {
      this.#dispatcher = new Agent({ connect: { timeout: Math.min(this.timeoutMs, 30_000) } });
      this.#ownsDispatcher = true;
    }
  }

  /** Sends one completion request; resolves with how it went. Throws only for caller errors. */
  async complete(req: CompletionRequest): Promise<CompletionResult> {
    this.#assertOpen();
    validateRequest(req);
    const template = completionTemplate(req);
    const body = req.tokenIds !== undefined ? fixedJsonBody({ ...template, prompt: req.tokenIds }) : streamedJsonBody(template, req.prompt);
    const abortAfter = req.abortAfter;
    const signal = isAbortSignal(abortAfter) ? abortAfter : abortAfter?.signal;
    const abortChars = !isAbortSignal(abortAfter) ? abortAfter?.chars : undefined;
    const abortMs = !isAbortSignal(abortAfter) ? abortAfter?.ms : undefined;

    let generatedChars = 0;
    let ttftMs: number | undefined;
    let reader: ReturnType<typeof createCompletionReader> | undefined;
    const started = this.#now();

    const outcome = await this.#exchange({
      method: 'POST',
      path: req.api === 'chat' ? '/v1/chat/completions' : '/v1/completions',
      body,
      accept: req.stream ? 'text/event-stream, application/json' : 'application/json',
      timeoutMs: req.timeoutMs ?? this.timeoutMs,
      maxBytes: this.maxResponseBytes,
      ...(abortMs !== undefined ? { abortAfterMs: abortMs } : {}),
      ...(signal !== undefined ? { signal } : {}),
      success: (contentType, abort) => {
        reader = createCompletionReader({
          contentType,
          streamRequested: req.stream,
          redact: (text) => this.#redact(text),
          emit: (text) => {
            if (ttftMs === undefined && req.stream) ttftMs = this.#now() - started;
            generatedChars += text.length;
            req.onText?.(text);
            if (abortChars !== undefined && generatedChars >= abortChars) abort('aborted');
          },
        });
        return reader;
      },
    });

    const result: CompletionResult = {
      transport: outcome.transport ?? 'ok',
      generatedChars,
      latencyMs: outcome.latencyMs,
      bytesReceived: outcome.bytesReceived,
      requestBytes: body.byteLength,
      promptChars: body.promptChars,
    };
    if (outcome.status !== undefined) result.status = outcome.status;
    if (ttftMs !== undefined) result.ttftMs = ttftMs;
    if (outcome.detail !== undefined) result.detail = outcome.detail;
    if (outcome.error !== undefined) {
      result.errorBody = this.#redact(outcome.error.info.message);
      result.errorRaw = this.#redact(outcome.error.raw);
    }
    const facts = reader?.facts();
    if (facts !== undefined) {
      if (facts.finishReason !== undefined) result.finishReason = facts.finishReason;
      if (facts.usage !== undefined) result.usage = facts.usage;
      if (req.stream) result.sawDone = facts.sawDone;
      if (outcome.transport === undefined) {
        if (facts.error !== undefined) {
          // An error object in a 2xx body: the server refused or failed after committing to 200.
          const status = statusOfError(facts.error);
          result.transport = status !== undefined && status < 500 ? 'http-4xx' : 'http-5xx';
          result.errorInStream = true;
          result.errorBody = this.#redact(facts.error.message);
          result.errorRaw = this.#redact(bound(facts.errorRaw ?? facts.error.message));
        } else if (facts.malformed !== undefined) {
          result.transport = 'malformed';
          result.detail = this.#redact(facts.malformed);
        }
      } else if (facts.error !== undefined && result.errorBody === undefined) {
        // The stream reported an error and then also broke (timeout, reset): keep what it said.
        result.errorInStream = true;
        result.errorBody = this.#redact(facts.error.message);
        result.errorRaw = this.#redact(bound(facts.errorRaw ?? facts.error.message));
      }
    }
    return result;
  }

  /** GET or POST a small JSON document (introspection). Never throws for target faults. */
  async requestJson(method: 'GET' | 'POST', path: string, json?: unknown, opts: CallOptions = {}): Promise<CallResult<unknown>> {
    const body = json === undefined ? undefined : fixedJsonBody(json);
    return this.#call(method, path, body, opts, 'application/json', () => {
      const parts: Uint8Array[] = [];
      return {
        sink: { push: (c) => parts.push(c), end: () => undefined },
        value: () => {
          // SGLang's server_info echoes its server args, api_key included: which is ours.
          const text = this.#redact(Buffer.concat(parts).toString('utf8'));
          try {
            return { value: JSON.parse(text) as unknown };
          } catch {
            return { malformed: `response is not JSON (starts ${JSON.stringify(text.trim().slice(0, 40))})` };
          }
        },
      };
    });
  }

  /** GET a text document (e.g. /metrics). Never throws for target faults. */
  async requestText(path: string, opts: CallOptions = {}): Promise<CallResult<string>> {
    return this.#call('GET', path, undefined, opts, 'text/plain, */*', () => {
      const parts: Uint8Array[] = [];
      return {
        sink: { push: (c) => parts.push(c), end: () => undefined },
        value: () => ({ value: this.#redact(Buffer.concat(parts).toString('utf8')) }),
      };
    });
  }

  /**
   * POSTs `template` (holding PROMPT_HOLE where the text goes) and counts the tokens in the response
   * (`count`, or the length of `tokens`) without parsing it whole. Never throws for target faults.
   */
  async requestTokenCount(path: string, template: Record<string, unknown>, text: Prompt, opts: CallOptions = {}): Promise<CallResult<number>> {
    const body = streamedJsonBody(template, text);
    // The scanner holds constant memory, so the byte bound does not apply unless the caller sets one.
    return this.#call('POST', path, body, { maxBytes: Number.MAX_SAFE_INTEGER, ...opts }, 'application/json', () => {
      const scanner = createTokenCountScanner();
      return {
        sink: { push: (c) => scanner.push(c), end: () => undefined },
        value: () => {
          const n = scanner.result();
          return n === undefined ? { malformed: 'response has no `count` or `tokens`' } : { value: n };
        },
      };
    });
  }

  /** Closes the client's own dispatcher (not one the caller passed in). Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#ownsDispatcher) await this.#dispatcher.close();
  }

  toJSON(): Record<string, unknown> {
    return {
      root: this.root,
      apiKey: this.#apiKey === undefined ? undefined : '[redacted]',
      // Header values can be secrets too (X-Api-Key and friends): names only.
      headers: Object.keys(this.#headers),
      timeoutMs: this.timeoutMs,
      maxResponseBytes: this.maxResponseBytes,
    };
  }

  toString(): string {
    return `TargetClient(${this.root})`;
  }

  [inspect.custom](): string {
    return `TargetClient ${JSON.stringify(this.toJSON())}`;
  }

  #assertOpen(): void {
    if (this.#closed) throw new TargetError('KVC_TARGET_CLOSED', 'the target client was closed; create a new one');
  }

  #redact(text: string): string {
    const key = this.#apiKey;
    return key === undefined || !text.includes(key) ? text : text.split(key).join('[redacted]');
  }

  async #call<T>(
    method: 'GET' | 'POST',
    path: string,
    body: StreamedJsonBody | undefined,
    opts: CallOptions,
    accept: string,
    makeSink: () => { sink: Sink; value: () => { value?: T; malformed?: string } },
  ): Promise<CallResult<T>> {
    this.#assertOpen();
    if (typeof path !== 'string' || !path.startsWith('/')) throw new InvalidTargetArgError('path', 'a path starting with `/`', path);
    let made: ReturnType<typeof makeSink> | undefined;
    const outcome = await this.#exchange({
      method,
      path,
      ...(body !== undefined ? { body } : {}),
      accept,
      timeoutMs: opts.timeoutMs ?? this.timeoutMs,
      maxBytes: opts.maxBytes ?? this.maxResponseBytes,
      ...(opts.signal !== undefined ? { signal: opts.signal } : {}),
      success: () => {
        made = makeSink();
        return made.sink;
      },
    });
    const result: CallResult<T> = { transport: outcome.transport ?? 'ok', latencyMs: outcome.latencyMs, bytesReceived: outcome.bytesReceived };
    if (outcome.status !== undefined) result.status = outcome.status;
    if (outcome.detail !== undefined) result.detail = outcome.detail;
    if (outcome.error !== undefined) result.errorBody = this.#redact(outcome.error.info.message);
    if (outcome.transport === undefined && made !== undefined) {
      const read = made.value();
      if (read.malformed !== undefined) {
        result.transport = 'malformed';
        result.detail = this.#redact(read.malformed);
      } else if (read.value !== undefined) {
        result.value = read.value;
      }
    }
    return result;
  }

  /** One HTTP exchange under one deadline. Resolves for every target fault; rethrows caller errors. */
  async #exchange(spec: ExchangeSpec): Promise<ExchangeOutcome> {
    const started = this.#now();
    const controller = new AbortController();
    let cause: AbortCause | undefined;
    let callerError: unknown;
    const abort = (why: AbortCause): void => {
      if (cause !== undefined) return;
      cause = why;
      controller.abort(new Error(`kvcanary: ${why}`));
    };
    // A callback of ours that throws is the caller's bug: stop the exchange (the socket goes) and rethrow.
    const onCallerError = (err: unknown): void => {
      callerError ??= err;
      abort('caller');
    };
    const outcome: ExchangeOutcome = { latencyMs: 0, bytesReceived: 0 };
    if (spec.signal?.aborted === true) {
      return { transport: 'aborted', detail: 'aborted before sending', latencyMs: 0, bytesReceived: 0 };
    }
    const timers: NodeJS.Timeout[] = [setTimeout(() => abort('timeout'), spec.timeoutMs)];
    if (spec.abortAfterMs !== undefined) timers.push(setTimeout(() => abort('aborted'), spec.abortAfterMs));
    const onSignal = (): void => abort('aborted');
    spec.signal?.addEventListener('abort', onSignal, { once: true });

    let bodyError: unknown;
    const source = spec.body;
    const headers: Record<string, string> = { ...this.#baseHeaders(), accept: spec.accept };
    let requestBody: Readable | undefined;
    if (source !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(source.byteLength);
      requestBody = Readable.from(
        (async function* guarded() {
          // Only what the source itself throws is its failure: an error thrown in at the yield (the socket
          // failed under the body, e.g. EPIPE when the server answered and closed early) is the transport's.
          let iterator: AsyncIterator<Uint8Array | string>;
          try {
            iterator = (source.chunks() as AsyncIterable<Uint8Array | string>)[Symbol.asyncIterator]();
          } catch (err) {
            bodyError = err;
            throw err;
          }
          let done = false;
          try {
            for (;;) {
              let step: IteratorResult<Uint8Array | string>;
              try {
                step = await iterator.next();
              } catch (err) {
                bodyError = err;
                throw err;
              }
              if (step.done === true) {
                done = true;
                return;
              }
              yield step.value;
            }
          } finally {
            if (!done && bodyError === undefined) await iterator.return?.();
          }
        })(),
        { objectMode: false },
      );
    }

    let sink: Sink | undefined;
    const sourceFailure = (): TargetError =>
      bodyError instanceof TargetError ? bodyError : new PromptSourceError('KVC_PROMPT_SOURCE_FAILED', 'the prompt source failed while streaming', { cause: bodyError });
    try {
      const res = await request(`${this.root}${spec.path}`, {
        method: spec.method,
        headers,
        ...(requestBody !== undefined ? { body: requestBody } : {}),
        dispatcher: this.#dispatcher,
        signal: controller.signal,
        // Our deadline fires first; these are a backstop should it not.
        headersTimeout: spec.timeoutMs + 1000,
        bodyTimeout: spec.timeoutMs + 1000,
      });
      outcome.status = res.statusCode;
      const contentType = headerValue(res.headers['content-type']);
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      const limit = ok ? spec.maxBytes : ERROR_READ_BYTES;
      const errorParts: Uint8Array[] = [];
      if (ok) {
        try {
          sink = spec.success(contentType, abort);
        } catch (err) {
          onCallerError(err);
          throw err;
        }
      }
      let cut = false;
      for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
        const room = limit - outcome.bytesReceived;
        outcome.bytesReceived += chunk.byteLength;
        if (chunk.byteLength > room) {
          // Keep what fits, so an error body's first 64 KiB are still read; then stop.
          const head = chunk.subarray(0, Math.max(0, room));
          if (ok) {
            if (head.byteLength > 0) this.#feed(sink, head, onCallerError);
            abort('too-large');
          } else {
            errorParts.push(head);
          }
          cut = true;
          break;
        }
        if (ok) this.#feed(sink, chunk, onCallerError);
        else errorParts.push(chunk);
        if (callerError !== undefined) throw callerError;
        if (cause !== undefined) break;
      }
      if (cut || cause !== undefined) res.body.destroy();
      if (callerError !== undefined) throw callerError;
      if (!ok) {
        // Redact before bounding: a cut through the key would otherwise leave its first characters.
        const raw = this.#redact(Buffer.concat(errorParts).toString('utf8'));
        const info = readErrorBody(raw, contentType);
        outcome.error = { info, raw: bound(raw) };
        outcome.transport = res.statusCode >= 400 && res.statusCode < 500 ? 'http-4xx' : res.statusCode >= 500 ? 'http-5xx' : 'malformed';
        if (outcome.transport === 'malformed') outcome.detail = `unexpected HTTP status ${res.statusCode} (redirects are not followed)`;
        if (cut) outcome.detail = `error body longer than ${ERROR_READ_BYTES} bytes; read that much`;
      } else if (cause !== undefined) {
        outcome.transport = cause === 'caller' ? 'aborted' : cause;
        outcome.detail = causeDetail(cause, spec);
        // Text that arrived before the cut was already handed on; end the sink so facts are final.
        this.#end(sink, onCallerError);
        if (callerError !== undefined) throw callerError;
      } else {
        this.#end(sink, onCallerError);
        if (callerError !== undefined) throw callerError;
      }
    } catch (err) {
      if (bodyError !== undefined) throw sourceFailure();
      if (callerError !== undefined) throw callerError;
      if (cause !== undefined) {
        outcome.transport = cause === 'caller' ? 'aborted' : cause;
        outcome.detail = causeDetail(cause, spec);
        // A complete event still waiting for its blank line did arrive: let the sink hand it on.
        this.#end(sink, onCallerError);
        if (callerError !== undefined) throw callerError;
      } else {
        const fault = classifyFault(err);
        outcome.transport = fault.transport;
        outcome.detail = this.#redact(fault.detail);
      }
    } finally {
      for (const t of timers) clearTimeout(t);
      spec.signal?.removeEventListener('abort', onSignal);
      outcome.latencyMs = this.#now() - started;
    }
    if (bodyError !== undefined) throw sourceFailure();
    return outcome;
  }

  #feed(sink: Sink | undefined, chunk: Uint8Array, onError: (err: unknown) => void): void {
    try {
      sink?.push(chunk);
    } catch (err) {
      onError(err);
    }
  }

  #end(sink: Sink | undefined, onError: (err: unknown) => void): void {
    try {
      sink?.end();
    } catch (err) {
      onError(err);
    }
  }

  #baseHeaders(): Record<string, string> {
    const headers: Record<string, string> = { 'user-agent': 'kvcanary/0.1', 'accept-encoding': 'identity', ...this.#headers };
    if (this.#apiKey !== undefined) headers['authorization'] = `Bearer ${this.#apiKey}`;
    return headers;
  }
}

function causeDetail(cause: AbortCause, spec: ExchangeSpec): string {
  switch (cause) {
    case 'timeout':
      return `no complete response within ${spec.timeoutMs} ms`;
    case 'too-large':
      return `response exceeded ${spec.maxBytes} bytes and was cut`;
    case 'aborted':
      return 'aborted by the caller';
    case 'caller':
      return 'aborted: a callback threw';
  }
}

/** Error bodies: JSON, plain text, or SSE carrying `data: {"error": ...}` (some servers stream their 400s). */
function readErrorBody(raw: string, contentType: string): TargetErrorInfo {
  const trimmed = raw.trimStart();
  if (contentType.includes('event-stream') || trimmed.startsWith('data:') || trimmed.startsWith('error:')) {
    let first: TargetErrorInfo | undefined;
    const parser = createSseParser((ev) => {
      if (first === undefined && ev.data.trim() !== '' && ev.data.trim() !== '[DONE]') first = parseErrorText(ev.data);
    });
    parser.push(Buffer.from(raw, 'utf8'));
    parser.end();
    if (first !== undefined) return first;
  }
  return parseErrorText(raw);
}

function headerValue(value: string | string[] | undefined): string {
  return Array.isArray(value) ? (value[0] ?? '') : (value ?? '');
}

function completionTemplate(req: CompletionRequest): Record<string, unknown> {
  const template: Record<string, unknown> = { model: req.model, max_tokens: req.maxTokens };
  if (req.temperature !== undefined) template['temperature'] = req.temperature;
  template['stream'] = req.stream;
  const extra = req.extraBody ?? {};
  if (req.stream) {
    // Usage arrives in a final chunk only when asked for (the OpenAI convention that vLLM and llama.cpp follow).
    const userOptions = extra['stream_options'];
    template['stream_options'] = { include_usage: true, ...(isPlainObject(userOptions) ? userOptions : {}) };
  }
  for (const [key, value] of Object.entries(extra)) {
    if (key === 'stream_options' && req.stream) continue;
    template[key] = value;
  }
  // The prompt goes last: the small fields stay at the front of the body, where truncated logs show them.
  if (req.api === 'chat') {
    const messages: unknown[] = [];
    if (req.system !== undefined) messages.push({ role: 'system', content: req.system });
    messages.push({ role: 'user', content: PROMPT_HOLE });
    template['messages'] = messages;
  } else {
    template['prompt'] = PROMPT_HOLE;
  }
  return template;
}

function validateRequest(req: CompletionRequest): void {
  if (typeof req !== 'object' || req === null) throw new InvalidTargetArgError('req', 'an object', req);
  for (const key of Object.keys(req)) {
    if (!REQUEST_KEYS.has(key)) throw new InvalidTargetArgError(`req.${key}`, `one of ${[...REQUEST_KEYS].join(', ')} (unknown field)`, 'an unknown key');
  }
  if (req.api !== 'completions' && req.api !== 'chat') throw new InvalidTargetArgError('req.api', "'completions' or 'chat'", req.api);
  if (typeof req.model !== 'string' || req.model === '') throw new InvalidTargetArgError('req.model', 'a non-empty string', req.model);
  const prompt = req.prompt as unknown;
  if (typeof prompt !== 'string' && !(typeof prompt === 'object' && prompt !== null && typeof (prompt as PromptSource).chunks === 'function')) {
    throw new InvalidTargetArgError('req.prompt', 'a string or a PromptSource ({chunks(): Iterable<string>})', prompt);
  }
  if (req.tokenIds !== undefined) {
    const ids = req.tokenIds as unknown;
    if (req.api !== 'completions') throw new InvalidTargetArgError('req.tokenIds', "undefined unless api is 'completions'", ids);
    if (!Array.isArray(ids) || ids.length === 0 || !ids.every((t) => Number.isInteger(t) && t >= 0)) {
      throw new InvalidTargetArgError('req.tokenIds', 'a non-empty array of integers >= 0', ids);
    }
    if (prompt !== '') throw new InvalidTargetArgError('req.prompt', "'' when tokenIds are given", prompt);
  }
  if (req.system !== undefined) {
    if (req.api !== 'chat') throw new InvalidTargetArgError('req.system', "undefined unless api is 'chat'", req.system);
    if (typeof req.system !== 'string') throw new InvalidTargetArgError('req.system', 'a string', req.system);
  }
  if (!Number.isInteger(req.maxTokens) || req.maxTokens < 0) throw new InvalidTargetArgError('req.maxTokens', 'an integer >= 0', req.maxTokens);
  if (req.temperature !== undefined && (typeof req.temperature !== 'number' || !Number.isFinite(req.temperature) || req.temperature < 0)) {
    throw new InvalidTargetArgError('req.temperature', 'a finite number >= 0', req.temperature);
  }
  if (typeof req.stream !== 'boolean') throw new InvalidTargetArgError('req.stream', 'a boolean', req.stream);
  if (req.extraBody !== undefined) {
    if (!isPlainObject(req.extraBody)) throw new InvalidTargetArgError('req.extraBody', 'a plain object', req.extraBody);
    for (const key of Object.keys(req.extraBody)) {
      if (RESERVED_BODY_KEYS.has(key)) throw new InvalidTargetArgError(`req.extraBody.${key}`, 'absent (set by the client from the request)', req.extraBody[key]);
    }
  }
  const after = req.abortAfter;
  if (after !== undefined && !isAbortSignal(after)) {
    if (!isPlainObject(after)) throw new InvalidTargetArgError('req.abortAfter', 'an AbortSignal or {ms?, chars?, signal?}', after);
    for (const key of Object.keys(after)) {
      if (key !== 'ms' && key !== 'chars' && key !== 'signal') throw new InvalidTargetArgError(`req.abortAfter.${key}`, 'absent (only ms, chars and signal are known)', 'an unknown key');
    }
    if (after.ms === undefined && after.chars === undefined && after.signal === undefined) {
      throw new InvalidTargetArgError('req.abortAfter', 'at least one of ms, chars or signal', after);
    }
    if (after.signal !== undefined && !isAbortSignal(after.signal)) throw new InvalidTargetArgError('req.abortAfter.signal', 'an AbortSignal', after.signal);
    if (after.ms !== undefined && (typeof after.ms !== 'number' || !Number.isFinite(after.ms) || after.ms < 0)) {
      throw new InvalidTargetArgError('req.abortAfter.ms', 'a finite number >= 0', after.ms);
    }
    if (after.chars !== undefined && (typeof after.chars !== 'number' || !Number.isInteger(after.chars) || after.chars < 0)) {
      throw new InvalidTargetArgError('req.abortAfter.chars', 'an integer >= 0', after.chars);
    }
  }
  if (req.onText !== undefined && typeof req.onText !== 'function') throw new InvalidTargetArgError('req.onText', 'a function', req.onText);
  if (req.timeoutMs !== undefined) positiveInt(req.timeoutMs, 'req.timeoutMs', 24 * 3600 * 1000);
}

function validateHeaders(headers: unknown, hasApiKey: boolean): Record<string, string> {
  if (headers === undefined) return {};
  if (!isPlainObject(headers)) throw new InvalidTargetArgError('options.headers', 'an object of header name to string value', headers);
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!HEADER_NAME.test(name)) throw new InvalidTargetArgError(`options.headers[${JSON.stringify(name.slice(0, 40))}]`, 'a valid HTTP header name', 'an invalid name');
    const lower = name.toLowerCase();
    if (RESERVED_HEADERS.has(lower)) throw new InvalidTargetArgError(`options.headers.${name}`, 'absent (the client sets it)', value);
    if (lower === 'authorization' && hasApiKey) throw new InvalidTargetArgError('options.headers.authorization', 'absent when apiKey is set', value);
    if (typeof value !== 'string' || /[\r\n\u0000]/.test(value)) throw new InvalidTargetArgError(`options.headers.${name}`, 'a string without CR, LF or NUL', value);
    out[lower] = value;
  }
  return out;
}

function positiveInt(value: unknown, field: string, max: number, min = 1): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidTargetArgError(field, `an integer between ${min} and ${max}`, value);
  }
  return value;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

function isAbortSignal(value: unknown): value is AbortSignal {
  return typeof AbortSignal !== 'undefined' && value instanceof AbortSignal;
}
