/**
 * `hardened` (the incident's capacities, every defense on, no fault) under a concurrent load of normal,
 * aborted and over-limit requests: nobody reads a foreign page, no defense fails a healthy request, every
 * over-limit prompt is refused, and afterwards every page is back on both free lists.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';

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

const post = (base: string, body: unknown, signal?: AbortSignal): Promise<Response> =>
  fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal !== undefined ? { signal } : {}) });

describe('preset hardened', () => {
  it.each([
    ['as configured', {}],
    ['with the host-offload tier on', { hostOffload: true }],
  ])('stays clean under normal, aborted and over-limit requests together (%s)', async (_, extra) => {
    const e = await startEngine({ preset: 'hardened', scale: 64, ...extra });
    running.push(e);
    const markers = (): string => Array.from({ length: 40 }, () => `kvcanary-${random(26)}`).join(' ');
    const reader = `Here is a reference code from our records: ${'The committee met. '.repeat(60)}\nQuote the reference code: kvcanary-`;
    const statuses: number[] = [];
    const normal = Array.from({ length: 6 }, async () => {
      const span = `kvcanary-${random(26)}`;
      const filler = random(1500, '0123456789abcdef');
      const res = await post(e.url, { prompt: `${filler} ${span} ${filler} ${span.slice(0, 12)}`, max_tokens: 14, temperature: 0 });
      statuses.push(res.status);
      return { want: span.slice(12, 26), got: ((await res.json()) as { choices: { text: string }[] }).choices[0]?.text };
    });
    const aborted = Array.from({ length: 8 }, async (_, i) => {
      const c = new AbortController();
      setTimeout(() => c.abort(), [2, 5, 10, 20, 40, 60, 90, 130][i]);
      try {
        const res = await post(e.url, { prompt: `Keep these codes: ${markers()}\nQuote one: kvcanary-`, max_tokens: 64, stream: true }, c.signal);
        await res.arrayBuffer();
      } catch {
        // aborted
      }
    });
    const readers = Array.from({ length: 8 }, async () => {
      const res = await post(e.url, { prompt: reader, max_tokens: 32, temperature: 0 });
      statuses.push(res.status);
      await res.arrayBuffer();
    });
    const overLimit = [12_000, 13_500, 16_500].map(async (n) => {
      const res = await post(e.url, { prompt: 'z'.repeat(n), max_tokens: 16, stream: true });
      await res.arrayBuffer();
      return res.status;
    });
    const [answers, , , refused] = await Promise.all([Promise.all(normal), Promise.all(aborted), Promise.all(readers), Promise.all(overLimit)]);
    for (const a of answers) expect(a.got).toBe(a.want);
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(refused).toEqual([400, 400, 400]);
    for (let i = 0; i < 400; i++) {
      const p = e.engine.stats().pools!;
      if (p.prefill.freePages === p.prefill.numPages && p.decode.freePages === p.decode.numPages) break;
      await new Promise((r) => setTimeout(r, 5));
    }
    const s = e.engine.stats();
    expect(s.pools?.prefill).toMatchObject({ freePages: 665, usedPages: 0, pendingReleasePages: 0, tables: 0 });
    expect(s.pools?.decode).toMatchObject({ freePages: 1040, usedPages: 0, pendingReleasePages: 0, tables: 0 });
    expect(s.pools?.decode.allocatedPagesTotal).toBe(s.pools?.decode.releasedPagesTotal);
    expect(s.foreignPageReadsTotal).toBe(0);
    expect(s.defended?.pageTagMismatches).toBe(0); // no healthy request was failed closed
    expect(s.finishedTotal.error).toBe(0);
    expect(e.engine.checkInvariants()).toEqual([]);
    const metrics = await (await fetch(`${e.url}/metrics`)).text();
    expect(metrics).toMatch(/^kvcanary_engine_foreign_page_reads_total 0$/m);
    expect(metrics).toMatch(/^kvcanary_engine_role_kv_pool_pages\{role="decode",state="free"\} 1040$/m);
  });
});
