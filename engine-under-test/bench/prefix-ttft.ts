/**
 * Time to first token with and without a prefix-cache hit, measured side by side (interleaved rounds,
 * medians), plus the engine's own counters: prompt tokens prefilled per request and cached_tokens.
 * Run: npx tsx engine-under-test/bench/prefix-ttft.ts [promptTokens] [rounds] [--json FILE]
 * With --json the figures are also written to FILE (engine-under-test/bench/results/prefix-ttft.json is
 * the stored run that engine-under-test/README.md quotes; a test checks the two agree).
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { startEngine } from '../src/start.js';

const args = process.argv.slice(2);
const jsonAt = args.indexOf('--json');
const jsonFile = jsonAt >= 0 ? args.splice(jsonAt, 2)[1] : undefined;
const promptChars = Number(args[0] ?? 7_000);
const rounds = Number(args[1] ?? 15);
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
if (jsonFile !== undefined) {
  const figures = {
    command: `npx tsx engine-under-test/bench/prefix-ttft.ts ${promptChars} ${rounds} --json ${jsonFile}`,
    generatedAt: new Date().toISOString(),
    preset: 'single',
    scale: 64,
    promptTokens: promptChars + 1,
    rounds,
    miss: { medianTtftMs: median(cold), prefilledTokens: last.cold.prefilled, cachedTokens: last.cold.cached },
    hit: { medianTtftMs: median(warm), prefilledTokens: last.warm.prefilled, cachedTokens: last.warm.cached },
  };
  writeFileSync(jsonFile, JSON.stringify(figures, null, 1) + '\n');
}
await e.close();
