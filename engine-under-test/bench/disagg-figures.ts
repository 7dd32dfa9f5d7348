/**
 * The disaggregated half of `npm run bench:engine`:
 * (d) the full-scale incident preset (context 1,048,576, prefill pool 681,280) on this machine: three
 *     planters of 200,000 marker-dense tokens, then one over-limit prompt of 900,000 tokens ending with the
 *     marker cue, through the programmatic interface; its answer, its foreign reads, its time to first
 *     token and decode step time over a 900,000-token reservation;
 * (e) KV transfer throughput at the default link (16,384-token batches, 4 ms mean flight time), on warm
 *     pages (lifo reuse after a warm-up request: a fresh shared memory pays first-touch page faults, about
 *     10x the copy itself, which real engines pay once at start-up): the link alone (200,000-token prompts
 *     prefilled in one chunk, then transferred: tokens landed per second of transfer time), and pipelined
 *     with chunked prefill as served (prompt tokens per second from submit to first token, beside
 *     single-node prefill);
 * (f) abort-race rounds over HTTP at --scale 64 (the prober's workload, abort-race-rounds.ts) for the
 *     late-write and offload-release-race faults under both free-list orders: the fraction of rounds in
 *     which a reader shows another request's text;
 * (g) the busy-pool cycles the tests use (race-cycles.ts): the same fraction, in-process.
 */
import { randomBytes } from 'node:crypto';
import { resolveEngineConfig } from '../src/config.js';
import { createDisaggregatedEngine } from '../src/disagg/router.js';
import type { Engine, RequestHandle } from '../src/engine.js';
import type { FreeListPolicy } from '../src/free-list.js';
import { startEngine } from '../src/start.js';
import { decodeTokens, encodePrompt } from '../src/tokenizer.js';
import { abortRaceRounds, type AbortRaceRoundsResult } from './abort-race-rounds.js';
import { runRaceCycles, type RaceCycleResult } from './race-cycles.js';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const base32 = (n: number): string => Array.from(randomBytes(n), (b) => BASE32[b % 32]).join('');
const greedy = { temperature: 0, topP: 1, seed: 0 };
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1] ?? NaN;

interface Timed {
  text: string;
  firstTokenMs: number;
  stepMs: number[];
  endMs: number;
}

async function timed(engine: Engine, prompt: Uint16Array, maxTokens: number): Promise<Timed> {
  const t0 = performance.now();
  const submitted = engine.submit({ promptTokens: prompt, maxTokens, sampling: greedy });
  if (!submitted.ok) throw new Error(`refused: ${JSON.stringify('rejection' in submitted ? submitted.rejection : submitted.overloaded)}`);
  const handle: RequestHandle = submitted.request;
  const stamps: number[] = [];
  const tokens: number[] = [];
  for await (const e of handle.events) {
    if (e.type !== 'token') break;
    stamps.push(performance.now());
    tokens.push(e.token);
  }
  return {
    text: decodeTokens(tokens),
    firstTokenMs: (stamps[0] ?? NaN) - t0,
    stepMs: stamps.slice(1).map((t, i) => t - (stamps[i] as number)),
    endMs: performance.now() - t0,
  };
}

export interface FullScaleIncident {
  contextTokens: number;
  prefillPoolTokens: number;
  decodePoolTokens: number;
  plantedTokens: number;
  overLimitPromptTokens: number;
  answeredWithText: boolean;
  continuedAnotherRequestsMarker: boolean;
  generated: string;
  foreignPageReads: number;
  firstTokenMs: number;
  decodeStepMsMedian: number;
  pagesBackAndInvariantsOk: boolean;
  seconds: number;
}

export async function fullScaleIncident(log: (line: string) => void): Promise<FullScaleIncident> {
  const started = performance.now();
  const config = resolveEngineConfig({ preset: 'incident' });
  const d = config.disaggregated!;
  const engine = await createDisaggregatedEngine(config);
  log(`incident, full scale: context ${config.contextTokens}, prefill pool ${config.poolTokens}, decode pool ${d.decodePoolTokens}`);
  const fragments = new Set<string>();
  let planted = 0;
  for (let i = 0; i < 3; i++) {
    const markers = Array.from({ length: Math.floor(200_000 / 36) }, () => `kvcanary-${base32(26)}`);
    for (const m of markers) for (let j = 9; j + 12 <= m.length; j++) fragments.add(m.slice(j, j + 12));
    const prompt = encodePrompt(`Keep these reference codes on file: ${markers.join(' ')}\nQuote one reference code: kvcanary-`);
    planted += prompt.length;
    await timed(engine, prompt, 4);
  }
  const filler = 'The committee reviewed the quarterly figures for the northern region. ';
  const overLimit = encodePrompt(`Summarise the following meeting notes.\n\n${filler.repeat(Math.ceil(900_000 / filler.length))}`.slice(0, 900_000 - 40) + '\nQuote the reference code: kvcanary-');
  log(`planted ${planted} tokens; sending a ${overLimit.length}-token prompt (between the prefill pool and the context limit)...`);
  const before = engine.stats().foreignPageReadsTotal;
  const answer = await timed(engine, overLimit, 32);
  const foreign = engine.stats().foreignPageReadsTotal - before;
  let continued = false;
  for (let i = 0; i + 12 <= answer.text.length && !continued; i++) continued = fragments.has(answer.text.slice(i, i + 12));
  let whole = false;
  for (let i = 0; i < 2000 && !whole; i++) {
    const p = engine.stats().pools!;
    whole = p.prefill.freePages === p.prefill.numPages && p.decode.freePages === p.decode.numPages;
    if (!whole) await new Promise((r) => setTimeout(r, 5));
  }
  const invariantsOk = engine.checkInvariants().length === 0;
  await engine.close();
  return {
    contextTokens: config.contextTokens,
    prefillPoolTokens: config.poolTokens,
    decodePoolTokens: d.decodePoolTokens,
    plantedTokens: planted,
    overLimitPromptTokens: overLimit.length,
    answeredWithText: answer.text.length > 0,
    continuedAnotherRequestsMarker: continued,
    generated: answer.text.slice(0, 32),
    foreignPageReads: foreign,
    firstTokenMs: answer.firstTokenMs,
    decodeStepMsMedian: median(answer.stepMs),
    pagesBackAndInvariantsOk: whole && invariantsOk,
    seconds: (performance.now() - started) / 1000,
  };
}

