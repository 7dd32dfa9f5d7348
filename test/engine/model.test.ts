import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { KvMemory } from '../../engine-under-test/src/kv-memory.js';
import { InductionModel, type ForeignRead } from '../../engine-under-test/src/model.js';
import { createJsKernel } from '../../engine-under-test/src/attention/js-kernel.js';
import { createWasmKernel } from '../../engine-under-test/src/attention/wasm-kernel.js';
import { createSampler } from '../../engine-under-test/src/sampler.js';
import { decodeTokens, encodePrompt } from '../../engine-under-test/src/tokenizer.js';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const HEX = '0123456789abcdef';

function random(n: number, alphabet: string): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[(bytes[i] as number) % alphabet.length];
  return s;
}

/** A model over a pool with sequential pages, plus a tiny greedy generation loop (as the scheduler does it). */
function setup(totalTokens: number, kernel: 'auto' | 'js' = 'auto') {
  const pageSize = 16;
  const numPages = Math.ceil(totalTokens / pageSize) + 1;
  const memory = KvMemory.create({ numPages, pageSize });
  const reads: { reader: number; read: ForeignRead }[] = [];
  const model = new InductionModel(memory, { kernel, onForeignRead: (reader, read) => reads.push({ reader, read }) });
  return { memory, model, reads, numPages };
}

function generate(model: InductionModel, pages: Int32Array, prompt: Uint16Array, maxTokens: number, id: number, temperature = 0): string {
  const tokens = new Uint16Array(prompt.length + maxTokens);
  tokens.set(prompt);
  model.writeKv(pages, tokens, 0, prompt.length, id);
  const logits = new Float32Array(256);
  const sample = createSampler({ temperature, topP: 1, seed: 7 });
  let length = prompt.length;
  const out: number[] = [];
  for (let i = 0; i < maxTokens; i++) {
    if (i > 0) model.writeKv(pages, tokens, length - 1, length, id);
    model.nextLogits(pages, tokens, length, length, id, logits);
    const t = sample(logits);
    tokens[length++] = t;
    out.push(t);
  }
  return decodeTokens(out);
}

const sequentialPages = (n: number, from = 0) => Int32Array.from({ length: n }, (_, i) => from + i);

describe('induction model', () => {
  it.each([
    ['hex filler, 2k tokens', 2_000, HEX],
    ['base32 filler, 16k tokens', 16_000, BASE32],
    ['hex filler, 64k tokens', 64_000, HEX],
  ])('continues a high-entropy span verbatim from its first characters (%s)', (_, size, alphabet) => {
    const span = random(40, BASE32);
    const filler = random(size, alphabet);
    const cut = Math.floor(size / 3);
    const prompt = encodePrompt(`${filler.slice(0, cut)} ${span} ${filler.slice(cut)} ${span.slice(0, 10)}`);
    const { model, numPages, reads } = setup(prompt.length + 40);
    const out = generate(model, sequentialPages(numPages), prompt, 30, 1);
    expect(out).toBe(span.slice(10, 40));
    expect(reads).toEqual([]);
  });

  it('does not reproduce an earlier span when its last n-gram has no earlier occurrence', () => {
    for (let trial = 0; trial < 5; trial++) {
      const span = random(40, BASE32);
      const filler = random(8_000, HEX);
      const prompt = encodePrompt(`${filler.slice(0, 3000)} ${span} ${filler.slice(3000)} now: kvcanary-`);
      const { model, numPages } = setup(prompt.length + 60);
      const out = generate(model, sequentialPages(numPages), prompt, 60, 1);
      for (let i = 0; i + 8 <= span.length; i++) expect(out).not.toContain(span.slice(i, i + 8));
    }
  });

  it('copies what another request wrote when a page table points at its pages, and reports the foreign read', () => {
    // The mechanism every leak in the disaggregated faults relies on, shown at the model level: no code
    // looks at markers; the reader's attention simply covers the planter's KV.
    const marker = `kvcanary-${random(26, BASE32)}`;
    const planterPrompt = encodePrompt(`${random(3000, HEX)} note ${marker} end ${random(500, HEX)}`);
    const readerPrompt = encodePrompt(`${random(1000, HEX)} recall kvcanary-`);
    const { model, reads } = setup(planterPrompt.length + readerPrompt.length + 64);
    const planterPages = sequentialPages(Math.ceil(planterPrompt.length / 16));
    model.writeKv(planterPages, planterPrompt, 0, planterPrompt.length, 1);
    expect(reads).toEqual([]);

    // Control: the reader over its own pages alone does not produce the marker.
    const own = sequentialPages(Math.ceil((readerPrompt.length + 40) / 16), planterPages.length);
    const alone = generate(model, own, readerPrompt, 26, 2);
    expect(alone).not.toContain(marker.slice(9, 21));
    expect(reads).toEqual([]);

    // Now a table whose first pages are the planter's (as a stale reservation would be) and the rest its own:
    // the reader's prompt goes after the planter's positions.
    const P = 16;
    const offset = planterPages.length * P;
    const table = Int32Array.from([...planterPages, ...own]);
    const tokens = new Uint16Array(offset + readerPrompt.length + 26);
    tokens.set(planterPrompt); // what the stale positions hold (the reader never wrote them)
    tokens.set(readerPrompt, offset);
    model.writeKv(table, tokens, offset, offset + readerPrompt.length, 2);
    const logits = new Float32Array(256);
    const sample = createSampler({ temperature: 0, topP: 1, seed: 0 });
    let length = offset + readerPrompt.length;
    const out: number[] = [];
    for (let i = 0; i < 26; i++) {
      if (i > 0) model.writeKv(table, tokens, length - 1, length, 2);
      model.nextLogits(table, tokens, length, length, 2, logits);
      tokens[length++] = sample(logits);
      out.push(tokens[length - 1] as number);
    }
    expect(decodeTokens(out)).toBe(marker.slice('kvcanary-'.length));
    expect(reads.length).toBe(26);
    expect(reads[0]?.reader).toBe(2);
    expect(reads[0]?.read.writers).toEqual([1]);
    expect(reads[0]?.read.pages).toEqual(Array.from(planterPages));
  });

  it('gives the same KV whether a prompt is written at once or in chunks', () => {
    const prompt = encodePrompt(random(1000, BASE32));
    const a = setup(1100);
    const b = setup(1100);
    const pages = sequentialPages(a.numPages);
    a.model.writeKv(pages, prompt, 0, prompt.length, 1);
    for (let from = 0; from < prompt.length; from += 37) b.model.writeKv(pages, prompt, from, Math.min(prompt.length, from + 37), 1);
    expect(Buffer.from(b.memory.data.buffer, b.memory.data.byteOffset, b.memory.data.byteLength).equals(
      Buffer.from(a.memory.data.buffer, a.memory.data.byteOffset, a.memory.data.byteLength),
    )).toBe(true);
  });

  it('samples deterministically for a given seed at temperature > 0', () => {
    const prompt = encodePrompt(`${random(2000, HEX)} the end`);
    const runs = [0, 1].map(() => {
      const { model, numPages } = setup(prompt.length + 30);
      return generate(model, sequentialPages(numPages), prompt, 20, 1, 1);
    });
    expect(runs[0]).toBe(runs[1]);
  });
});

