import { Buffer } from 'node:buffer';
import { describe, expect, it } from 'vitest';
import { PROMPT_HOLE, streamedJsonBody, type PromptSource } from '../../prober/src/probe/target/prompt-body.js';
import { createTokenCountScanner } from '../../prober/src/probe/target/token-count.js';

async function collect(body: ReturnType<typeof streamedJsonBody>): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const c of body.chunks()) parts.push(c);
  return Buffer.concat(parts);
}

function source(chunks: string[]): PromptSource {
  return { chunks: () => chunks };
}

describe('streamed JSON body', () => {
  it('produces exactly JSON.stringify of the materialised body, with a matching byte length', async () => {
    const tricky = ['He said "hi"\\', '\n\t\u0000\u001f', 'é漢', '\ud83d', '\ude00 end', '', '\u2028\u2029'];
    const template = { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: PROMPT_HOLE }], stream: true };
    const body = streamedJsonBody(template, source(tricky));
    const bytes = await collect(body);
    const whole = tricky.join('');
    expect(bytes.byteLength).toBe(body.byteLength);
    expect(body.promptChars).toBe(whole.length);
    expect(JSON.parse(bytes.toString('utf8'))).toEqual({ ...template, messages: [{ role: 'user', content: whole }] });
    // The surrogate pair split across chunks travels as one UTF-8 character, not as two escapes.
    expect(bytes.toString('utf8')).toContain('😀');
    expect(bytes.toString('utf8')).not.toContain('\\ud83d');
  });

  it('streams a large prompt in bounded buffers', async () => {
    const unit = 'abc😀'.repeat(1000);
    const body = streamedJsonBody({ prompt: PROMPT_HOLE }, { chunks: () => Array.from({ length: 200 }, () => unit) });
    let biggest = 0;
    let total = 0;
    for await (const c of body.chunks()) {
      biggest = Math.max(biggest, c.byteLength);
      total += c.byteLength;
    }
    expect(total).toBe(body.byteLength);
    expect(biggest).toBeLessThan(256 * 1024);
    expect(body.byteLength).toBeGreaterThan(1_000_000);
  });

  it('a string prompt works the same way', async () => {
    const body = streamedJsonBody({ model: 'x', prompt: PROMPT_HOLE }, 'plain "text"');
    expect(JSON.parse((await collect(body)).toString('utf8'))).toEqual({ model: 'x', prompt: 'plain "text"' });
  });

  it('catches a source that yields different text on the second pass', async () => {
    let calls = 0;
    const body = streamedJsonBody({ prompt: PROMPT_HOLE }, { chunks: () => (calls++ === 0 ? ['short'] : ['much longer text']) });
    await expect(collect(body)).rejects.toMatchObject({ code: 'KVC_PROMPT_SOURCE_UNSTABLE' });
  });

  it('reports a source that throws or yields non-strings as a caller error', () => {
    expect(() => streamedJsonBody({ p: PROMPT_HOLE }, { chunks: () => { throw new Error('x'); } })).toThrow(expect.objectContaining({ code: 'KVC_PROMPT_SOURCE_FAILED' }));
    expect(() => streamedJsonBody({ p: PROMPT_HOLE }, { chunks: () => [1 as unknown as string] })).toThrow(expect.objectContaining({ code: 'KVC_PROMPT_SOURCE_FAILED' }));
  });
});

describe('token count scanner', () => {
  const scan = (text: string, splitEvery = 0): number | undefined => {
    const s = createTokenCountScanner();
    const bytes = Buffer.from(text, 'utf8');
    if (splitEvery <= 0) s.push(bytes);
    else for (let i = 0; i < bytes.length; i += splitEvery) s.push(bytes.subarray(i, i + splitEvery));
    return s.result();
  };

  it('reads vLLM count, llama.cpp tokens (numbers or pieces), however the bytes are split', () => {
    const vllm = JSON.stringify({ count: 5, max_model_len: 4096, tokens: [1, 2, 3, 4, 5], token_strs: null });
    const llama = JSON.stringify({ tokens: [15043, 3186, 29991] });
    const pieces = JSON.stringify({ tokens: [{ id: 1, piece: 'a,b' }, { id: 2, piece: [1, 2] }, { id: 3, piece: '}]' }] });
    const empty = JSON.stringify({ tokens: [] });
    for (const split of [0, 1, 3]) {
      expect(scan(vllm, split)).toBe(5);
      expect(scan(llama, split)).toBe(3);
      expect(scan(pieces, split)).toBe(3);
      expect(scan(empty, split)).toBe(0);
      expect(scan(' { "count" : 12 } ', split)).toBe(12);
    }
  });

  it('counts a million-token response without holding it', () => {
    const s = createTokenCountScanner();
    s.push(Buffer.from('{"tokens":['));
    const block = Buffer.from(Array.from({ length: 1000 }, (_, i) => 10000 + i).join(',') + ',');
    for (let i = 0; i < 1000; i++) s.push(block);
    s.push(Buffer.from('7]}'));
    expect(s.result()).toBe(1_000_001);
  });

  it('returns undefined for bodies that are not a complete object with count or tokens', () => {
    expect(scan('{"tokens":[1,2')).toBeUndefined();
    expect(scan('{"other":[1,2]}')).toBeUndefined();
    expect(scan('[1,2,3]')).toBeUndefined();
    expect(scan('not json')).toBeUndefined();
    expect(scan('{"nested":{"tokens":[1,2]}}')).toBeUndefined();
  });
});
