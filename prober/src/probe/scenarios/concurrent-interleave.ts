/**
 * concurrent-interleave: requests of different tenants in flight together. Cache restores, batching and
 * page reuse go wrong under concurrency (llama.cpp #27148 restored another conversation into a fresh slot
 * 20 rounds of 20; vLLM #52234 answered a new prompt with the previous one's output), so this scenario
 * keeps planters, readers and over-limit prompts of both tenants in flight at once, in waves of varied
 * width (`interleaveWaves`, default 2, 4, 8).
 *
 * Design:
 * - Slots cycle through every (tenant, role) combination in an order where neighbours differ, so even a
 *   wave of two has both tenants, and a planter of one tenant runs beside a reader of the other.
 * - Readers carry no markers and end with the marker cue; half of them open like a planter does, so a
 *   cache that matches on a shared opening (a prompt cache picking the most similar entry) is exercised.
 * - Over-limit prompts (the calibrated filler family of prompts.ts, beyond the advertised context limit;
 *   only when that limit is known) go in at most one per wave: on a real endpoint each costs a whole
 *   context of upload. A 2xx with generated text, or a 2xx with no error, is `rejection-not-enforced`.
 * - Every response of every role is scanned; a foreign marker is `cross-request-leak`, and its evidence
 *   names the planting and the reading tenant.
 * - Power is measured, not derived (race-power.ts): one window is one wave in which a planter of one tenant
 *   and a reader of the other were both answered while in flight together. The configured widths are one
 *   pass; passes repeat (without over-limit prompts after the first) until the workload `npm run
 *   bench:race-calibration -- --scenario concurrent-interleave` measured is reached
 *   (CONCURRENT_INTERLEAVE_WINDOWS windows), stopping at the first finding. A pass states that measurement:
 *   the bundled engine's prompt-cache-restore-race firing on a fraction of its eligible events was caught in at
 *   least the stated share of first-contact runs (Wilson 95% lower bound); a run cut short states it scaled
 *   down (`basis: 'scaled'`).
 * - Pass needs most requests answered (a clean rejection is an answer), at least one planter and one reader
 *   through, and the stated power; otherwise inconclusive (reason `power`, `budget` or `deadline` where the
 *   prober's own limits cut it short).
 */
import { openerPrompt, overlimitPrompt, promptRef, readerPrompt, repetitionsFor, tokensFor, type TokenLine } from '../prompts.js';
import type { Power, ScenarioResult } from '../result.js';
import { CONCURRENT_INTERLEAVE_MEASURED_FAULTS, CONCURRENT_INTERLEAVE_WINDOWS, concurrentInterleavePower } from './race-power.js';
import { tokenLine } from './calibration.js';
import type { ScenarioContext, Tenant } from './context.js';
import { exchange, type Exchange } from './exchange.js';
import { initialSizing, plant } from './planting.js';
import { ResultBuilder } from './result-builder.js';
import { judgeRejection } from './rejection-verdict.js';
import { tenantPair } from './tenant-pair.js';
import { clamp } from './clamp.js';

export const CONCURRENT_INTERLEAVE = 'concurrent-interleave';

type Role = 'planter' | 'reader' | 'overlimit';

interface Slot {
  tenant: Tenant;
  role: Role;
}

const MAX_OVERLIMIT_PER_WAVE = 1;

