/**
 * Parses and validates the JSON bodies of the OpenAI-compatible endpoints into typed requests. Every
 * error names the field, what was expected and what was got. Unknown fields are ignored, as OpenAI and
 * vLLM do; fields that would change the output in ways this engine does not implement (n > 1, logprobs,
 * echo) are refused rather than silently ignored.
 */
import { BOS, CHAT_ROLES, encodePrompt, renderChat, VOCAB_SIZE, type ChatMessage, type ChatRole } from '../tokenizer.js';
import type { PromptKind } from '../admission.js';
import type { SamplingParams } from '../sampler.js';
import { ApiError, invalidParam } from './api-error.js';

export interface ParseContext {
  modelId: string;
  contextTokens: number;
  defaultSeed: number;
}

export interface GenerationParams {
  promptTokens: Uint16Array;
  promptKind: PromptKind;
  maxTokens: number;
  sampling: SamplingParams;
  stop: string[];
  stream: boolean;
  includeUsage: boolean;
  /** vLLM's `cache_salt`. */
  cacheSalt?: string;
}

type Obj = Record<string, unknown>;

function show(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  if (text.length > 60) text = text.slice(0, 57) + '...';
  return `${text} (${Array.isArray(value) ? 'array' : value === null ? 'null' : typeof value})`;
}

function expectObject(body: unknown): Obj {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ApiError(400, `The request body must be a JSON object, got ${show(body)}.`, { code: 'invalid_type' });
  }
  return body as Obj;
}

const present = (v: unknown): boolean => v !== undefined && v !== null;

function checkModel(body: Obj, ctx: ParseContext): void {
  const model = body['model'];
  if (!present(model)) return; // optional, as in vLLM: the served model is used
  if (typeof model !== 'string') throw invalidParam('model', `\`model\` must be a string, got ${show(model)}.`, 'invalid_type');
  if (model !== ctx.modelId) {
    throw new ApiError(404, `The model \`${model}\` does not exist. This server serves \`${ctx.modelId}\`.`, {
      type: 'not_found_error',
      code: 'model_not_found',
      param: 'model',
    });
  }
}

function int(body: Obj, field: string, min: number, max: number): number | undefined {
  const v = body[field];
  if (!present(v)) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw invalidParam(field, `\`${field}\` must be an integer in [${min}, ${max}], got ${show(v)}.`, typeof v === 'number' ? 'invalid_value' : 'invalid_type');
  }
  return v;
}

function num(body: Obj, field: string, min: number, max: number, minExclusive = false): number | undefined {
  const v = body[field];
  if (!present(v)) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v > max || (minExclusive ? v <= min : v < min)) {
    throw invalidParam(
      field,
      `\`${field}\` must be a number in ${minExclusive ? '(' : '['}${min}, ${max}], got ${show(v)}.`,
      typeof v === 'number' ? 'invalid_value' : 'invalid_type',
    );
  }
  return v;
}

function bool(body: Obj, field: string): boolean | undefined {
  const v = body[field];
  if (!present(v)) return undefined;
  if (typeof v !== 'boolean') throw invalidParam(field, `\`${field}\` must be a boolean, got ${show(v)}.`, 'invalid_type');
  return v;
}

function stopStrings(body: Obj): string[] {
  const v = body['stop'];
  if (!present(v)) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.length > 4 || list.some((s) => typeof s !== 'string' || s.length === 0 || s.length > 1024)) {
    throw invalidParam('stop', `\`stop\` must be a non-empty string or an array of up to 4 non-empty strings, got ${show(v)}.`);
  }
  return list as string[];
}

