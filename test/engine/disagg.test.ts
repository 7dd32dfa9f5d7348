/**
 * The disaggregated engine through HTTP: a router in front of prefill and decode worker threads, KV
 * transferred into decode's shared pool. It must answer exactly as the single-node engine does, report
 * each role's pool, and return every page of both pools however requests end.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../../engine-under-test/src/start.js';
import { countPromptTokens } from '../../engine-under-test/src/tokenizer.js';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
function random(n: number, alphabet = BASE32): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[(bytes[i] as number) % alphabet.length];
  return s;
}

let running: RunningEngine[] = [];
afterEach(async () => {
  await Promise.all(running.map((r) => r.close()));
  running = [];
});
async function start(options: StartEngineOptions): Promise<RunningEngine> {
  const r = await startEngine({ scale: 64, ...options });
  running.push(r);
  return r;
}

const post = (base: string, path: string, body: unknown, init: RequestInit = {}): Promise<Response> =>
  fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...init });
const json = async (res: Response): Promise<Record<string, any>> => (await res.json()) as Record<string, any>;
function streamedText(body: string): string {
  return body
    .split('\n\n')
    .filter((b) => b.startsWith('data: {'))
    .map((b) => JSON.parse(b.slice(6)).choices?.[0]?.text ?? '')
    .join('');
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000 && !condition(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!condition()) throw new Error(`never happened: ${what}`);
}

/** Both pools whole again: nothing held, nothing parked. */
function bothPoolsFree(e: RunningEngine): boolean {
  const pools = e.engine.stats().pools;
  return pools !== undefined && pools.prefill.freePages === pools.prefill.numPages && pools.decode.freePages === pools.decode.numPages;
}

function planted(size: number): { prompt: string; rest: string } {
  const span = `kvcanary-${random(26)}`;
  const filler = random(size, '0123456789abcdef');
  return { prompt: `${filler.slice(0, size / 2)} ${span} ${filler.slice(size / 2)} ${span.slice(0, 12)}`, rest: span.slice(12) };
}

