/**
 * `npm run bench:engine [-- --json FILE]`: the engine's performance figures, measured in one run.
 *
 * (a) Decode attention bandwidth at a 1,048,576-token reservation: bytes of K and V a decode step reads
 *     (positions x 64 x 2 floats x 4 bytes) divided by the step time, as a ratio to a plain streaming read
 *     (a sum) of a Float32Array of the same size in this process. Steps are timed end to end through the
 *     engine (KV write, ground-truth check, attention, logits, sampling, scheduling). The sum is written
 *     with four accumulators (the fair baseline; a one-accumulator sum is latency-bound and is shown too).
 *     Goal: >= 0.5.
 * (b) Prefill tokens/s at 100k and 1,048,576 tokens: submit to first token, through the scheduler.
 * (c) The full-scale request fits and runs: a 1,048,576-token reservation continues its planted span
 *     verbatim, reads nothing foreign, and returns every page.
 * Appendix: the attention kernel alone over contiguous and scattered page tables (pages scatter after churn).
 * Then the disaggregated mode (disagg-figures.ts): (d) the full-scale incident preset through one over-limit
 * request, (e) KV transfer throughput, (f) abort-race rounds over HTTP per fault and free-list order,
 * (g) the tests' busy-pool cycles.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { resolveEngineConfig } from '../src/config.js';
import { createSingleNodeEngine } from '../src/single-node.js';
import type { Engine, RequestHandle } from '../src/engine.js';
import { KvMemory } from '../src/kv-memory.js';
import { createAttentionKernel } from '../src/attention/kernel.js';
import { decodeTokens, encodePrompt } from '../src/tokenizer.js';
import { busyPoolFractions, fullScaleIncident, raceFractions, transferFigures } from './disagg-figures.js';

const FULL = 1_048_576;
const { values } = parseArgs({ options: { json: { type: 'string' } }, strict: true });

function random(n: number, alphabet: string): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[(bytes[i] as number) % alphabet.length];
  return s;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1] as number;
};

function sum4(a: Float32Array): number {
  let x = 0, y = 0, z = 0, w = 0;
  const n = a.length - (a.length % 4);
  for (let i = 0; i < n; i += 4) {
    x += a[i] as number;
    y += a[i + 1] as number;
    z += a[i + 2] as number;
    w += a[i + 3] as number;
  }
  return x + y + z + w;
}

function sum1(a: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] as number;
  return s;
}

function timeMs(fn: () => unknown): number {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}

/** Prompt of exactly `length` tokens with a planted span in the middle, ending with the span's head. */
function plantedPrompt(length: number): { prompt: Uint16Array; rest: string } {
  const span = `kvcanary-${random(26, 'abcdefghijklmnopqrstuvwxyz234567')}`;
  const head = span.slice(0, 14);
  const fillerLength = length - 1 - span.length - head.length - 2;
  const filler = random(fillerLength, '0123456789abcdef');
  const cut = Math.floor(fillerLength / 2);
  const prompt = encodePrompt(`${filler.slice(0, cut)} ${span}${filler.slice(cut)} ${head}`);
  if (prompt.length !== length) throw new Error(`prompt is ${prompt.length} tokens, wanted ${length}`);
  return { prompt, rest: span.slice(14) };
}

interface Run {
  firstTokenMs: number;
  stepMs: number[];
  text: string;
}

async function runOne(engine: Engine, prompt: Uint16Array, maxTokens: number): Promise<Run> {
  const t0 = performance.now();
  const result = engine.submit({ promptTokens: prompt, maxTokens, sampling: { temperature: 0, topP: 1, seed: 0 } });
  if (!result.ok) throw new Error(`rejected: ${JSON.stringify(result)}`);
  const handle: RequestHandle = result.request;
  const stamps: number[] = [];
  const tokens: number[] = [];
  for await (const event of handle.events) {
    if (event.type !== 'token') break;
    stamps.push(performance.now());
    tokens.push(event.token);
  }
  return {
    firstTokenMs: (stamps[0] as number) - t0,
    stepMs: stamps.slice(1).map((t, i) => t - (stamps[i] as number)),
    text: decodeTokens(tokens),
  };
}