function refuseUnsupported(body: Obj): void {
  const n = body['n'];
  if (present(n) && n !== 1) throw invalidParam('n', `Only \`n\` = 1 is supported, got ${show(n)}.`, 'unsupported_value');
  const bestOf = body['best_of'];
  if (present(bestOf) && bestOf !== 1) throw invalidParam('best_of', `Only \`best_of\` = 1 is supported, got ${show(bestOf)}.`, 'unsupported_value');
  const logprobs = body['logprobs'];
  if (present(logprobs) && logprobs !== false && logprobs !== 0) {
    throw invalidParam('logprobs', `\`logprobs\` is not supported by this engine, got ${show(logprobs)}.`, 'unsupported_value');
  }
  const echo = body['echo'];
  if (present(echo) && echo !== false) throw invalidParam('echo', `\`echo\` is not supported by this engine, got ${show(echo)}.`, 'unsupported_value');
}

/** vLLM's `cache_salt`: a non-empty string (bounded: it is hashed per request). */
function cacheSalt(body: Obj): string | undefined {
  const v = body['cache_salt'];
  if (!present(v)) return undefined;
  if (typeof v !== 'string' || v.length === 0 || v.length > 1024) {
    throw invalidParam('cache_salt', `\`cache_salt\` must be a non-empty string of at most 1024 characters, got ${show(v)}.`, typeof v === 'string' ? 'invalid_value' : 'invalid_type');
  }
  return v;
}

function common(body: Obj, ctx: ParseContext): Omit<GenerationParams, 'promptTokens' | 'promptKind' | 'maxTokens'> {
  refuseUnsupported(body);
  const salt = cacheSalt(body);
  const temperature = num(body, 'temperature', 0, 2) ?? 1;
  const topP = num(body, 'top_p', 0, 1, true) ?? 1;
  const seed = int(body, 'seed', Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
  const stream = bool(body, 'stream') ?? false;
  const options = body['stream_options'];
  let includeUsage = false;
  if (present(options)) {
    if (typeof options !== 'object' || Array.isArray(options)) {
      throw invalidParam('stream_options', `\`stream_options\` must be an object, got ${show(options)}.`, 'invalid_type');
    }
    if (!stream) throw invalidParam('stream_options', '`stream_options` is only allowed when `stream` is true.');
    includeUsage = bool(options as Obj, 'include_usage') ?? false;
  }
  return {
    sampling: { temperature, topP, seed: seed === undefined ? ctx.defaultSeed : Number(BigInt.asUintN(32, BigInt(seed))) },
    stop: stopStrings(body),
    stream,
    includeUsage,
    ...(salt !== undefined ? { cacheSalt: salt } : {}),
  };
}

function tokenIds(list: unknown[], field: string): Uint16Array {
  const out = new Uint16Array(list.length);
  for (let i = 0; i < list.length; i++) {
    const t = list[i];
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t >= VOCAB_SIZE) {
      throw invalidParam(field, `\`${field}\` token ids must be integers in [0, ${VOCAB_SIZE - 1}], got ${show(t)} at index ${i}.`);
    }
    out[i] = t;
  }
  return out;
}

/** `prompt`: a string, an array of one string, or token ids (used as given). */
function promptTokens(body: Obj): Uint16Array {
  const p = body['prompt'];
  if (typeof p === 'string') return encodePrompt(p);
  if (Array.isArray(p)) {
    if (p.length === 1 && typeof p[0] === 'string') return encodePrompt(p[0]);
    if (p.length > 0 && p.every((x) => typeof x === 'number')) return tokenIds(p, 'prompt');
    if (p.length === 1 && Array.isArray(p[0])) return tokenIds(p[0] as unknown[], 'prompt');
    throw invalidParam('prompt', `\`prompt\` must be a string, an array of one string, or an array of token ids; got ${show(p)}.`);
  }
  if (p === undefined || p === null) throw invalidParam('prompt', '`prompt` is required.', 'missing_required_parameter');
  throw invalidParam('prompt', `\`prompt\` must be a string, got ${show(p)}.`, 'invalid_type');
}

/** 1 is the least a request can ask for; anything over the context limit is refused by admission with the counts. */
const MAX_TOKENS_CEILING = Number.MAX_SAFE_INTEGER;

