/**
 * Recognises "this request is over a length limit" rejections in the words real engines use, so a
 * scenario can tell a clean over-limit rejection from any other error. Precision matters more than
 * recall: a 400 taken for an over-limit rejection when it was something else (a malformed request) would
 * be read as "the limit held". Rules therefore match each engine's sentence, not loose keywords; one
 * generic rule at the end needs an explicit context-length phrase or code.
 *
 * Sources (all HTTP 400; the shared design notes, ENDPOINTS.md, list where each was read):
 * - vLLM (renderers/params.py): "You passed N input tokens and requested K output tokens. However, the
 *   model's context length is only M tokens, resulting in a maximum input length of X tokens." and the
 *   pre-tokenisation check "You passed C input characters ... (at most Y characters)"; older releases:
 *   "This model's maximum context length is M tokens. However, your request has N input tokens." /
 *   "... you requested N tokens (P in the messages, K in the completion)." / "'max_tokens' or
 *   'max_completion_tokens' is too large: K. This model's maximum context length is M tokens and your
 *   request has N input tokens (K > M - N)." / "... your prompt contains [at least] N input tokens ...".
 * - SGLang: tokenizer manager "The input (N tokens) is longer than the model's context length (M tokens)."
 *   and "Requested token count exceeds the model's maximum context length of M tokens. You requested a
 *   total of T tokens: N tokens from the input messages and K tokens for the completion."; scheduler
 *   validate_input_length "Input length (N tokens) exceeds the maximum allowed length (M tokens)." (M is
 *   min(context, pool) − 1, so it may be the pool binding); PD "Request RID exceeds the maximum number of
 *   tokens: N > POOL".
 * - llama.cpp: {"type": "exceed_context_size_error", "message": "request (N tokens) exceeds the available
 *   context size (M tokens), try increasing it", "n_prompt_tokens": N, "n_ctx": M}; older builds say "the
 *   request exceeds the available context size, try increasing the context size or enable context shift".
 * - OpenAI: code context_length_exceeded, "This model's maximum context length is M tokens. However, your
 *   messages resulted in N tokens." or "Input tokens exceed the configured limit of M tokens. Your
 *   messages resulted in N tokens."
 * - The bundled engine: OpenAI's sentence and code for the context limit, and "The prompt (N tokens)
 *   exceeds the KV cache pool capacity (M tokens)." with code kv_pool_capacity_exceeded.
 */
import { isRecord } from './error-body.js';

export type RejectionDialect = 'vllm' | 'sglang' | 'llamacpp' | 'openai' | 'engine' | 'unknown';

export interface Rejection {
  /** The target refused the request because it is over a length limit. */
  overLimit: boolean;
  dialect: RejectionDialect;
  /** The limit the target named, in tokens. */
  limit?: number;
  /** What the limit bounds: the context window, the KV pool, or an input cap that may be either (SGLang). */
  limitKind?: 'context' | 'pool' | 'input';
  /** The prompt's size as the target counted it, in tokens (absent when only characters were named). */
  count?: number;
  /** Which rule matched, for evidence and debugging. */
  rule?: string;
}

interface Rule {
  name: string;
  dialect: RejectionDialect;
  limitKind: NonNullable<Rejection['limitKind']>;
  pattern: RegExp;
  /** Capture-group indices of the limit and the prompt count. */
  limit?: number;
  count?: number;
}

const N = '(\\d[\\d,]*)';

