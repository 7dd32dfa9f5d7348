/**
 * abort-race: late writes and release races. "Stop computing", "stop writing", "stop reading" and "safe
 * to reallocate" are separate conditions; an engine that frees pages on abort while a KV transfer or a
 * host-offload copy is still in flight hands the next owner pages that are about to be overwritten.
 *
 * Each round starts several streaming planters together and aborts each at a different moment — a few
 * milliseconds in (mid-prefill or mid-transfer) up to after the first streamed characters — and the moment
 * each abort lands it sends readers: short prompts with no markers that end with the marker cue. Any
 * foreign marker in any response is `cross-request-leak`.
 *
 * Page reuse is what turns a late write into a leak, and an idle pool hides it: freed pages go to the back
 * of a free list and are handed out long after the late write has landed. So when the endpoint exposes its
 * pools, each round first fills most of the largest one with ballast — long-running generations of plain
 * filler (which end with the cue too, so they read as well) — leaving room for the planters and readers
 * only. Freed pages are then reused at once, by our readers, whatever the free-list order: the state of a
 * busy production endpoint, made on purpose. The ballast is aborted when the round ends.
 *
 * Pass needs evidence the race was exercised: at least one planter really aborted in flight and most
 * readers answered. Otherwise inconclusive.
 */
import { overlimitPrompt, readerPrompt, repetitionsFor, tokensFor, type TokenLine } from '../prompts.js';
import type { ScenarioResult } from '../result.js';
import type { AbortAfter } from '../target/client.js';
import { tokenLine } from './calibration.js';
import type { ScenarioContext } from './context.js';
import { exchange, type Exchange } from './exchange.js';
import { initialSizing, plant } from './planting.js';
import { ResultBuilder } from './result-builder.js';
import { clamp } from './clamp.js';

export const ABORT_RACE = 'abort-race';

/** Abort moments, cycled across planters: early (prefill/transfer), mid, and after streaming began. */
const ABORT_SCHEDULE: AbortAfter[] = [{ ms: 3 }, { ms: 12 }, { chars: 1 }, { ms: 30 }, { ms: 60 }, { chars: 12 }, { ms: 6 }, { ms: 120 }];
const PLANTERS_PER_ROUND = 2;
const READERS_PER_ABORT = 8;

