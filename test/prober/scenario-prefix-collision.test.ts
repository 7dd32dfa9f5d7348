/**
 * prefix-collision's building blocks: the collider keeps every page-sized block's tokens and changes
 * their order; token ids are read from each engine's /tokenize shape; a token-id prompt goes out as a
 * JSON array. (Against the bundled engine's weak and strong prefix hashes: test/prober-engine.test.ts.)
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { commonPrefixLength, reorderWindows } from '../../prober/src/probe/scenarios/prefix-collision.js';
import { createTargetClient } from '../../prober/src/probe/target/client.js';
import { tokenIdsOf } from '../../prober/src/probe/target/introspect.js';
import { runCli } from '../helpers/cli.js';
import { startPrefixCacheServer, type PrefixCacheServer } from '../helpers/prefix-cache-server.js';

const sorted = (xs: readonly number[]): number[] => [...xs].sort((a, b) => a - b);

describe('reorderWindows', () => {
  const ids = Array.from({ length: 70 }, (_, i) => 1000 + ((i * 37) % 101));

  it('keeps the multiset of every aligned block of any multiple of the window, in another order', () => {
    for (const w of [4, 8, 16]) {
      const out = reorderWindows(ids, w);
      for (const block of [w, 2 * w, 4 * w]) {
        for (let s = 0; s + block <= ids.length; s += block) {
          expect(sorted(out.slice(s, s + block))).toEqual(sorted(ids.slice(s, s + block)));
          expect(out.slice(s, s + block)).not.toEqual(ids.slice(s, s + block));
        }
      }
      // The tail shorter than a window and each window's first token stay where they were.
      const full = Math.floor(ids.length / w) * w;
      expect(out.slice(full)).toEqual(ids.slice(full));
      for (let s = 0; s < full; s += w) expect(out[s]).toBe(ids[s]);
    }
  });

  it('the common prefix with the original is the first token', () => {
    expect(commonPrefixLength(reorderWindows(ids, 16), ids, ids.length)).toBe(1);
    expect(commonPrefixLength([1, 2, 3], [1, 2, 4], 10)).toBe(2);
    expect(commonPrefixLength([1, 2, 3], [1, 2, 3], 2)).toBe(2);
  });
});

describe('tokenIdsOf', () => {
  it('reads vLLM/SGLang integer lists and llama.cpp {id, piece} lists; anything else is no ids', () => {
    expect(tokenIdsOf({ count: 3, max_model_len: 4096, tokens: [1, 15043, 3186] })).toEqual([1, 15043, 3186]);
    expect(tokenIdsOf({ tokens: [{ id: 9906, piece: 'Hello' }, { id: 1917, piece: ' world' }] })).toEqual([9906, 1917]);
    for (const bad of [{ count: 3 }, { tokens: [] }, { tokens: [1, 'x'] }, { tokens: [1.5] }, { tokens: [{ piece: 'a' }] }, null, 'tokens']) {
      expect(tokenIdsOf(bad)).toBeUndefined();
    }
  });
});

describe('token-id prompts', () => {
  let server: Server | undefined;
  afterEach(() => new Promise<void>((r) => (server === undefined ? r() : server.close(() => r()))));

  it('go out as a JSON array in `prompt`', async () => {
    const bodies: unknown[] = [];
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        bodies.push(JSON.parse(body));
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ choices: [{ index: 0, text: 'ok', finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } }));
      });
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const c = createTargetClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, timeoutMs: 5000 });
    const r = await c.complete({ api: 'completions', model: 'm', prompt: '', tokenIds: [1, 2, 3], maxTokens: 4, stream: false });
    await c.close();
    expect(r.transport).toBe('ok');
    expect(bodies[0]).toMatchObject({ model: 'm', prompt: [1, 2, 3], max_tokens: 4, stream: false });
  });
});

describe('prefix-collision against an endpoint that fails some requests after admitting them', () => {
  let toy: PrefixCacheServer | undefined;
  afterEach(async () => {
    await toy?.close();
    toy = undefined;
  });

  it('re-sends the control and the collider (fresh suffix, another order) and passes an exact cache', async () => {
    // Every 2nd streamed completion ends in an error event after a 200, as llama.cpp's does when the model's
    // bytes fail its output parser. Round 1: plant, control (fails), control again, collider (fails), another
    // collider; round 2's plant fails, and round 1 already answered both.
    toy = await startPrefixCacheServer({ tokenize: true, streamErrorEvery: 2 });
    const r = await runCli(['run', '--target', toy.url, '--scenario', 'prefix-collision', '--json', '-q'], { timeoutMs: 60_000 });
    const doc = JSON.parse(r.stdout) as { outcome: string; scenarios: Array<{ name: string; outcome: string; notes: string[] }>; findings: unknown[] };
    const s = doc.scenarios[0]!;
    expect(s.outcome, s.notes.join('\n')).toBe('pass');
    expect(doc.findings).toEqual([]);
    expect(s.notes.join('\n')).toMatch(/2 round\(s\): control cached tokens above the baseline 0 in 1; 1 collider\(s\) answered, cached tokens 0 \(common prefix 1\)/);
    // prefix-collision alone is no behavioural pass: the run is partial (exit 2).
    expect({ outcome: doc.outcome, code: r.code }).toEqual({ outcome: 'partial', code: 2 });
  }, 90_000);

  it('reorders each retry differently: variants share only the first token of every window', () => {
    const ids = Array.from({ length: 32 }, (_, i) => 100 + i);
    const variants = [0, 1, 2].map((v) => reorderWindows(ids, 8, v));
    for (const [i, a] of variants.entries()) {
      expect(commonPrefixLength(a, ids, ids.length)).toBe(1);
      for (const b of variants.slice(i + 1)) expect(commonPrefixLength(a, b, a.length)).toBe(1);
      for (let s = 0; s < 32; s += 8) expect(sorted(a.slice(s, s + 8))).toEqual(ids.slice(s, s + 8));
    }
  });
});
