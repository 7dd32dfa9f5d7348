/**
 * Abort-race cycles driven in-process through the Engine interface (no HTTP), fast enough for a thousand:
 * what a client that aborts requests mid-transfer and sends new ones sees.
 *
 * Each of `lanes` concurrent clients repeats a cycle: a planter (a prompt dense with fresh canary markers)
 * is submitted and aborted at a random moment within `abortWithinMs` (mid-prefill, mid-transfer, or after
 * its first tokens); then `readersPerCycle` readers are sent together. Readers of one lane share one prompt
 * (no markers, ending with the marker cue), as a prober's readers do, so a host-offload tier sees the same
 * prefix again and again. A cycle counts as a leak when any of its readers' text contains a fragment of a
 * marker planted by any planter (other requests' text, through attention). Lanes keep the pool busy, as
 * other clients do on a production endpoint.
 */
import { randomBytes } from 'node:crypto';
import type { Engine } from '../src/engine.js';
import { decodeTokens, encodePrompt } from '../src/tokenizer.js';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const FILLER = 'The committee reviewed the quarterly figures for the northern region and agreed to meet again. ';
/** Fragment length that counts as a leak: 10 base32 characters = 50 bits, never matched by chance. */
const FRAGMENT = 10;

export interface RaceCycleOptions {
  cycles: number;
  /** Concurrent clients. @default 6 */
  lanes?: number;
  /** @default 600 */
  planterTokens?: number;
  /** @default 200 */
  readerTokens?: number;
  /** @default 3 */
  readersPerCycle?: number;
  /** Planters are aborted uniformly within this many ms of submission. @default 10 */
  abortWithinMs?: number;
  /** @default 24 */
  readerMaxTokens?: number;
  /** @default Math.random */
  random?: () => number;
}

export interface RaceCycleResult {
  cycles: number;
  /** Cycles in which a reader showed another request's marker text. */
  leakCycles: number;
  fraction: number;
  /** Ground truth over the run (engine's foreign-read counter delta). */
  foreignPageReads: number;
  msPerCycle: number;
}

function base32(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += BASE32[(bytes[i] as number) % 32];
  return s;
}

const greedy = { temperature: 0, topP: 1, seed: 0 };

async function complete(engine: Engine, prompt: Uint16Array, maxTokens: number, abortAfterMs?: number): Promise<string> {
  const submitted = engine.submit({ promptTokens: prompt, maxTokens, sampling: greedy });
  if (!submitted.ok) throw new Error(`refused: ${JSON.stringify('rejection' in submitted ? submitted.rejection : submitted.overloaded)}`);
  const handle = submitted.request;
  const timer = abortAfterMs === undefined ? undefined : setTimeout(() => handle.abort(), abortAfterMs);
  const tokens: number[] = [];
  for await (const event of handle.events) if (event.type === 'token') tokens.push(event.token);
  clearTimeout(timer);
  return decodeTokens(tokens);
}

export async function runRaceCycles(engine: Engine, options: RaceCycleOptions): Promise<RaceCycleResult> {
  const lanes = options.lanes ?? 6;
  const planterTokens = options.planterTokens ?? 600;
  const readerTokens = options.readerTokens ?? 200;
  const readersPerCycle = options.readersPerCycle ?? 3;
  const abortWithinMs = options.abortWithinMs ?? 10;
  const readerMaxTokens = options.readerMaxTokens ?? 24;
  const random = options.random ?? Math.random;
  const fragments = new Set<string>();
  const leaked = (text: string): boolean => {
    for (let i = 0; i + FRAGMENT <= text.length; i++) if (fragments.has(text.slice(i, i + FRAGMENT))) return true;
    return false;
  };
  const foreignBefore = engine.stats().foreignPageReadsTotal;
  let started = 0;
  let leakCycles = 0;
  const t0 = performance.now();

  async function lane(): Promise<void> {
    const reader = encodePrompt(`${base32(8)} ${FILLER.repeat(Math.max(1, Math.round(readerTokens / FILLER.length)))}\nQuote the reference code: kvcanary-`);
    while (started < options.cycles) {
      started++;
      const markers = Array.from({ length: Math.max(1, Math.floor(planterTokens / 36)) }, () => `kvcanary-${base32(26)}`);
      for (const m of markers) for (let i = 9; i + FRAGMENT <= m.length; i++) fragments.add(m.slice(i, i + FRAGMENT));
      const planter = encodePrompt(`Keep these reference codes on file: ${markers.join(' ')}\nQuote one: kvcanary-`);
      await complete(engine, planter, 16, random() * abortWithinMs);
      const texts = await Promise.all(Array.from({ length: readersPerCycle }, () => complete(engine, reader, readerMaxTokens)));
      if (texts.some(leaked)) leakCycles++;
    }
  }

  await Promise.all(Array.from({ length: lanes }, lane));
  return {
    cycles: started,
    leakCycles,
    fraction: leakCycles / started,
    foreignPageReads: engine.stats().foreignPageReadsTotal - foreignBefore,
    msPerCycle: (performance.now() - t0) / started,
  };
}