// Ordered most specific first: the first match wins.
const RULES: Rule[] = [
  {
    name: 'engine-kv-pool',
    dialect: 'engine',
    limitKind: 'pool',
    pattern: re(`The prompt \\(${N} tokens\\) exceeds the KV cache pool capacity \\(${N} tokens\\)`),
    count: 1,
    limit: 2,
  },
  {
    name: 'vllm-input-tokens',
    dialect: 'vllm',
    limitKind: 'context',
    pattern: re(`You passed ${N} input tokens and requested ${N} output tokens\\. However, the model's context length is only ${N} tokens`),
    count: 1,
    limit: 3,
  },
  {
    name: 'vllm-input-chars',
    dialect: 'vllm',
    limitKind: 'context',
    pattern: re(`You passed ${N} input characters and requested ${N} output tokens\\. However, the model's context length is only ${N} tokens`),
    limit: 3,
  },
  {
    name: 'vllm-max-tokens-too-large',
    dialect: 'vllm',
    limitKind: 'context',
    pattern: re(`'max_tokens' or 'max_completion_tokens' is too large: ${N}\\. This model's maximum context length is ${N} tokens and your request has ${N} input tokens`),
    limit: 2,
    count: 3,
  },
  {
    name: 'context-requested-split',
    dialect: 'openai',
    limitKind: 'context',
    pattern: re(`maximum context length is ${N} tokens\\. However, you requested ${N} tokens \\(${N} in the messages, ${N} in the completion\\)`),
    limit: 1,
    count: 3,
  },
  {
    name: 'context-request-has',
    dialect: 'vllm',
    limitKind: 'context',
    pattern: re(`maximum context length is ${N} tokens\\. However, your request has ${N} input tokens`),
    limit: 1,
    count: 2,
  },
  {
    name: 'context-prompt-contains',
    dialect: 'vllm',
    limitKind: 'context',
    pattern: re(`maximum context length is ${N} tokens\\. However, you requested ${N} output tokens and your prompt contains (?:at least )?${N} input tokens`),
    limit: 1,
    count: 3,
  },
  {
    name: 'openai-messages-resulted',
    dialect: 'openai',
    limitKind: 'context',
    pattern: re(`maximum context length is ${N} tokens\\. However, your messages resulted in ${N} tokens`),
    limit: 1,
    count: 2,
  },
  {
    name: 'openai-configured-limit',
    dialect: 'openai',
    limitKind: 'context',
    pattern: re(`Input tokens exceed the configured limit of ${N} tokens\\. Your messages resulted in ${N} tokens`),
    limit: 1,
    count: 2,
  },
  {
    name: 'context-requested-total',
    dialect: 'openai',
    limitKind: 'context',
    pattern: re(`maximum context length is ${N} tokens\\. However, you requested ${N} tokens`),
    limit: 1,
    count: 2,
  },
  {
    name: 'sglang-input-longer',
    dialect: 'sglang',
    limitKind: 'context',
    pattern: re(`The input \\(${N} tokens\\) is longer than the model's context length \\(${N} tokens\\)`),
    count: 1,
    limit: 2,
  },
  {
    name: 'sglang-requested-total',
    dialect: 'sglang',
    limitKind: 'context',
    pattern: re(`Requested token count exceeds the model's maximum context length of ${N} tokens\\. You requested a total of ${N} tokens: ${N} tokens from the input`),
    limit: 1,
    count: 3,
  },
  {
    name: 'sglang-max-allowed-length',
    dialect: 'sglang',
    limitKind: 'input',
    pattern: re(`Input length \\(${N} tokens\\) exceeds the maximum allowed length \\(${N} tokens\\)`),
    count: 1,
    limit: 2,
  },
  {
    name: 'sglang-pd-max-tokens',
    dialect: 'sglang',
    limitKind: 'pool',
    pattern: re(`Request \\S+ exceeds the maximum number of tokens: ${N} > ${N}`),
    count: 1,
    limit: 2,
  },
  {
    name: 'llamacpp-context-size',
    dialect: 'llamacpp',
    limitKind: 'context',
    pattern: re(`request \\(${N} tokens\\) exceeds the available context size \\(${N} tokens\\)`),
    count: 1,
    limit: 2,
  },
  {
    name: 'llamacpp-context-size-old',
    dialect: 'llamacpp',
    limitKind: 'context',
    pattern: re('exceeds the available context size'),
  },
  {
    name: 'context-maximum',
    dialect: 'unknown',
    limitKind: 'context',
    pattern: re(`maximum context length is ${N} tokens`),
    limit: 1,
  },
];

/** Codes and types that name an over-limit rejection on their own. */
const CODES: Record<string, { dialect: RejectionDialect; limitKind: NonNullable<Rejection['limitKind']> }> = {
  kv_pool_capacity_exceeded: { dialect: 'engine', limitKind: 'pool' },
  context_length_exceeded: { dialect: 'openai', limitKind: 'context' },
  exceed_context_size_error: { dialect: 'llamacpp', limitKind: 'context' },
};