export async function concurrentInterleave(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(CONCURRENT_INTERLEAVE, ctx);
  const { contextTokens, poolTokens, reachable } = ctx.introspection;
  if (!reachable) {
    out.note('endpoint unreachable');
    out.reason = 'unreachable';
    return out.finish('inconclusive');
  }
  const pair = tenantPair(ctx);
  out.note(pair.note);
  const waves = ctx.tuning.interleaveWaves ?? [2, 4, 8];
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const bound = Math.min(poolTokens ?? Infinity, contextTokens ?? Infinity);
  const widest = Math.max(1, ...waves);
  // A third of the widest wave plants at once: together about half the pool, each well within the context.
  const planterTokens = ctx.tuning.planterTokens ?? (Number.isFinite(bound) ? clamp(Math.floor((bound * 1.5) / widest), 128, 4096) : 1024);
  const readerTokens = Number.isFinite(bound) ? clamp(Math.floor(bound / widest) - maxTokens - 64, 64, 4096) : 512;

  // Over-limit prompts: beyond the advertised context by 2% (at least 16 tokens), as overlimit-handoff sizes them.
  let line: TokenLine | undefined;
  let overTokens: number | undefined;
  if (contextTokens !== undefined) {
    line = await tokenLine(ctx, (ex) => out.add(ex));
    overTokens = contextTokens + Math.max(16, Math.ceil(contextTokens * 0.02));
    out.note(line === undefined ? 'could not calibrate prompt sizes: no over-limit prompts this cycle' : `calibrated via ${line.via}: over-limit prompts of about ${overTokens} tokens`);
  } else {
    out.note('no context limit advertised: no over-limit prompts this cycle');
  }
  const overReps = line === undefined || overTokens === undefined ? undefined : repetitionsFor(line, overTokens);
  const readerReps = line === undefined ? 1 : Math.max(1, repetitionsFor(line, readerTokens));
  // Every reader is new (promptRef: this run's reference and the reader's number), so no cache holds its twin;
  // half open like a planter does and part from it where a planter's markers begin.
  const ref = (n: number): string => promptRef(ctx.runId, n);
  const readers = [
    (n: number) => ({ prompt: `Ledger ${ref(n)}. ${readerPrompt(readerReps)}`, tokens: (line === undefined ? 96 : tokensFor(line, readerReps)) + 8 }),
    (n: number) => {
      const opener = openerPrompt(ref(n)); // carries no marker
      return { prompt: opener, tokens: opener.length }; // no tokenizer spends more than a token per character
    },
  ];

  const roles: Role[] = overReps === undefined ? ['planter', 'reader'] : ['planter', 'reader', 'overlimit'];
  const combos = slotOrder([pair.a, pair.b], roles);
  const sizing = initialSizing();
  const tally = { sent: 0, answered: 0, plantersOk: 0, readersOk: 0, rejected: 0, undecided: 0 };
  let k = 0;
  let readerTurn = 0;

  const runSlot = async (slot: Slot): Promise<boolean> => {
    let ex: Exchange | undefined;
    if (slot.role === 'planter') {
      ex = (await plant(ctx, sizing, { tokens: planterTokens, tenant: slot.tenant, maxTokens, stream: true })).ex;
    } else if (slot.role === 'reader') {
      const r = readers[readerTurn % readers.length]!(readerTurn++);
      ex = await exchange(ctx, { role: 'reader', tenant: slot.tenant, prompt: r.prompt, promptTokens: r.tokens, maxTokens, stream: true });
    } else {
      ex = await exchange(ctx, { role: 'overlimit', tenant: slot.tenant, prompt: overlimitPrompt(overReps!, promptRef(ctx.runId)), promptTokens: tokensFor(line!, overReps!), maxTokens, stream: true });
    }
    if (out.add(ex) === undefined) return false;
    tally.sent++;
    if (slot.role === 'overlimit') {
      const v = judgeRejection(CONCURRENT_INTERLEAVE, 'beyond-context under concurrency', true, ex!, { contextTokens: contextTokens! });
      if (v.finding !== undefined) out.findings.push(v.finding);
      if (v.state === 'undecided') tally.undecided++;
      else tally.answered++;
      if (v.state === 'rejected') tally.rejected++;
      return false;
    }
    if (ex!.result.transport !== 'ok') return false;
    tally.answered++;
    if (slot.role === 'planter') tally.plantersOk++;
    else tally.readersOk++;
    return true;
  };

  // Windows: waves in which a planter of one tenant and a reader of the other were answered together. The
  // configured widths are one pass; passes repeat (over-limit prompts only in the first: each costs a whole
  // context of upload) until the stated power is reached.
  const wanted = CONCURRENT_INTERLEAVE_WINDOWS;
  const maxWaves = Math.max(waves.length, wanted * 2 + 4);
  const plainCombos = slotOrder([pair.a, pair.b], ['planter', 'reader']);
  let windows = 0;
  let waveCount = 0;
  let cut: 'budget' | 'deadline' | undefined;
  for (let pass = 0; waves.length > 0 && windows < wanted && waveCount < maxWaves && cut === undefined && out.findings.length === 0; pass++) {
    const order = pass === 0 ? combos : plainCombos;
    if (pass === 1) k = 0;
    for (const width of waves) {
      if (ctx.signal.aborted) {
        cut = 'deadline';
        break;
      }
      if (waveCount >= maxWaves || (pass > 0 && windows >= wanted)) break;
      waveCount++;
      const slots: Slot[] = [];
      let overlimits = 0;
      while (slots.length < width) {
        const combo = order[k++ % order.length]!;
        if (combo.role === 'overlimit' && overlimits >= MAX_OVERLIMIT_PER_WAVE) {
          slots.push({ tenant: combo.tenant, role: 'reader' });
          continue;
        }
        if (combo.role === 'overlimit') overlimits++;
        slots.push(combo);
      }
      const before = tally.answered;
      const sentBefore = tally.sent;
      const through: Slot[] = [];
      await Promise.all(slots.map(async (slot) => ((await runSlot(slot)) ? through.push(slot) : undefined)));
      if (tally.sent - sentBefore < width && !ctx.signal.aborted) cut = 'budget';
      if (through.some((p) => p.role === 'planter' && through.some((r) => r.role === 'reader' && r.tenant !== p.tenant))) windows++;
      if (pass === 0) out.note(`wave of ${width}: ${tally.answered - before}/${width} answered (${slots.map((s) => `${s.tenant.name}:${s.role}`).join(', ')})`);
      if (cut !== undefined) break;
    }
  }
  out.power = concurrentInterleavePower(windows);
  out.note(`${windows} window(s) in ${waveCount} wave(s)`);
  out.note(powerNote(out.power, windows));

  out.note(`${tally.answered}/${tally.sent} answered: ${tally.plantersOk} planter(s), ${tally.readersOk} reader(s) through, ${tally.rejected} over-limit rejected`);
  if (out.findings.length > 0) return out.finish('inconclusive'); // fail: the findings decide
  if (cut !== undefined) {
    out.note(cut === 'budget' ? "cut short by the token budget: isolation not established (not the endpoint's fault)" : 'cut short by the cycle deadline');
    out.reason = cut;
    return out.finish('inconclusive');
  }
  if (tally.sent === 0) {
    out.note('nothing was sent');
    return out.finish('inconclusive');
  }
  if (tally.answered * 2 <= tally.sent) {
    out.note('too few requests answered to establish isolation');
    return out.finish('inconclusive');
  }
  if (tally.plantersOk === 0 || tally.readersOk === 0) {
    out.note(tally.plantersOk === 0 ? 'no planter was accepted: nothing to leak' : 'no reader was answered');
    return out.finish('inconclusive');
  }
  if (out.power.basis !== 'measured') {
    out.note(`fewer than the ${wanted} windows a pass needs (the workload whose power was measured)`);
    out.reason = 'power';
    return out.finish('inconclusive');
  }
  return out.finish('pass');
}

