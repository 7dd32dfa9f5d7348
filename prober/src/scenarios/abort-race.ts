/**
 * abort-race: late writes and release races. "Stop computing", "stop writing", "stop reading" and "safe
 * to reallocate" are separate conditions; an engine that frees pages on abort while a KV transfer or a
 * host-offload copy is still in flight hands the next owner pages that are about to be overwritten.
 *
 * Each round starts several streaming planters together and aborts each at a different moment — a few
 * milliseconds in (mid-prefill or mid-transfer) up to after the first streamed characters — and the moment
 * each abort lands it sends readers: short prompts with no markers that end with the marker cue. Readers
 * are sized so that together they take about the KV pool (when exposed), so freshly freed pages go to
 * our readers whatever the free-list order. Any foreign marker in any response is `cross-request-leak`.
 *
 * Pass needs evidence the race was exercised: at least one planter really aborted in flight and most
 * readers answered. Otherwise inconclusive.
 */
import { readerPrompt, repetitionsFor, tokensFor } from '../prompts.js';
import type { ScenarioResult } from '../result.js';
import type { AbortAfter } from '../target/client.js';
import { tokenLine } from './calibration.js';
import type { ScenarioContext } from './context.js';
import { exchange } from './exchange.js';
import { initialSizing, plant } from './planting.js';
import { ResultBuilder } from './result-builder.js';
import { clamp } from './clamp.js';

export const ABORT_RACE = 'abort-race';

/** Abort moments, cycled across planters: early (prefill/transfer), mid, and after streaming began. */
const ABORT_SCHEDULE: AbortAfter[] = [{ ms: 3 }, { ms: 12 }, { chars: 1 }, { ms: 30 }, { ms: 60 }, { chars: 12 }, { ms: 6 }, { ms: 120 }];
const PLANTERS_PER_ROUND = 2;
const READERS_PER_ABORT = 4;

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
  // Readers of one abort together take about the pool, each within the context limit.
  const readerTokens = Number.isFinite(bound) ? clamp(Math.floor(bound / READERS_PER_ABORT) - maxTokens - 64, 64, 8192) : 512;
  const readerReps = line === undefined ? 1 : Math.max(1, repetitionsFor(line, readerTokens));
  const readerEstimate = line === undefined ? 96 : tokensFor(line, readerReps);
  const reader = readerPrompt(readerReps);

  const sizing = initialSizing();
  let abortedInFlight = 0;
  let planters = 0;
  let readersOk = 0;
  let readersSent = 0;
  let moment = 0;
  for (let round = 0; round < rounds && !ctx.signal.aborted; round++) {
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
