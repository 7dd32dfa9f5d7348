import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';

const MODEL = 'kvcanary-engine';
let engine: RunningEngine;
let client: OpenAI;

beforeEach(async () => {
  engine = await startEngine({ contextTokens: 16_384, poolTokens: 16_640 });
  client = new OpenAI({ baseURL: `${engine.url}/v1`, apiKey: 'sk-test-not-a-secret', maxRetries: 0 });
});
afterEach(async () => {
  await engine.close();
});

function planted(): { prompt: string; rest: string } {
  const span = `kvcanary-${Array.from(randomBytes(26), (b) => 'abcdefghijklmnopqrstuvwxyz234567'[b % 32]).join('')}`;
  const filler = Array.from(randomBytes(3000), (b) => '0123456789abcdef'[b % 16]).join('');
  return { prompt: `${filler.slice(0, 1500)} ${span} ${filler.slice(1500)} ${span.slice(0, 12)}`, rest: span.slice(12) };
}

describe('the official openai client against the engine', () => {
  it('lists models', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
  });

  it('runs legacy completions, and streamed text equals non-streamed text at temperature 0', async () => {
    const { prompt, rest } = planted();
    const completion = await client.completions.create({ model: MODEL, prompt, max_tokens: rest.length, temperature: 0 });
    expect(completion.choices[0]?.text).toBe(rest);
    expect(completion.choices[0]?.finish_reason).toBe('length');
    expect(completion.usage).toMatchObject({ completion_tokens: rest.length, prompt_tokens: Buffer.byteLength(prompt) + 1 });

    const stream = await client.completions.create({ model: MODEL, prompt, max_tokens: rest.length, temperature: 0, stream: true });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(completion.choices[0]?.text);
    expect(finish).toBe('length');
  });

  it('runs chat completions, streamed and not, with usage in the stream when asked', async () => {
    const messages = [{ role: 'user' as const, content: `repeat: ${planted().prompt}` }];
    const chat = await client.chat.completions.create({ model: MODEL, messages, max_completion_tokens: 24, temperature: 0 });
    expect(chat.choices[0]?.message.role).toBe('assistant');
    expect(chat.usage?.completion_tokens).toBe(24);

    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      max_completion_tokens: 24,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(chat.choices[0]?.message.content);
    // The repeat is served from the prefix cache (same prompt, no cache_salt): same counts, cached tokens reported.
    const { prompt_tokens_details: details, ...counts } = usage ?? {};
    expect(counts).toEqual({ prompt_tokens: chat.usage?.prompt_tokens, completion_tokens: 24, total_tokens: chat.usage?.total_tokens });
    expect(chat.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
    expect(details?.cached_tokens).toBeGreaterThan(0);
  });

  it('surfaces an over-limit request as a BadRequestError carrying the engine’s code', async () => {
    const error = await client.completions.create({ model: MODEL, prompt: 'x'.repeat(20_000), max_tokens: 5 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('context_length_exceeded');
    expect((error as Error).message).toMatch(/maximum context length is 16384 tokens/);
  });

  it('surfaces an unknown model as NotFoundError', async () => {
    const error = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
  });
});
