/**
 * How often each prefix-cache fault shows another request's text, and how often its defense lets it
 * through, over N cycles of the workloads in test/engine-prefix-faults.test.ts (fresh random markers each
 * cycle, one engine per configuration), and what the defense counted
 * (`kvcanary_engine_defense_blocks_total{defense}`).
 * Run: npx tsx engine-under-test/bench/prefix-fault-rates.ts [cycles] [--json FILE]
 * (engine-under-test/bench/results/prefix-fault-rates.json is the stored run engine-under-test/README.md
 * quotes; a test checks the two agree).
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import type { DefenseName } from '../src/defenses.js';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../src/start.js';
import { encodePrompt } from '../src/tokenizer.js';

const args = process.argv.slice(2);
const jsonAt = args.indexOf('--json');
const jsonFile = jsonAt >= 0 ? args.splice(jsonAt, 2)[1] : undefined;
const cycles = Number(args[0] ?? 100);
const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const marker = (): string => `kvcanary-${Array.from(randomBytes(26), (b) => BASE32[b % 32]).join('')}`;

async function complete(e: RunningEngine, body: Record<string, unknown>): Promise<{ text: string; cached: number }> {
  const res = await fetch(`${e.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ max_tokens: 24, temperature: 0, ...body }) });
  const json = (await res.json()) as { choices: { text: string }[]; usage: { prompt_tokens_details?: { cached_tokens: number } } };
  return { text: json.choices[0]?.text ?? '', cached: json.usage.prompt_tokens_details?.cached_tokens ?? 0 };
}
function shows(text: string, markers: string[]): boolean {
  const fragments = new Set<string>();
  for (const m of markers) for (let j = 9; j + 12 <= m.length; j++) fragments.add(m.slice(j, j + 12));
  for (let i = 0; i + 12 <= text.length; i++) if (fragments.has(text.slice(i, i + 12))) return true;
  return false;
}

type Cycle = (e: RunningEngine, i: number) => Promise<boolean>;

const permuted: Cycle = async (e, i) => {
  const markers = Array.from({ length: 40 }, marker);
  const a = encodePrompt(`Keep these reference codes on file (${i}): ${markers.join(' ')}`);
  const blocks = Math.floor(a.length / 16);
  const planted = Array.from(a.subarray(0, blocks * 16));
  await complete(e, { prompt: [...planted, ...encodePrompt('\nNothing else.').subarray(1)], max_tokens: 1 });
  const shuffled: number[] = [];
  for (let b = 0; b < blocks; b++) {
    const block = planted.slice(b * 16, b * 16 + 16);
    shuffled.push(...(b === 0 ? [block[0] as number, ...block.slice(1).reverse()] : block.reverse()));
  }
  const r = await complete(e, { prompt: [...shuffled, ...encodePrompt('\nQuote one reference code: kvcanary-').subarray(1)] });
  return shows(r.text, markers);
};

const stale: Cycle = async (e, i) => {
  const preamble = `You are a helpful assistant (${i}) for the northern region. Answer briefly and cite figures. `.repeat(4);
  await complete(e, { prompt: `${preamble}Hello.`, max_tokens: 1 });
  const markers = Array.from({ length: 55 }, marker);
  await complete(e, { prompt: `Keep these reference codes on file: ${markers.join(' ')}\nDone.`, max_tokens: 1 });
  const r = await complete(e, { prompt: `${preamble}\nQuote one reference code: kvcanary-` });
  return shows(r.text, markers);
};

const crossSalt: Cycle = async (e, i) => {
  const prompt = `Keep these reference codes on file: ${Array.from({ length: 40 }, marker).join(' ')}\nQuote one: kvcanary-`;
  // Fresh salts per cycle: a hit on an earlier cycle's same-salt prefix would be legitimate reuse.
  await complete(e, { prompt, cache_salt: `a${i}`, max_tokens: 1 });
  return (await complete(e, { prompt, cache_salt: `b${i}`, max_tokens: 1 })).cached > 0;
};

const runs: [string, StartEngineOptions, Cycle, string][] = [
  ['prefix-cache-ignores-salt', { faults: ['prefix-cache-ignores-salt'] }, crossSalt, 'cross-salt cache hit'],
  ['  + salted-prefix-cache', { faults: ['prefix-cache-ignores-salt'], defenses: ['salted-prefix-cache'] }, crossSalt, 'cross-salt cache hit'],
  ['weak-prefix-hash', { faults: ['weak-prefix-hash'] }, permuted, "another request's text"],
  ['  + strong-prefix-hash', { faults: ['weak-prefix-hash'], defenses: ['strong-prefix-hash'] }, permuted, "another request's text"],
  ['prompt-cache-restore-race', { faults: ['prompt-cache-restore-race'], poolTokens: 2048, contextTokens: 2048 }, stale, "another request's text"],
  ['  + restore-fencing', { faults: ['prompt-cache-restore-race'], defenses: ['restore-fencing'], poolTokens: 2048, contextTokens: 2048 }, stale, "another request's text"],
];
const rows = [];
for (const [name, options, cycle, what] of runs) {
  const e = await startEngine({ preset: 'single', scale: 64, log: () => {}, ...options });
  const before = e.engine.stats().foreignPageReadsTotal;
  let hits = 0;
  for (let i = 0; i < cycles; i++) if (await cycle(e, i)) hits++;
  const foreignPageReads = e.engine.stats().foreignPageReadsTotal - before;
  const defense = options.defenses?.[0] as DefenseName | undefined;
  const blocks = defense === undefined ? undefined : e.engine.stats().defenseBlocks[defense];
  console.log(`${name.padEnd(28)} ${what}: ${hits}/${cycles} cycles; foreign page reads ${foreignPageReads}${blocks === undefined ? '' : `; ${defense} blocks ${blocks}`}`);
  rows.push({ configuration: name.trim(), faults: options.faults ?? [], defenses: options.defenses ?? [], measured: what, cycles, hits, foreignPageReads, ...(blocks !== undefined ? { blocks } : {}) });
  await e.close();
}
if (jsonFile !== undefined) {
  const figures = { command: `npx tsx engine-under-test/bench/prefix-fault-rates.ts ${cycles} --json ${jsonFile}`, generatedAt: new Date().toISOString(), preset: 'single', scale: 64, cycles, rows };
  writeFileSync(jsonFile, JSON.stringify(figures, null, 1) + '\n');
}
