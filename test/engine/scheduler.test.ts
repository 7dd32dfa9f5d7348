import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { resolveEngineConfig, type EngineOptions } from '../../engine-under-test/src/config.js';
import { createSingleNodeEngine } from '../../engine-under-test/src/single-node.js';
import type { Engine, EngineEvent, GenerationRequest, RequestHandle } from '../../engine-under-test/src/engine.js';
import { decodeTokens, encodePrompt } from '../../engine-under-test/src/tokenizer.js';
import { mulberry32 } from '../../engine-under-test/src/hash.js';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
function random(n: number, alphabet = BASE32): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[(bytes[i] as number) % alphabet.length];
  return s;
}

function engine(options: EngineOptions = {}): Engine {
  return createSingleNodeEngine(resolveEngineConfig({ contextTokens: 16_384, poolTokens: 32_768, ...options }));
}

function submit(e: Engine, request: GenerationRequest): RequestHandle {
  const result = e.submit(request);
  if (!result.ok) throw new Error(`rejected: ${JSON.stringify(result)}`);
  return result.request;
}

async function collect(handle: RequestHandle): Promise<{ text: string; end: Extract<EngineEvent, { type: 'end' }> }> {
  const tokens: number[] = [];
  for await (const event of handle.events) {
    if (event.type === 'token') tokens.push(event.token);
    else return { text: decodeTokens(tokens), end: event };
  }
  throw new Error('no end event');
}

const greedy = { temperature: 0, topP: 1, seed: 0 };
const turn = () => new Promise((r) => setImmediate(r));

function plantedPrompt(size: number): { prompt: Uint16Array; rest: string } {
  const span = `kvcanary-${random(26)}`;
  const filler = random(size, '0123456789abcdef');
  return { prompt: encodePrompt(`${filler.slice(0, size / 2)} ${span} ${filler.slice(size / 2)} ${span.slice(0, 14)}`), rest: span.slice(14) };
}

describe('scheduler', () => {
  it('batches requests continuously without changing any request’s output, and reads nothing foreign', async () => {
    const requests = Array.from({ length: 10 }, (_, i) => {
      const { prompt, rest } = plantedPrompt(300 + i * 700);
      return { request: { promptTokens: prompt, maxTokens: 21, sampling: greedy }, rest };
    });
    const solo: string[] = [];
    for (const { request } of requests) {
      const e = engine();
      solo.push((await collect(submit(e, request))).text);
      await e.close();
    }
    const batched = engine({ chunkTokens: 512 });
    const results = await Promise.all(requests.map(({ request }) => collect(submit(batched, request))));
    expect(results.map((r) => r.text)).toEqual(solo);
    results.forEach((r, i) => expect(r.text).toBe(requests[i]?.rest));
    expect(results.every((r) => r.end.reason === 'length' && r.end.completionTokens === 21)).toBe(true);
    const stats = batched.stats();
    expect(stats.foreignPageReadsTotal).toBe(0);
    expect(stats.pool.freePages).toBe(stats.pool.numPages);
    expect(batched.checkInvariants()).toEqual([]);
    // chunked: the longest prompt alone needs more than one step of 512 tokens
    expect(stats.steps).toBeGreaterThan(Math.ceil(requests.reduce((n, r) => n + r.request.promptTokens.length, 0) / 512));
    await batched.close();
  });

  it('frees a request’s pages the moment it is aborted: waiting, mid-prefill or mid-decode', async () => {
    const e = engine({ chunkTokens: 256, poolTokens: 4096 });
    const long = submit(e, { promptTokens: encodePrompt(random(3000)), maxTokens: 50, sampling: greedy });
    const queued = submit(e, { promptTokens: encodePrompt(random(2000)), maxTokens: 50, sampling: greedy });
    await turn();
    await turn();
    let s = e.stats();
    expect(s.prefilling).toBe(1);
    expect(s.waiting).toBe(1); // 3051 + 2051 tokens do not fit 4096 together
    queued.abort();
    expect(e.stats().waiting).toBe(0);
    long.abort(); // mid-prefill
    s = e.stats();
    expect(s.running).toBe(0);
    expect(s.pool.freePages).toBe(s.pool.numPages);
    expect((await collect(long)).end.reason).toBe('aborted');

    const decoding = submit(e, { promptTokens: encodePrompt(random(100)), maxTokens: 1000, sampling: greedy });
    const it = decoding.events[Symbol.asyncIterator]();
    for (let i = 0; i < 5; i++) expect((await it.next()).value).toMatchObject({ type: 'token' });
    expect(e.stats().pool.usedPages).toBe(Math.ceil(1101 / 16));
    await it.return?.(); // the consumer walks away (a stop string, a closed connection)
    expect(e.stats().pool.usedPages).toBe(0);
    expect(e.stats().finishedTotal.aborted).toBe(3);
    expect(e.checkInvariants()).toEqual([]);
    await e.close();
  });

  it('queues requests the pool cannot hold yet, strictly first come first served', async () => {
    const e = engine({ poolTokens: 4096 });
    const firstTokens: string[] = [];
    const run = async (name: string, size: number) => {
      let first = true;
      for await (const ev of submit(e, { promptTokens: encodePrompt(random(size)), maxTokens: 8, sampling: greedy }).events) {
        if (ev.type === 'token' && first) {
          first = false;
          firstTokens.push(name);
        }
      }
    };
    const all = [run('big-1', 3000), run('big-2', 3000), run('small', 10)];
    await turn();
    // small would fit next to big-1, but it arrived after big-2, which does not: it waits too.
    expect(e.stats()).toMatchObject({ running: 1, waiting: 2 });
    await Promise.all(all);
    expect(firstTokens).toEqual(['big-1', 'big-2', 'small']);
    await e.close();
  });

  it('survives a random workload of completions and aborts with every page back and no foreign read', async () => {
    const e = engine({ poolTokens: 8192, chunkTokens: 300 });
    const random01 = mulberry32(99);
    const pending: Promise<unknown>[] = [];
    for (let i = 0; i < 60; i++) {
      const handle = submit(e, { promptTokens: encodePrompt(random(20 + Math.floor(random01() * 2500))), maxTokens: 1 + Math.floor(random01() * 30), sampling: greedy });
      const abortAfter = random01() < 0.4 ? Math.floor(random01() * 12) : -1;
      pending.push(
        (async () => {
          let seen = 0;
          for await (const ev of handle.events) {
            if (ev.type === 'token' && ++seen === abortAfter) break;
          }
        })(),
      );
      if (abortAfter === 0) handle.abort();
      if (i % 7 === 0) await turn();
    }
    await Promise.all(pending);
    const s = e.stats();
    expect(s.running + s.waiting).toBe(0);
    expect(s.pool.freePages).toBe(s.pool.numPages);
    expect(s.pool.allocatedPagesTotal).toBe(s.pool.releasedPagesTotal);
    expect(s.finishedTotal.aborted).toBeGreaterThan(0);
    expect(s.foreignPageReadsTotal).toBe(0);
    expect(e.exposures()).toEqual({ total: 0, exposures: [] });
    expect(e.checkInvariants()).toEqual([]);
    await e.close();
  });

  it('aborts everything on close', async () => {
    const e = engine();
    const a = submit(e, { promptTokens: encodePrompt(random(5000)), maxTokens: 10, sampling: greedy });
    await e.close();
    expect((await collect(a)).end.reason).toBe('aborted');
    expect(e.stats().pool.usedPages).toBe(0);
  });
});