export async function abortRace(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(ABORT_RACE, ctx);
  const { poolTokens, contextTokens, reachable } = ctx.introspection;
  if (!reachable) {
    out.note('endpoint unreachable');
    return out.finish('inconclusive');
  }
  const line = await tokenLine(ctx, (ex) => out.add(ex));
  const rounds = ctx.tuning.abortRounds ?? 4;
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const bound = Math.min(poolTokens ?? Infinity, contextTokens ?? Infinity);
  const planterTokens = ctx.tuning.planterTokens ?? (Number.isFinite(bound) ? clamp(Math.floor(bound / 4), 256, 4096) : 2048);
  // Short readers: a reader's own transfer overwrites the pages it was handed, so the fewer it writes
  // before decoding, the longer a late write into them survives to be read.
  const readerTokens = Number.isFinite(bound) ? clamp(Math.floor(bound / 64), 64, 512) : 256;
  const readerReps = line === undefined ? 0 : readerTokens < line.overhead + line.perRepetition ? 0 : repetitionsFor(line, readerTokens);
  const readerEstimate = line === undefined ? 96 : tokensFor(line, readerReps);
  const reader = readerPrompt(readerReps);

  // Ballast: hold the largest (reservation) pool nearly full, so that freed pages are reused at once.
  const reservationPool = ctx.introspection.largestPoolTokens ?? poolTokens;
  // Room for the planters and the readers of one abort, and a sliver: the readers' pages then come
  // mostly from the planter that was just aborted.
  const roundNeed = PLANTERS_PER_ROUND * (planterTokens + maxTokens) + READERS_PER_ABORT * (readerEstimate + maxTokens);
  const ballastTokens =
    line !== undefined && reservationPool !== undefined && ctx.tuning.abortBallast !== false ? Math.max(0, reservationPool - roundNeed - Math.ceil(reservationPool * 0.01)) : 0;
  const admitBound = Math.min(poolTokens ?? Infinity, contextTokens ?? Infinity);
  const ballastPieces = ballastTokens === 0 ? 0 : Math.ceil(ballastTokens / Math.max(1, admitBound * 0.8));
  if (ballastTokens > 0) out.note(`ballast: ${ballastPieces} request(s), ~${ballastTokens} tokens held per round (pool ${reservationPool})`);

  const sizing = initialSizing();
  let abortedInFlight = 0;
  let planters = 0;
  let readersOk = 0;
  let readersSent = 0;
  let moment = 0;
  for (let round = 0; round < rounds && !ctx.signal.aborted; round++) {
    const ballastStop = new AbortController();
    const ballast = holdBallast(ctx, ballastPieces, ballastTokens, ballastStop.signal, line);
    await ballast.holding;
    const inRound = Array.from({ length: PLANTERS_PER_ROUND }, async () => {
      const abortAfter = ABORT_SCHEDULE[moment++ % ABORT_SCHEDULE.length]!;
      const { ex } = await plant(ctx, sizing, { tokens: planterTokens, maxTokens, stream: true, abortAfter });
      if (out.add(ex) === undefined) return;
      planters++;
      if (ex!.result.transport === 'aborted') abortedInFlight++;
      // The moment the abort lands: readers, together.
      const readers = await Promise.all(
        Array.from({ length: READERS_PER_ABORT }, () => exchange(ctx, { role: 'reader', prompt: reader, promptTokens: readerEstimate, maxTokens, stream: true })),
      );
      for (const r of readers) {
        if (out.add(r) === undefined) continue;
        readersSent++;
        if (r!.result.transport === 'ok') readersOk++;
      }
    });
    await Promise.all(inRound);
    ballastStop.abort();
    for (const b of await ballast.done) out.add(b);
  }
  out.note(`${planters} planter(s), ${abortedInFlight} aborted in flight; ${readersOk}/${readersSent} readers answered`);
  if (abortedInFlight === 0) {
    out.note('no planter was still in flight when aborted: the race was not exercised');
    return out.finish('inconclusive');
  }
  if (readersSent === 0 || readersOk * 2 < readersSent) {
    out.note('too few readers answered to establish isolation');
    return out.finish('inconclusive');
  }
  return out.finish('pass');
}

/**
 * Starts `pieces` ballast generations together; `holding` resolves once each is decoding (its first text
 * arrived, so its pages are held) or has ended; `done` once all have ended (abort them with `stop`).
 */
function holdBallast(
  ctx: ScenarioContext,
  pieces: number,
  tokens: number,
  stop: AbortSignal,
  line: TokenLine | undefined,
): { holding: Promise<void>; done: Promise<Array<Exchange | undefined>> } {
  if (pieces === 0 || line === undefined) return { holding: Promise.resolve(), done: Promise.resolve([]) };
  const each = Math.floor(tokens / pieces);
  const maxTokens = Math.min(4096, Math.max(256, Math.floor(each / 2)));
  const reps = repetitionsFor(line, Math.max(16, each - maxTokens));
  const started: Array<Promise<void>> = [];
  const done = Promise.all(
    Array.from({ length: pieces }, () => {
      let onFirst!: () => void;
      started.push(new Promise<void>((resolve) => (onFirst = resolve)));
      return exchange(ctx, {
        role: 'ballast',
        prompt: overlimitPrompt(reps),
        promptTokens: tokensFor(line, reps),
        maxTokens,
        stream: true,
        signal: stop,
        onFirstText: onFirst,
      }).finally(onFirst);
    }),
  );
  return { holding: Promise.all(started).then(() => {}), done };
}
