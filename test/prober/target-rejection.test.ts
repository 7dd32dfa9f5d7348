import { describe, expect, it } from 'vitest';
import { classifyRejection, rejectionOf, type Rejection } from '../../prober/src/probe/target/rejection.js';

// Real error bodies as the engines write them (wording from their sources and from users' reports).
const OVER_LIMIT: Array<[string, number, string, Partial<Rejection>]> = [
  [
    'vLLM recent (renderers/params.py _token_len_check)',
    400,
    JSON.stringify({
      error: {
        message:
          "You passed 8193 input tokens and requested 0 output tokens. However, the model's context length is only 8192 tokens, resulting in a maximum input length of 8192 tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=8193)",
        type: 'BadRequestError',
        param: 'input_tokens',
        code: 400,
      },
    }),
    { dialect: 'vllm', limit: 8192, count: 8193, limitKind: 'context' },
  ],
  [
    'vLLM recent, character pre-check (no token count)',
    400,
    JSON.stringify({
      error: {
        message:
          "You passed 4200000 input characters and requested 16 output tokens. However, the model's context length is only 131072 tokens, resulting in a maximum input length of 131056 tokens (at most 3931680 characters). Please reduce the length of the input prompt.",
        type: 'BadRequestError',
        param: 'input_text',
        code: 400,
      },
    }),
    { dialect: 'vllm', limit: 131072, count: undefined },
  ],
  [
    'vLLM 0.6-0.9 (request has N input tokens)',
    400,
    JSON.stringify({
      object: 'error',
      message: "This model's maximum context length is 4096 tokens. However, your request has 5000 input tokens. Please reduce the length of the input messages.",
      type: 'BadRequestError',
      param: null,
      code: 400,
    }),
    { dialect: 'vllm', limit: 4096, count: 5000 },
  ],
  [
    'vLLM old (requested N tokens, P in the messages)',
    400,
    JSON.stringify({
      object: 'error',
      message:
        "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens (2090 in the messages, 10 in the completion). Please reduce the length of the messages or completion.",
      type: 'BadRequestError',
      param: null,
      code: 400,
    }),
    { dialect: 'vllm', limit: 2048, count: 2090 },
  ],
  [
    'vLLM max_tokens too large for the remaining window',
    400,
    JSON.stringify({
      error: {
        message:
          "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None",
        type: 'BadRequestError',
        param: null,
        code: 400,
      },
    }),
    { dialect: 'vllm', limit: 4096, count: 2778 },
  ],
  [
    'vLLM 0.19 (prompt contains N input tokens)',
    400,
    JSON.stringify({
      error: {
        message:
          "This model's maximum context length is 32768 tokens. However, you requested 4096 output tokens and your prompt contains at least 30000 input tokens, for a total of at least 34096 tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
        type: 'BadRequestError',
        code: 400,
      },
    }),
    { dialect: 'vllm', limit: 32768, count: 30000 },
  ],
  [
    'SGLang tokenizer manager',
    400,
    JSON.stringify({ object: 'error', message: "The input (9000 tokens) is longer than the model's context length (8192 tokens).", type: 'BadRequestError', param: null, code: 400 }),
    { dialect: 'sglang', limit: 8192, count: 9000, limitKind: 'context' },
  ],
  [
    'SGLang total tokens',
    400,
    JSON.stringify({
      object: 'error',
      message:
        "Requested token count exceeds the model's maximum context length of 8192 tokens. You requested a total of 9000 tokens: 8000 tokens from the input messages and 1000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
      type: 'BadRequestError',
      code: 400,
    }),
    { dialect: 'sglang', limit: 8192, count: 8000 },
  ],
  [
    'SGLang scheduler validate_input_length (pool may bind)',
    400,
    JSON.stringify({
      error: {
        object: 'error',
        message: 'Input length (700000 tokens) exceeds the maximum allowed length (681279 tokens). Use a shorter input or enable --allow-auto-truncate.',
        type: 'BadRequestError',
        param: null,
        code: 400,
      },
    }),
    { dialect: 'sglang', limit: 681279, count: 700000, limitKind: 'input' },
  ],
  [
    'SGLang PD prefill queue',
    400,
    JSON.stringify({ object: 'error', message: 'Request 3f2a9c exceeds the maximum number of tokens: 700000 > 681280', type: 'BadRequestError', code: 400 }),
    { dialect: 'sglang', limit: 681280, count: 700000, limitKind: 'pool' },
  ],
  [
    'llama.cpp recent',
    400,
    JSON.stringify({
      error: {
        code: 400,
        message: 'request (4476 tokens) exceeds the available context size (4096 tokens), try increasing it',
        type: 'exceed_context_size_error',
        n_prompt_tokens: 4476,
        n_ctx: 4096,
      },
    }),
    { dialect: 'llamacpp', limit: 4096, count: 4476 },
  ],
  [
    'llama.cpp older message (numbers only in fields)',
    400,
    JSON.stringify({
      error: {
        code: 400,
        message: 'the request exceeds the available context size, try increasing the context size or enable context shift',
        type: 'exceed_context_size_error',
        n_prompt_tokens: 5000,
        n_ctx: 4096,
      },
    }),
    { dialect: 'llamacpp', limit: 4096, count: 5000 },
  ],
  [
    'OpenAI',
    400,
    JSON.stringify({
      error: {
        message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.",
        type: 'invalid_request_error',
        param: 'messages',
        code: 'context_length_exceeded',
      },
    }),
    { dialect: 'openai', limit: 128000, count: 130512 },
  ],
  [
    'OpenAI configured limit',
    400,
    JSON.stringify({
      error: {
        message: 'Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 509178 tokens. Please reduce the length of the messages.',
        type: 'invalid_request_error',
        code: 'context_length_exceeded',
      },
    }),
    { dialect: 'openai', limit: 272000, count: 509178 },
  ],
  [
    'bundled engine, context limit (speaks OpenAI)',
    400,
    JSON.stringify({
      error: {
        message:
          "This model's maximum context length is 16384 tokens. However, you requested 17000 tokens (16990 in the messages, 10 in the completion). Please reduce the length of the messages or completion.",
        type: 'invalid_request_error',
        param: 'messages',
        code: 'context_length_exceeded',
      },
    }),
    { dialect: 'openai', limit: 16384, count: 16990, limitKind: 'context' },
  ],
  [
    'bundled engine, KV pool',
    400,
    JSON.stringify({
      error: {
        message: 'The prompt (12000 tokens) exceeds the KV cache pool capacity (10645 tokens).',
        type: 'invalid_request_error',
        param: 'prompt',
        code: 'kv_pool_capacity_exceeded',
      },
    }),
    { dialect: 'engine', limit: 10645, count: 12000, limitKind: 'pool' },
  ],
  [
    'a proxy that reflows text and uses thousands separators',
    400,
    "upstream: This model's maximum   context length is 1,048,576 tokens.\nHowever, your request has 1,100,000 input tokens.",
    { dialect: 'vllm', limit: 1048576, count: 1100000 },
  ],
  ['only a code', 400, JSON.stringify({ error: { message: 'too long', code: 'context_length_exceeded' } }), { dialect: 'openai' }],
];

