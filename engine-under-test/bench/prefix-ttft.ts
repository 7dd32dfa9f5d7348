/**
 * Time to first token with and without a prefix-cache hit, measured side by side (interleaved rounds,
 * medians), plus the engine's own counters: prompt tokens prefilled per request and cached_tokens.
 * Run: npx tsx engine-under-test/bench/prefix-ttft.ts [promptTokens] [rounds]
 */
import { randomBytes } from 'node:crypto';
import { startEngine } from '../src/start.js';

const promptChars = Number(process.argv[2] ?? 7_000);
const rounds = Number(process.argv[3] ?? 15);
const e = await startEngine({ preset: 'single', scale: 64, log: () => {} });
const prompt = Array.from(randomBytes(promptChars), (b) => 'abcdefghijklmnopqrstuvwxyz .,'[b % 29]).join('');

async function ttft(salt: string): Promise<{ ms: number; cached: number; prefilled: number }> {
  const before = e.engine.stats().promptTokensTotal;
  const t0 = performance.now();
  const res = await fetch(`${e.url}/v1/completions`, {
    method: 'POST',
    body: JSON.stringify({ prompt, max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true }, cache_salt: salt }),
  });
  const reader = res.body!.getReader();
  let first = 0;
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
    if (first === 0 && text.includes('"text":"')) first = performance.now() - t0;
  }
  const usage = JSON.parse(text.split('\n\n').filter((b) => b.includes('"usage":{')).at(-1)!.slice(6)) as { usage: { prompt_tokens_details: { cached_tokens: number } } };
  return { ms: first, cached: usage.usage.prompt_tokens_details.cached_tokens, prefilled: e.engine.stats().promptTokensTotal - before };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
await ttft('warm'); // plant the warm entry
const cold: number[] = [];
const warm: number[] = [];
let last = { cold: { cached: 0, prefilled: 0 }, warm: { cached: 0, prefilled: 0 } };
for (let i = 0; i < rounds; i++) {
  const c = await ttft(`cold-${i}`);
  const w = await ttft('warm');
  cold.push(c.ms);
  warm.push(w.ms);
  last = { cold: c, warm: w };
}
console.log(`prompt ${promptChars + 1} tokens, ${rounds} interleaved rounds`);
console.log(`miss: median TTFT ${median(cold).toFixed(2)} ms, prefilled ${last.cold.prefilled} tokens, cached_tokens ${last.cold.cached}`);
console.log(`hit:  median TTFT ${median(warm).toFixed(2)} ms, prefilled ${last.warm.prefilled} tokens, cached_tokens ${last.warm.cached}`);
console.log(`ratio miss/hit: ${(median(cold) / median(warm)).toFixed(2)}x`);
await e.close();