const GENERIC = /context[ _-]?(?:length|window|size)[ _-]?(?:exceeded|is exceeded)|(?:longer than|exceeds?|over) (?:the )?(?:model'?s? )?(?:maximum )?context (?:length|window|size)|prompt is too long/i;

/**
 * Classifies a target's error. `errorText` is best the raw body (CompletionResult.errorRaw), JSON or not;
 * a parsed message works too, with fewer fields to go on.
 */
export function classifyRejection(status: number | undefined, errorText: string | undefined): Rejection {
  const text = errorText ?? '';
  const fields = jsonFields(text);
  const message = fields.message ?? text;
  const haystacks = fields.message !== undefined && fields.message !== text ? [message, text] : [text];

  for (const rule of RULES) {
    for (const hay of haystacks) {
      const m = rule.pattern.exec(hay);
      if (m === null) continue;
      const out: Rejection = { overLimit: true, dialect: refineDialect(rule, fields), limitKind: rule.limitKind, rule: rule.name };
      const limit = rule.limit !== undefined ? num(m[rule.limit]) : undefined;
      const count = rule.count !== undefined ? num(m[rule.count]) : undefined;
      if (limit !== undefined) out.limit = limit;
      if (count !== undefined) out.count = count;
      // llama.cpp's older message names no numbers; its JSON fields do.
      if (out.limit === undefined && fields.nCtx !== undefined) out.limit = fields.nCtx;
      if (out.count === undefined && fields.nPromptTokens !== undefined) out.count = fields.nPromptTokens;
      return out;
    }
  }

  for (const key of [fields.code, fields.type]) {
    const known = key !== undefined ? CODES[key] : undefined;
    if (known === undefined) continue;
    const out: Rejection = { overLimit: true, dialect: known.dialect, limitKind: known.limitKind, rule: `code:${key}` };
    if (fields.nCtx !== undefined) out.limit = fields.nCtx;
    if (fields.nPromptTokens !== undefined) out.count = fields.nPromptTokens;
    return out;
  }

  if (GENERIC.test(message) && (status === undefined || (status >= 400 && status < 500))) {
    return { overLimit: true, dialect: 'unknown', limitKind: 'context', rule: 'generic' };
  }
  return { overLimit: false, dialect: 'unknown' };
}

/** classifyRejection over a CompletionResult's fields. */
export function rejectionOf(result: { status?: number; errorRaw?: string; errorBody?: string }): Rejection {
  return classifyRejection(result.status, result.errorRaw ?? result.errorBody);
}

interface Fields {
  message?: string;
  code?: string;
  type?: string;
  nPromptTokens?: number;
  nCtx?: number;
}

/** The fields of a JSON error body, wherever the server nested them. */
function jsonFields(text: string): Fields {
  const trimmed = text.trim();
  if (!trimmed.startsWith('{')) return {};
  let value: unknown;
  try {
    value = JSON.parse(trimmed);
  } catch {
    return {};
  }
  let rec: unknown = value;
  for (let i = 0; i < 3 && isRecord(rec) && isRecord(rec['error']); i++) rec = rec['error'];
  if (!isRecord(rec)) return {};
  const out: Fields = {};
  const message = rec['message'] ?? (isRecord(value) ? value['detail'] : undefined);
  if (typeof message === 'string') out.message = message;
  const code = rec['code'];
  if (typeof code === 'string' || typeof code === 'number') out.code = String(code);
  if (typeof rec['type'] === 'string') out.type = rec['type'];
  if (typeof rec['n_prompt_tokens'] === 'number') out.nPromptTokens = rec['n_prompt_tokens'];
  if (typeof rec['n_ctx'] === 'number') out.nCtx = rec['n_ctx'];
  return out;
}

/** OpenAI's sentences are shared: vLLM's older releases and the bundled engine say the same words. */
function refineDialect(rule: Rule, fields: Fields): RejectionDialect {
  if (fields.code === 'kv_pool_capacity_exceeded') return 'engine';
  if (rule.dialect === 'openai' || rule.dialect === 'unknown') {
    if (fields.code === 'context_length_exceeded') return 'openai';
    if (fields.type === 'BadRequestError' || fields.code === '400') return 'vllm';
    if (fields.type === 'exceed_context_size_error') return 'llamacpp';
  }
  return rule.dialect;
}

function re(source: string): RegExp {
  // Messages are matched loosely on spacing and case: wording drifts between releases, and proxies reflow text.
  return new RegExp(source.replace(/ /g, '\\s+'), 'i');
}

function num(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text.replace(/,/g, ''));
  return Number.isSafeInteger(n) ? n : undefined;
}