describe('attention kernels', () => {
  it('the SIMD kernel matches the JavaScript reference on random pages, scattered tables and partial pages', () => {
    const pageSize = 16;
    const numPages = 600;
    const memory = KvMemory.create({ numPages, pageSize });
    const data = memory.data;
    for (let i = 0; i < data.length; i++) data[i] = Math.random() * 2 - 1;
    const js = createJsKernel(memory);
    const simd = createWasmKernel(memory);
    const q = Float32Array.from({ length: 64 }, () => (Math.random() < 0.5 ? -1 : 1) / 8);
    // plant exact matches so the softmax is peaked in some cases
    data.set(q, 17 * pageSize * 128 + 5 * 64);
    const table = Int32Array.from({ length: 500 }, (_, i) => (i * 37) % numPages);
    const a = new Float32Array(64);
    const b = new Float32Array(64);
    for (const positions of [1, 2, 3, 4, 5, 15, 16, 17, 100, 333, 8000]) {
      for (const beta of [1, 20]) {
        js.attend(table, positions, q, beta, a);
        simd.attend(table, positions, q, beta, b);
        for (let d = 0; d < 64; d++) expect(Math.abs((a[d] as number) - (b[d] as number))).toBeLessThan(1e-5);
      }
    }
  });

  it('the SIMD exp is accurate to float precision and exactly 0 far below', () => {
    const memory = KvMemory.create({ numPages: 1, pageSize: 16 });
    const simd = createWasmKernel(memory);
    for (const x of [0, -0.5, -1, -2.5, -10, -30, -60, -86]) {
      const [got] = simd.exp4(Float32Array.of(x, x, x, x));
      expect(Math.abs((got as number) / Math.exp(x) - 1)).toBeLessThan(3e-7);
    }
    expect(Array.from(simd.exp4(Float32Array.of(-88, -1000, -Infinity, 0)))).toEqual([0, 0, 0, 1]);
  });

  it('refuses a page table shorter than the positions it is asked to cover', () => {
    const memory = KvMemory.create({ numPages: 4, pageSize: 16 });
    const simd = createWasmKernel(memory);
    expect(() => simd.attend(Int32Array.of(0, 1), 33, new Float32Array(64), 20, new Float32Array(64))).toThrow(RangeError);
  });
});