async function main(): Promise<void> {
  const started = performance.now();
  const config = resolveEngineConfig({ preset: 'single' });
  const engine = createSingleNodeEngine(config);
  process.stderr.write(`engine: context ${config.contextTokens}, pool ${config.poolTokens} tokens (${config.numPages} pages), kernel ${engine.info().kernel}\n`);

  // (b) prefill at 100k (and warm-up)
  const small = plantedPrompt(100_000);
  await runOne(engine, small.prompt, 2);
  const prefill100k = await runOne(engine, small.prompt, 2);

  // (a), (b), (c) at full scale: prompt + max_tokens = 1,048,576
  const decodeSteps = 33;
  const big = plantedPrompt(FULL - (decodeSteps + 1));
  process.stderr.write('running the 1,048,576-token request...\n');
  const full = await runOne(engine, big.prompt, decodeSteps + 1);
  const stats = engine.stats();
  const positions = big.prompt.length + decodeSteps / 2; // mean positions attended per timed step
  const bytesPerStep = positions * 64 * 2 * 4;
  const stepMs = median(full.stepMs);

  const baseline = new Float32Array(Math.round(positions) * 128);
  for (let i = 0; i < baseline.length; i++) baseline[i] = (i % 97) / 97 - 0.5; // touched, not the zero page
  const sum4Ms: number[] = [];
  const sum1Ms: number[] = [];
  for (let r = 0; r < 9; r++) {
    sum4Ms.push(timeMs(() => sum4(baseline)));
    sum1Ms.push(timeMs(() => sum1(baseline)));
  }
  const s4 = median(sum4Ms.slice(2));
  const s1 = median(sum1Ms.slice(2));
  const gbps = (bytes: number, ms: number) => bytes / ms / 1e6;

  // Appendix: the kernel alone, contiguous vs scattered tables, same positions.
  const kernelPages = Math.ceil(FULL / 16);
  const memory = KvMemory.create({ numPages: kernelPages, pageSize: 16 });
  for (let i = 0; i < memory.data.length; i++) memory.data[i] = (i & 1) === 0 ? 0.125 : -0.125;
  const kernel = createAttentionKernel(memory);
  const q = Float32Array.from({ length: 64 }, (_, i) => ((i * 7) % 3 === 0 ? 0.125 : -0.125));
  const out = new Float32Array(64);
  const contiguous = Int32Array.from({ length: kernelPages }, (_, i) => i);
  const scattered = Int32Array.from({ length: kernelPages }, (_, i) => (i * 7919) % kernelPages);
  const kc: number[] = [];
  const ks: number[] = [];
  const ksum: number[] = [];
  for (let r = 0; r < 9; r++) {
    kc.push(timeMs(() => kernel.attend(contiguous, FULL, q, 20, out)));
    ks.push(timeMs(() => kernel.attend(scattered, FULL, q, 20, out)));
    ksum.push(timeMs(() => sum4(memory.data)));
  }
  const kBytes = FULL * 512;

  const report = {
    machine: { cpus: (await import('node:os')).cpus().length, node: process.version },
    engine: { contextTokens: config.contextTokens, poolTokens: config.poolTokens, pageSize: config.pageSize, kernel: engine.info().kernel, chunkTokens: config.chunkTokens },
    decode: {
      reservationTokens: big.prompt.length + decodeSteps + 1,
      positionsPerStep: Math.round(positions),
      bytesPerStep: Math.round(bytesPerStep),
      stepMsMedian: stepMs,
      attentionGBps: gbps(bytesPerStep, stepMs),
      streamingSumGBps: gbps(bytesPerStep, s4),
      ratioToStreamingSum: s4 / stepMs,
      ratioToNaiveSum: s1 / stepMs,
      goal: 0.5,
    },
    prefill: {
      tokensPerSecond100k: small.prompt.length / (prefill100k.firstTokenMs / 1000),
      tokensPerSecondFull: big.prompt.length / (full.firstTokenMs / 1000),
      fullPromptTokens: big.prompt.length,
    },
    fullScale: {
      copiedSpanVerbatim: full.text.startsWith(big.rest),
      generated: full.text.slice(0, 40),
      foreignPageReads: stats.foreignPageReadsTotal,
      pagesBackOnFreeList: engine.stats().pool.freePages === engine.stats().pool.numPages,
      invariantViolations: engine.checkInvariants().length,
      rssMiB: Math.round(process.memoryUsage().rss / 2 ** 20),
      poolMiB: Math.round(config.numPages * 16 * 512 / 2 ** 20),
    },
    kernelOnly: {
      contiguousRatio: median(ksum) / median(kc),
      scatteredRatio: median(ksum) / median(ks),
      contiguousGBps: gbps(kBytes, median(kc)),
      scatteredGBps: gbps(kBytes, median(ks)),
    },
    seconds: 0,
  };
  await engine.close();

  const log = (line: string): void => void process.stderr.write(line + '\n');
  const incident = await fullScaleIncident(log);
  const transfer = await transferFigures();
  const rounds = await raceFractions(24, log);
  const busy = await busyPoolFractions(300);
  const disaggregated = { incident, transfer, abortRaceRounds: rounds, busyPoolCycles: busy };
  report.seconds = (performance.now() - started) / 1000;

  const f = (x: number, d = 2) => x.toFixed(d);
  const rows: [string, string][] = [
    ['decode step @ 1,048,576-token reservation', `${f(stepMs, 1)} ms (median of ${full.stepMs.length})`],
    ['  K+V bytes read per step', `${(bytesPerStep / 2 ** 20).toFixed(0)} MiB`],
    ['  attention bandwidth', `${f(report.decode.attentionGBps)} GB/s`],
    ['  streaming sum (4 accumulators), same size', `${f(report.decode.streamingSumGBps)} GB/s`],
    ['  RATIO attention / streaming sum (goal >= 0.5)', f(report.decode.ratioToStreamingSum)],
    ['  ratio to a 1-accumulator sum', f(report.decode.ratioToNaiveSum)],
    [`prefill @ ${small.prompt.length.toLocaleString('en-US')} tokens`, `${f(report.prefill.tokensPerSecond100k / 1e6)} M tokens/s`],
    [`prefill @ ${big.prompt.length.toLocaleString('en-US')} tokens`, `${f(report.prefill.tokensPerSecondFull / 1e6)} M tokens/s`],
    ['full scale: span copied verbatim', String(report.fullScale.copiedSpanVerbatim)],
    ['full scale: foreign page reads', String(report.fullScale.foreignPageReads)],
    ['full scale: all pages back, invariants ok', String(report.fullScale.pagesBackOnFreeList && report.fullScale.invariantViolations === 0)],
    ['full scale: pool / process RSS', `${report.fullScale.poolMiB} / ${report.fullScale.rssMiB} MiB`],
    ['kernel only, contiguous pages: ratio', f(report.kernelOnly.contiguousRatio)],
    ['kernel only, scattered pages: ratio', f(report.kernelOnly.scatteredRatio)],
    [
      `incident preset, full scale (context ${incident.contextTokens.toLocaleString('en-US')}, prefill pool ${incident.prefillPoolTokens.toLocaleString('en-US')})`,
      `${f(incident.seconds, 1)} s`,
    ],
    [`  over-limit prompt of ${incident.overLimitPromptTokens.toLocaleString('en-US')} tokens: answered with text`, String(incident.answeredWithText)],
    ['  ... continuing another request\'s marker', `${incident.continuedAnotherRequestsMarker} (${JSON.stringify(incident.generated.slice(0, 26))})`],
    ['  foreign page reads (ground truth)', String(incident.foreignPageReads)],
    ['  time to first token / decode step (900k reservation)', `${f(incident.firstTokenMs, 0)} ms / ${f(incident.decodeStepMsMedian, 1)} ms`],
    ['  all pages back on both free lists, invariants ok', String(incident.pagesBackAndInvariantsOk)],
    [
      `KV transfer alone, ${(transfer.tokens / 1e3).toFixed(0)}k tokens in ${transfer.aloneBatches} batches (warm pages)`,
      `${f(transfer.aloneTokensPerSecond / 1e6)} M tokens/s (16,384-token batches at 4 ms mean flight: ${f(transfer.nominalTokensPerSecond / 1e6)} nominal)`,
    ],
    [
      '  prefill + transfer as served, submit to first token',
      `${f(transfer.pipelinedPromptTokensPerSecond / 1e6)} M prompt tokens/s (single-node prefill above: ${f(report.prefill.tokensPerSecondFull / 1e6)})`,
    ],
    ...rounds.map((r): [string, string] => [
      `abort-race rounds @ scale 64, ${r.fault}, ${r.freeList}`,
      `${r.http.leakRounds}/${r.http.rounds} rounds show another request's text (${r.http.leakReaders}/${r.http.readers} readers)`,
    ]),
    ...busy.map((b): [string, string] => [
      `busy-pool cycles (tests' workload), ${b.fault}`,
      `${b.result.leakCycles}/${b.result.cycles} cycles (${f(100 * b.result.fraction, 0)}%)`,
    ]),
    ['bench time', `${f(report.seconds, 1)} s`],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  process.stdout.write(`kvcanary engine benchmark (${report.engine.kernel} kernel, ${report.machine.cpus} CPUs, node ${report.machine.node})\n`);
  for (const [k, v] of rows) process.stdout.write(`${k.padEnd(width)}  ${v}\n`);
  if (values.json !== undefined) writeFileSync(values.json, JSON.stringify({ ...report, disaggregated }, null, 2) + '\n');
  if (!report.fullScale.copiedSpanVerbatim || report.fullScale.foreignPageReads !== 0) process.exitCode = 1;
  if (!incident.answeredWithText || incident.foreignPageReads === 0 || !incident.pagesBackAndInvariantsOk) process.exitCode = 1;
}

await main();