describe('disaggregated engine', () => {
  it('continues a planted span verbatim, streamed and not, with exact usage and a cmpl-N id', async () => {
    const e = await start({ preset: 'hardened' });
    const { prompt, rest } = planted(6000); // several transfer batches
    const body = await json(await post(e.url, '/v1/completions', { prompt, max_tokens: rest.length, temperature: 0 }));
    expect(body).toMatchObject({
      choices: [{ text: rest, finish_reason: 'length' }],
      usage: { prompt_tokens: countPromptTokens(prompt), completion_tokens: rest.length },
    });
    expect(body['id']).toMatch(/^cmpl-\d+$/);
    const streamed = await post(e.url, '/v1/completions', { prompt, max_tokens: rest.length, temperature: 0, stream: true });
    expect(streamed.status).toBe(200);
    expect(streamedText(await streamed.text())).toBe(rest);
    const s = e.engine.stats();
    // The repeat found the prompt in decode's prefix cache: prefill transferred only the rest.
    expect(s.transfer?.tokensLanded).toBe(2 * countPromptTokens(prompt) - (s.prefixCache?.cachedTokensTotal ?? 0));
    expect(s.prefixCache?.cachedTokensTotal).toBeGreaterThan(0);
    expect(s.foreignPageReadsTotal).toBe(0);
    expect(s.defended).toEqual({ pageTagMismatches: 0, staleBatchesDropped: 0, staleCopiesDropped: 0 });
  });

  it('describes itself: context, the pool that bounds admission, each role’s pool; faults and defenses at /debug/config', async () => {
    const e = await start({ preset: 'incident', defenses: ['page-tags'] });
    expect(await json(await fetch(`${e.url}/get_server_info`))).toMatchObject({
      context_length: 16_384,
      max_total_num_tokens: 10_640,
      max_req_input_len: 10_639,
      page_size: 16,
      disaggregation_mode: 'prefill-decode',
      prefill: { max_total_num_tokens: 10_640 },
      decode: { max_total_num_tokens: 16_640 },
    });
    expect(await json(await fetch(`${e.url}/debug/config`))).toMatchObject({
      preset: 'incident',
      mode: 'disaggregated',
      faults: ['admission-checks-finished'],
      defenses: ['page-tags'],
    });
    const remediated = await start({ preset: 'remediated' });
    expect(await json(await fetch(`${remediated.url}/get_server_info`))).toMatchObject({ context_length: 16_384, max_total_num_tokens: 31_872 });
    expect(await json(await fetch(`${remediated.url}/debug/config`))).toMatchObject({ faults: [], defenses: ['reject-before-bootstrap', 'salted-prefix-cache'] });
  });

  it('rejects a prompt over the prefill pool after bootstrap when admission is right: a 400, nothing read, the reservation freed', async () => {
    const e = await start({ preset: 'disaggregated' });
    const prompt = 'z'.repeat(12_000);
    for (const stream of [false, true]) {
      const res = await post(e.url, '/v1/completions', { prompt, max_tokens: 16, stream });
      expect(res.status).toBe(400);
      expect((await json(res))['error']).toEqual({
        message: 'The prompt (12001 tokens) exceeds the KV cache pool capacity (10640 tokens).',
        type: 'invalid_request_error',
        param: 'prompt',
        code: 'kv_pool_capacity_exceeded',
      });
    }
    await until(() => bothPoolsFree(e), 'pools free');
    const s = e.engine.stats();
    expect(s.pools?.decode.allocatedPagesTotal).toBeGreaterThan(0); // decode did reserve it: this is the after-bootstrap path
    expect(s.transfer?.tokensLanded).toBe(0);
    expect(s.foreignPageReadsTotal).toBe(0);
    expect(s.rejectedTotal['kv_pool_capacity_exceeded']).toBe(2);
    const beyond = await post(e.url, '/v1/completions', { prompt: 'y'.repeat(16_380), max_tokens: 10 });
    expect(beyond.status).toBe(400);
    expect((await json(beyond))['error']).toMatchObject({ code: 'context_length_exceeded' });
    expect(e.engine.checkInvariants()).toEqual([]);
  });

  it('with reject-before-bootstrap, answers 400 before anything is allocated in either pool', async () => {
    const e = await start({ preset: 'incident', defenses: ['reject-before-bootstrap'] });
    const res = await post(e.url, '/v1/completions', { prompt: 'z'.repeat(12_000), max_tokens: 16, stream: true });
    expect(res.status).toBe(400);
    expect((await json(res))['error']).toMatchObject({ code: 'kv_pool_capacity_exceeded' });
    const s = e.engine.stats();
    expect([s.pools?.prefill.allocatedPagesTotal, s.pools?.decode.allocatedPagesTotal]).toEqual([0, 0]);
  });

  it('frees both pools when clients go away mid-transfer and mid-decode, without writing late into anyone', async () => {
    const e = await start({ preset: 'disaggregated', transferLatencyMs: 10 });
    const controllers = Array.from({ length: 4 }, () => new AbortController());
    const jobs = controllers.map((c, i) =>
      post(e.url, '/v1/completions', { prompt: random(3000), max_tokens: 1000, stream: true }, { signal: c.signal })
        .then(async (r) => {
          if (i >= 2) await (r.body as ReadableStream).getReader().read(); // these two are aborted mid-decode
        })
        .catch(() => undefined),
    );
    await until(() => e.engine.stats().pools!.decode.usedPages > 0, 'reserved');
    controllers[0]!.abort();
    controllers[1]!.abort();
    await Promise.all(jobs.slice(2));
    controllers[2]!.abort();
    controllers[3]!.abort();
    await Promise.allSettled(jobs);
    // New work takes the freed pages at once.
    const { prompt, rest } = planted(2000);
    const after = await json(await post(e.url, '/v1/completions', { prompt, max_tokens: rest.length, temperature: 0 }));
    expect(after['choices'][0].text).toBe(rest);
    await until(() => bothPoolsFree(e), 'pools free');
    const s = e.engine.stats();
    expect(s.finishedTotal.aborted).toBe(4);
    expect(s.transfer?.lateBatchesLanded).toBe(0);
    expect(s.foreignPageReadsTotal).toBe(0);
    expect(e.engine.checkInvariants()).toEqual([]);
  });

  it('answers bad input like the single-node engine', async () => {
    const e = await start({ preset: 'hardened' });
    const bad = await post(e.url, '/v1/completions', { prompt: 42 });
    expect(bad.status).toBe(400);
    expect((await json(bad))['error']).toMatchObject({ code: 'invalid_type', param: 'prompt' });
    expect((await post(e.url, '/v1/completions', { model: 'gpt-4', prompt: 'x' })).status).toBe(404);
    expect((await fetch(`${e.url}/debug/nothing`)).status).toBe(404);
  });
});
