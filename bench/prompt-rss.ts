/**
 * Child process of the overhead section: how much does this process's resident memory peak while it sends
 * one over-limit prompt of the scenario's beyond-context size (context + 2%) to an endpoint advertising a
 * 1,048,576-token context? Run in its own process so nothing else moves its RSS.
 *
 *   node --import tsx bench/prompt-rss.ts --target URL --mode prober|materialized
 *
 * `prober`: the prober's own path (introspection, calibration via /tokenize, overlimitPrompt streamed by
 * the target client). `materialized`: the same prompt built as one string and sent as one JSON body with
 * fetch, as a client that holds its prompt would. Peak RSS is the kernel's high-water mark (VmHWM), reset
 * just before the send (/proc/self/clear_refs), so start-up peaks do not hide the send's. Prints one JSON
 * document on stdout.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { calibrate, overlimitPrompt, repetitionsFor, sourceText, tokensFor } from '../prober/src/probe/prompts.js';
import { limitProbes } from '../prober/src/probe/scenarios/overlimit-handoff.js';
import { createTargetClient } from '../prober/src/probe/target/client.js';
import { introspect } from '../prober/src/probe/target/introspect.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const { values } = parseArgs({ options: { target: { type: 'string' }, mode: { type: 'string', default: 'prober' } }, strict: true });
if (values.target === undefined || (values.mode !== 'prober' && values.mode !== 'materialized')) {
  process.stderr.write('usage: prompt-rss.ts --target URL --mode prober|materialized\n');
  process.exit(64);
}

function statusKiB(field: 'VmRSS' | 'VmHWM'): number | undefined {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
    return m === null ? undefined : Number(m[1]);
  } catch {
    return undefined;
  }
}

/** Resets VmHWM to the current RSS; false where the kernel does not allow it. */
function resetPeak(): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}

const client = createTargetClient({ baseUrl: values.target, timeoutMs: 300_000 });
const info = await introspect(client);
if (info.contextTokens === undefined || info.tokenize === undefined) throw new Error('prompt-rss: the target must advertise a context limit and /tokenize');
const tokenize = info.tokenize;
const line = await calibrate((s) => tokenize(s), 'tokenize');
if (line === undefined) throw new Error('prompt-rss: calibration failed');
const probe = limitProbes(info.contextTokens, undefined, 48, []).find((p) => p.label === 'beyond-context')!;
const reps = repetitionsFor(line, probe.tokens);
const promptTokens = tokensFor(line, reps);
const promptBytes = overlimitPrompt(reps).totalChars; // ASCII filler: characters = bytes

// Sample too, where the high-water mark cannot be reset.
let sampledPeak = 0;
const sampler = setInterval(() => (sampledPeak = Math.max(sampledPeak, statusKiB('VmRSS') ?? 0)), 2);
gc();
gc();
const baselineKiB = statusKiB('VmRSS') ?? Math.round(process.memoryUsage().rss / 1024);
const hwmReset = resetPeak();
sampledPeak = baselineKiB;
let status: number | undefined;
let requestBytes = 0;
if (values.mode === 'prober') {
  const r = await client.complete({ api: 'completions', model: info.models[0] ?? 'm', prompt: overlimitPrompt(reps), maxTokens: 48, temperature: 0, stream: true });
  status = r.status;
  requestBytes = r.requestBytes;
} else {
  const body = JSON.stringify({ model: info.models[0] ?? 'm', prompt: sourceText(overlimitPrompt(reps)), max_tokens: 48, temperature: 0, stream: true });
  requestBytes = Buffer.byteLength(body);
  const res = await fetch(`${client.root}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  status = res.status;
  await res.arrayBuffer();
}
clearInterval(sampler);
const peakKiB = hwmReset ? (statusKiB('VmHWM') ?? sampledPeak) : sampledPeak;
await client.close();
process.stdout.write(
  JSON.stringify({
    mode: values.mode,
    contextTokens: info.contextTokens,
    promptTokens,
    promptBytes,
    requestBytes,
    status,
    baselineRssBytes: baselineKiB * 1024,
    peakRssBytes: peakKiB * 1024,
    peakGrowthBytes: Math.max(0, peakKiB - baselineKiB) * 1024,
    growthPerPromptByte: Math.max(0, peakKiB - baselineKiB) * 1024 / promptBytes,
    peakSource: hwmReset ? 'VmHWM after clear_refs' : 'VmRSS sampled every 2 ms',
  }) + '\n',
);