export interface TransferFigures {
  /** Link alone: tokens landed per second of transfer time. */
  aloneTokensPerSecond: number;
  aloneBatches: number;
  /** Chunked prefill and transfer pipelined, as served: prompt tokens per second, submit to first token. */
  pipelinedPromptTokensPerSecond: number;
  nominalTokensPerSecond: number;
  tokens: number;
}

/** (e): three 200,000-token prompts after a warm-up, once prefilled in one chunk, once chunked as served. */
export async function transferFigures(): Promise<TransferFigures> {
  const measure = async (chunkTokens: number): Promise<{ tokens: number; busyMs: number; batches: number; firstTokenMs: number }> => {
    const engine = await createDisaggregatedEngine(resolveEngineConfig({ preset: 'incident', freeList: 'lifo', chunkTokens }));
    await timed(engine, encodePrompt(base32(200_000)), 1); // warm-up: touches the pages the others reuse
    const before = engine.stats().transfer!;
    let firstTokenMs = 0;
    for (let i = 0; i < 3; i++) firstTokenMs += (await timed(engine, encodePrompt(base32(200_000)), 1)).firstTokenMs;
    const after = engine.stats().transfer!;
    await engine.close();
    return { tokens: after.tokensLanded - before.tokensLanded, busyMs: after.busyMs - before.busyMs, batches: after.batchesLanded - before.batchesLanded, firstTokenMs };
  };
  const alone = await measure(262_144);
  const served = await measure(resolveEngineConfig({ preset: 'incident' }).chunkTokens);
  const d = resolveEngineConfig({ preset: 'incident' }).disaggregated!;
  return {
    aloneTokensPerSecond: alone.tokens / (alone.busyMs / 1000),
    aloneBatches: alone.batches,
    pipelinedPromptTokensPerSecond: served.tokens / (served.firstTokenMs / 1000),
    nominalTokensPerSecond: d.transferBatchTokens / (d.transferLatencyMs / 1000),
    tokens: alone.tokens,
  };
}

export interface RaceFraction {
  fault: string;
  freeList: FreeListPolicy;
  http: AbortRaceRoundsResult;
}

/** (f): abort-race rounds over HTTP at --scale 64, readers sized to decode's pool. */
export async function raceFractions(rounds: number, log: (line: string) => void): Promise<RaceFraction[]> {
  const out: RaceFraction[] = [];
  for (const fault of ['late-write', 'offload-release-race']) {
    for (const freeList of ['fifo', 'lifo'] as const) {
      const e = await startEngine({ preset: 'disaggregated', scale: 64, faults: [fault], freeList, log: () => {} });
      const decodePool = e.config.disaggregated!.decodePoolTokens;
      const http = await abortRaceRounds(e.url, decodePool, rounds);
      await e.close();
      log(`abort-race rounds, ${fault}, ${freeList}: ${http.leakRounds}/${http.rounds}`);
      out.push({ fault, freeList, http });
    }
  }
  return out;
}

/** (g): the tests' busy-pool cycles, without a defense. */
export async function busyPoolFractions(cycles: number): Promise<{ fault: string; result: RaceCycleResult }[]> {
  const out: { fault: string; result: RaceCycleResult }[] = [];
  for (const [fault, batch] of [['late-write', 128], ['offload-release-race', 256]] as const) {
    const engine = await createDisaggregatedEngine(
      resolveEngineConfig({ preset: 'disaggregated', scale: 64, decodePoolTokens: 4096, transferLatencyMs: 1, transferBatchTokens: batch, faults: [fault] }),
    );
    out.push({ fault, result: await runRaceCycles(engine, { cycles }) });
    await engine.close();
  }
  return out;
}