export function parseCompletionRequest(raw: unknown, ctx: ParseContext): GenerationParams {
  const body = expectObject(raw);
  checkModel(body, ctx);
  const tokens = promptTokens(body);
  const maxTokens = int(body, 'max_tokens', 1, MAX_TOKENS_CEILING) ?? 16;
  return { promptTokens: tokens, promptKind: 'prompt', maxTokens, ...common(body, ctx) };
}

function messageContent(m: Obj, i: number): string {
  const c = m['content'];
  if (typeof c === 'string') return c;
  if (c === null || c === undefined) {
    if (m['role'] === 'assistant') return '';
    throw invalidParam(`messages[${i}].content`, `\`messages[${i}].content\` is required.`, 'missing_required_parameter');
  }
  if (Array.isArray(c)) {
    return c
      .map((part: unknown, j) => {
        const p = part as Obj;
        if (typeof part !== 'object' || part === null || p['type'] !== 'text' || typeof p['text'] !== 'string') {
          throw invalidParam(
            `messages[${i}].content[${j}]`,
            `\`messages[${i}].content[${j}]\` must be {"type": "text", "text": string}; only text parts are supported, got ${show(part)}.`,
          );
        }
        return p['text'] as string;
      })
      .join('');
  }
  throw invalidParam(`messages[${i}].content`, `\`messages[${i}].content\` must be a string or an array of text parts, got ${show(c)}.`, 'invalid_type');
}

export function parseMessages(body: Obj): ChatMessage[] {
  const list = body['messages'];
  if (!Array.isArray(list) || list.length === 0) {
    throw invalidParam('messages', `\`messages\` must be a non-empty array, got ${show(list)}.`, present(list) ? 'invalid_type' : 'missing_required_parameter');
  }
  return list.map((raw: unknown, i) => {
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      throw invalidParam(`messages[${i}]`, `\`messages[${i}]\` must be an object, got ${show(raw)}.`, 'invalid_type');
    }
    const m = raw as Obj;
    const role = m['role'];
    if (typeof role !== 'string' || !(CHAT_ROLES as readonly string[]).includes(role)) {
      throw invalidParam(`messages[${i}].role`, `\`messages[${i}].role\` must be one of ${CHAT_ROLES.join(', ')}, got ${show(role)}.`);
    }
    return { role: role as ChatRole, content: messageContent(m, i) };
  });
}

/** Chat's default completion budget when the request sets none: what is left of the context, capped. */
const CHAT_DEFAULT_MAX_TOKENS = 512;

export function parseChatRequest(raw: unknown, ctx: ParseContext): GenerationParams {
  const body = expectObject(raw);
  checkModel(body, ctx);
  const messages = parseMessages(body);
  const tokens = encodePrompt(renderChat(messages));
  const explicit = int(body, 'max_completion_tokens', 1, MAX_TOKENS_CEILING) ?? int(body, 'max_tokens', 1, MAX_TOKENS_CEILING);
  const maxTokens = explicit ?? Math.max(1, Math.min(CHAT_DEFAULT_MAX_TOKENS, ctx.contextTokens - tokens.length));
  return { promptTokens: tokens, promptKind: 'messages', maxTokens, ...common(body, ctx) };
}

/** vLLM's /tokenize: {model?, prompt} or {model?, messages}; add_special_tokens=false drops BOS. */
export function parseTokenizeRequest(raw: unknown, ctx: ParseContext): Uint16Array {
  const body = expectObject(raw);
  checkModel(body, ctx);
  let tokens: Uint16Array;
  if (present(body['messages'])) {
    tokens = encodePrompt(renderChat(parseMessages(body)));
  } else if (typeof body['prompt'] === 'string') {
    tokens = encodePrompt(body['prompt']);
  } else {
    throw invalidParam('prompt', `\`prompt\` (a string) or \`messages\` is required, got prompt ${show(body['prompt'])}.`, 'missing_required_parameter');
  }
  const special = bool(body, 'add_special_tokens') ?? true;
  return special || tokens[0] !== BOS ? tokens : tokens.subarray(1);
}