const NOT_OVER_LIMIT: Array<[string, number | undefined, string | undefined]> = [
  ['OpenAI output cap (not the context)', 400, JSON.stringify({ error: { message: 'max_tokens is too large: 5000. This model supports at most 4096 completion tokens, whereas you provided 5000.', type: 'invalid_request_error', param: 'max_tokens', code: null } })],
  ['unknown model', 404, JSON.stringify({ error: { message: 'The model `gpt-x` does not exist.', type: 'NotFoundError', code: 404 } })],
  ['FastAPI validation', 422, JSON.stringify({ detail: [{ loc: ['body', 'max_tokens'], msg: 'Input should be a valid integer', type: 'int_parsing' }] })],
  ['llama.cpp bad JSON', 500, JSON.stringify({ error: { code: 500, message: 'Failed to parse JSON: [json.exception.parse_error.101]', type: 'server_error' } })],
  ['nginx 413 (body size, not tokens)', 413, '<html><head><title>413 Request Entity Too Large</title></head></html>'],
  ['rate limit', 429, JSON.stringify({ error: { message: 'Rate limit reached', type: 'rate_limit_error' } })],
  ['empty', 400, ''],
  ['nothing at all', undefined, undefined],
];

describe('classifyRejection', () => {
  it.each(OVER_LIMIT)('recognises %s', (_name, status, body, expected) => {
    const r = classifyRejection(status, body);
    expect(r.overLimit).toBe(true);
    for (const [key, value] of Object.entries(expected)) expect(r[key as keyof Rejection], key).toBe(value);
  });

  it.each(NOT_OVER_LIMIT)('does not take %s for an over-limit rejection', (_name, status, body) => {
    expect(classifyRejection(status, body).overLimit).toBe(false);
  });

  it('works from the parsed message alone, and from a CompletionResult', () => {
    const r = classifyRejection(400, "The input (9000 tokens) is longer than the model's context length (8192 tokens).");
    expect(r).toMatchObject({ overLimit: true, dialect: 'sglang', limit: 8192, count: 9000 });
    const viaResult = rejectionOf({
      status: 400,
      errorBody: 'the request exceeds the available context size, try increasing the context size or enable context shift',
      errorRaw: JSON.stringify({ error: { code: 400, message: 'the request exceeds the available context size, try increasing the context size or enable context shift', type: 'exceed_context_size_error', n_prompt_tokens: 5000, n_ctx: 4096 } }),
    });
    expect(viaResult).toMatchObject({ overLimit: true, dialect: 'llamacpp', limit: 4096, count: 5000 });
  });
});