/** What the power statement says, by its basis (race-power.ts). */
function powerNote(power: Power, windows: number): string {
  const rate = `≥${power.detectableRate * 100}% of its eligible events`;
  return power.basis === 'measured'
    ? `power (measured on the bundled engine's ${CONCURRENT_INTERLEAVE_MEASURED_FAULTS.join(' and ')}, bench/race-calibration-interleave.json): such a race fault firing on ${rate} was caught in ≥${power.confidence} of runs of this workload (the Wilson 95% lower bound of the weakest measured configuration)`
    : `power (scaled from the measured workload of ${CONCURRENT_INTERLEAVE_WINDOWS} windows, not measured at ${windows}): ${rate}, probability ${power.confidence}`;
}

/**
 * Every (tenant, role) combination once, ordered so that neighbours have different tenants where the
 * number of roles is odd, and different tenants or roles otherwise: (p,A) (r,B) (o,A) (p,B) (r,A) (o,B).
 */
export function slotOrder(tenants: readonly [Tenant, Tenant], roles: readonly Role[]): Slot[] {
  const n = roles.length;
  return Array.from({ length: 2 * n }, (_, i) => ({
    role: roles[i % n]!,
    tenant: tenants[(n % 2 === 1 ? i : i + Math.floor(i / n)) % 2]!,
  }));
}
