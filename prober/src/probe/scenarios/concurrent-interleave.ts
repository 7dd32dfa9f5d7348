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
 *   only when that limit is known) go in at most one per wave, in the first pass only: on a real endpoint
 *   each costs a whole context of upload. A 2xx with generated text, or a 2xx with no error, is
 *   `rejection-not-enforced`.
 * - Every response of every role is scanned; a foreign marker is `cross-request-leak`, and its evidence
 *   names the planting and the reading tenant.
 * - The pool is cycled, whatever its size and free-list order (interleave-sizing.ts). A restore race shows
 *   only once a page under a reader's cache entry is handed to a planter before the next reader with that
 *   prefix; on an idle pool with a FIFO free list that never happens (measured: 0 of 30 runs at 1/32 scale
 *   before this). So where the endpoint exposes its pools, ballast (ballast.ts, as abort-race holds it: long
 *   generations of filler, each piece with its own reference so a prefix cache cannot share them) holds all but
 *   room for one planter beside one reader and a 2% sliver of the pool where requests reserve pages, from
 *   the first pass without over-limit prompts (an endpoint that admits one must have room to serve it: that
 *   is the finding) until the scenario ends. Readers are then a quarter of a planter, and each tenant's long
 *   readers rotate through a few openings of the run's own, so that between two restores of one entry the planters have
 *   allocated the whole sliver. Wider waves queue for that room at the endpoint; the prober still sends each
 *   wave at once. Where no pool is exposed (or `interleave_ballast: false`) the waves are sized as they
 *   were measured before ballast, every reader new, the notes say so, and a pass states no race power
 *   (race-power.ts).
 * - Power is measured, not derived (race-power.ts): one window is one wave in which a planter of one tenant
 *   and a reader of the other were both answered while in flight together. The configured widths are one
 *   pass; passes repeat until the workload `npm run bench:race-calibration -- --scenario
 *   concurrent-interleave` measured is reached (CONCURRENT_INTERLEAVE_WINDOWS windows), stopping at the
 *   first finding. A pass states that measurement: the bundled engine's prompt-cache-restore-race firing on
 *   a fraction of its eligible events was caught in at least the stated share of first-contact runs (Wilson
 *   95% lower bound); a run cut short states it scaled down (`basis: 'scaled'`).
 * - Pass needs most requests answered (a clean rejection is an answer), at least one planter and one reader
 *   through, and the stated power; otherwise inconclusive (reason `power`, `budget` or `deadline` where the
 *   prober's own limits cut it short).
 *
 * Cost (cost.ts prices it from the same sizes): the ballast is about half the reservation pool as prompt,
 * prefilled once a run and held (about 0.52 M tokens at a 1,064,960-token pool), on top of the planters
 * and readers.
 */
import { openerPrompt, overlimitPrompt, promptRef, readerPrompt, repetitionsFor, tokensFor, type PromptSource, type TokenLine } from '../prompts.js';
import type { Power, ScenarioResult } from '../result.js';
import { CONCURRENT_INTERLEAVE_MEASURED_FAULTS, CONCURRENT_INTERLEAVE_WINDOWS, concurrentInterleavePower } from './race-power.js';
import { holdBallast, type Ballast } from './ballast.js';
import { tokenLine } from './calibration.js';
import type { ScenarioContext, Tenant } from './context.js';
import { decoded, exchange, type Exchange } from './exchange.js';
import { DEFAULT_INTERLEAVE_WAVES, interleaveSizes, type InterleaveSizes } from './interleave-sizing.js';
import { initialSizing, plant, type PlanterSizing } from './planting.js';
import { ResultBuilder } from './result-builder.js';
import { judgeRejection } from './rejection-verdict.js';
import { tenantPair } from './tenant-pair.js';

export const CONCURRENT_INTERLEAVE = 'concurrent-interleave';

type Role = 'planter' | 'reader' | 'overlimit';

interface Slot {
  tenant: Tenant;
  role: Role;
}

const MAX_OVERLIMIT_PER_WAVE = 1;

interface Tally {
  sent: number;
  answered: number;
  plantersOk: number;
  readersOk: number;
  rejected: number;
  undecided: number;
}

interface ReaderSpec {
  prompt: string;
  tokens: number;
}

/** What the waves send: sizes, the over-limit prompt (when the context is known and calibrated), the readers. */
interface Workload {
  sizes: InterleaveSizes;
  maxTokens: number;
  line: TokenLine | undefined;
  /** The long reader's estimated prompt tokens. */
  readerTokens: number;
  over: { prompt: PromptSource; tokens: number } | undefined;
  /** The reader a slot of `tenant` sends next. */
  nextReader: (tenant: Tenant) => ReaderSpec;
}

export async function concurrentInterleave(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(CONCURRENT_INTERLEAVE, ctx);
  if (!ctx.introspection.reachable) {
    out.note('endpoint unreachable');
    out.reason = 'unreachable';
    return out.finish('inconclusive');
  }
  const pair = tenantPair(ctx);
  out.note(pair.note);
  const waves = ctx.tuning.interleaveWaves ?? [...DEFAULT_INTERLEAVE_WAVES];
  const work = await prepareWorkload(ctx, out);
  const ballast = startBallast(ctx, out, work);
  let run: WaveRun;
  try {
    run = await runWaves(ctx, out, work, [pair.a, pair.b], waves, ballast);
  } finally {
    await ballast?.release();
  }
  out.power = concurrentInterleavePower(run.windows, run.held);
  for (const [other, times] of ballast?.borrowed ?? []) out.note(`${other}'s ballast held the pool at ${times} wave(s): this scenario's was not started beside it (one ballast an endpoint at a time)`);
  if (ballast !== undefined && !run.held) out.note(`${run.unheld} wave(s) after the first pass ran with no ballast holding the pool`);
  out.note(`${run.windows} window(s) in ${run.waves} wave(s)`);
  out.note(powerNote(out.power, run.windows, run.held));
  return verdict(out, run);
}

/** Sizes, the calibrated over-limit prompt and the readers (interleave-sizing.ts). */
async function prepareWorkload(ctx: ScenarioContext, out: ResultBuilder): Promise<Workload> {
  const { contextTokens } = ctx.introspection;
  const sizes = interleaveSizes(ctx.introspection, ctx.tuning);
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  // The token line sizes over-limit prompts (beyond the advertised context by 2%, at least 16 tokens, as
  // overlimit-handoff sizes them) and the ballast.
  const line = contextTokens !== undefined || sizes.ballastTokens > 0 ? await tokenLine(ctx, (ex) => out.add(ex)) : undefined;
  let over: Workload['over'];
  if (contextTokens !== undefined) {
    const overTokens = contextTokens + Math.max(16, Math.ceil(contextTokens * 0.02));
    const reps = line === undefined ? undefined : repetitionsFor(line, overTokens);
    if (reps !== undefined) over = { prompt: overlimitPrompt(reps, promptRef(ctx.runId)), tokens: tokensFor(line!, reps) };
    out.note(line === undefined ? 'could not calibrate prompt sizes: no over-limit prompts this cycle' : `calibrated via ${line.via}: over-limit prompts of about ${overTokens} tokens`);
  } else {
    out.note('no context limit advertised: no over-limit prompts this cycle');
  }
  const readerReps = line === undefined ? 1 : Math.max(1, repetitionsFor(line, sizes.readerTokens));
  const longTokens = (line === undefined ? 96 : tokensFor(line, readerReps)) + 8;
  return { sizes, maxTokens, line, readerTokens: longTokens, over, nextReader: readerRotation(ctx.runId, readerPrompt(readerReps), longTokens, sizes.readerVariants) };
}

/**
 * Readers alternate between a long reader and an opener: one that opens exactly as a planter does and parts
 * from it where a planter's markers begin (openerPrompt). Every prompt carries this run's reference
 * (promptRef), so no cache holds a twin from an earlier run. Without ballast (one variant) every reader is
 * new, its number in the reference, and the turn is shared by both tenants. With ballast each tenant keeps its
 * own turn and its long readers rotate through `variants` openings ("Ledger <ref>-1.", "Ledger <ref>-2.", …),
 * each coming back within the run: a restore race needs a reader whose prefix a cache entry still holds, and
 * a reader that restores its own opening's entry re-takes its pages (on a FIFO free list, moving them to the
 * back), so the same opening comes back only after planters have allocated the whole free sliver
 * (interleave-sizing.ts). Openers are always new.
 */
function readerRotation(runId: string, long: string, longTokens: number, variants: number): (tenant: Tenant) => ReaderSpec {
  let n = 0;
  const opener = (): ReaderSpec => {
    const prompt = openerPrompt(promptRef(runId, ++n)); // carries no marker
    return { prompt, tokens: prompt.length }; // no tokenizer spends more than a token per character
  };
  const ledger = (k: number): ReaderSpec => ({ prompt: `Ledger ${promptRef(runId, k)}. ${long}`, tokens: longTokens });
  if (variants <= 1) {
    let turn = 0;
    return () => (turn++ % 2 === 0 ? ledger(++n) : opener());
  }
  const turns = new Map<string, number>();
  return (tenant) => {
    const turn = turns.get(tenant.name) ?? 0;
    turns.set(tenant.name, turn + 1);
    return turn % 2 === 1 ? opener() : ledger(Math.floor(turn / 2) % variants + 1);
  };
}

/** Ballast over the exposed pool, or undefined (noted either way). */
function startBallast(ctx: ScenarioContext, out: ResultBuilder, work: Workload): Ballast | undefined {
  const { sizes, line } = work;
  const { contextTokens } = ctx.introspection;
  const reader = `readers of ~${work.readerTokens} tokens`;
  if (sizes.ballastTokens <= 0 || line === undefined) {
    const why = sizes.reservationPoolTokens === undefined
      ? 'pool not exposed'
      : ctx.tuning.interleaveBallast === false
        ? 'interleave_ballast: false'
        : line === undefined
          ? 'prompt sizes not calibrated'
          : 'pool too small for it';
    out.note(`planters of ~${sizes.planterTokens} tokens, ${reader}; no ballast (${why}): freed pages are reused only as the free list's order allows`);
    return undefined;
  }
  const bound = Math.min(ctx.introspection.poolTokens ?? Infinity, contextTokens ?? Infinity);
  const admit = Math.min(bound, ctx.introspection.maxInputTokens ?? Infinity);
  const ballast = holdBallast(ctx, {
    tokens: sizes.ballastTokens, admitTokens: admit, contextTokens: contextTokens ?? admit, line, record: (ex) => out.add(ex), distinct: true, scenario: CONCURRENT_INTERLEAVE,
    ...(ctx.tuning.ballastHold !== undefined ? { hold: ctx.tuning.ballastHold } : {}),
  });
  out.note(
    `planters of ~${sizes.planterTokens} tokens, ${reader} (${sizes.readerVariants} openings a tenant); ballast ~${sizes.ballastTokens} tokens in ${ballast.pieces} request(s) ` +
      `over the reservation pool of ${sizes.reservationPoolTokens}, leaving ~${sizes.freeTokens} free, from the first wave without over-limit prompts`,
  );
  return ballast.pieces > 0 ? ballast : undefined;
}

interface WaveRun {
  tally: Tally;
  windows: number;
  waves: number;
  /** Ballast (this scenario's or another's) held the pool over every wave after the first pass with over-limit prompts. */
  held: boolean;
  /** Waves meant to run under ballast that ran with none holding the pool. */
  unheld: number;
  cut: 'budget' | 'deadline' | undefined;
}

/**
 * Windows: waves in which a planter of one tenant and a reader of the other were answered together. The
 * configured widths are one pass; passes repeat (over-limit prompts only in the first: each costs a whole
 * context of upload) until the measured workload's windows, stopping at the first finding. Ballast is held
 * from the first pass without over-limit prompts: an endpoint that admits an over-limit prompt must have room
 * to serve it (that is the finding).
 */
async function runWaves(ctx: ScenarioContext, out: ResultBuilder, work: Workload, tenants: readonly [Tenant, Tenant], waves: readonly number[], ballast: Ballast | undefined): Promise<WaveRun> {
  const roles: Role[] = work.over === undefined ? ['planter', 'reader'] : ['planter', 'reader', 'overlimit'];
  const combos = slotOrder(tenants, roles);
  const plainCombos = slotOrder(tenants, ['planter', 'reader']);
  const ballastFrom = work.over === undefined ? 0 : 1;
  const send = slotSender(ctx, out, work);
  const wanted = CONCURRENT_INTERLEAVE_WINDOWS;
  const maxWaves = Math.max(waves.length, wanted * 2 + 4);
  const run: WaveRun = { tally: send.tally, windows: 0, waves: 0, held: ballast !== undefined && waves.length * ballastFrom < wanted, unheld: 0, cut: undefined };
  let k = 0;
  for (let pass = 0; waves.length > 0 && run.windows < wanted && run.waves < maxWaves && run.cut === undefined && out.findings.length === 0; pass++) {
    const order = pass === 0 ? combos : plainCombos;
    if (pass === 1) k = 0;
    for (const width of waves) {
      if (ctx.signal.aborted) {
        run.cut = 'deadline';
        break;
      }
      if (run.waves >= maxWaves || (pass > 0 && run.windows >= wanted)) break;
      if (ballast !== undefined && pass >= ballastFrom && (await ballast.ensure()) === 'none') {
        run.held = false;
        run.unheld++;
      }
      run.waves++;
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
      const before = run.tally.answered;
      const sentBefore = run.tally.sent;
      const through: Slot[] = [];
      await Promise.all(slots.map(async (slot) => ((await send.slot(slot)) ? through.push(slot) : undefined)));
      if (run.tally.sent - sentBefore < width && !ctx.signal.aborted) run.cut = 'budget';
      if (through.some((p) => p.role === 'planter' && through.some((r) => r.role === 'reader' && r.tenant !== p.tenant))) run.windows++;
      if (pass === 0) out.note(`wave of ${width}: ${run.tally.answered - before}/${width} answered (${slots.map((s) => `${s.tenant.name}:${s.role}`).join(', ')})`);
      if (run.cut !== undefined) break;
    }
  }
  return run;
}

/** Sends one slot's request and judges it; true when a planter or reader was answered. */
function slotSender(ctx: ScenarioContext, out: ResultBuilder, work: Workload): { tally: Tally; slot: (slot: Slot) => Promise<boolean> } {
  const tally: Tally = { sent: 0, answered: 0, plantersOk: 0, readersOk: 0, rejected: 0, undecided: 0 };
  const sizing: PlanterSizing = initialSizing();
  const { maxTokens } = work;
  const slot = async (slot: Slot): Promise<boolean> => {
    let ex: Exchange | undefined;
    if (slot.role === 'planter') {
      ex = (await plant(ctx, sizing, { tokens: work.sizes.planterTokens, tenant: slot.tenant, maxTokens, stream: true })).ex;
    } else if (slot.role === 'reader') {
      const r = work.nextReader(slot.tenant);
      ex = await exchange(ctx, { role: 'reader', tenant: slot.tenant, prompt: r.prompt, promptTokens: r.tokens, maxTokens, stream: true });
    } else {
      ex = await exchange(ctx, { role: 'overlimit', tenant: slot.tenant, prompt: work.over!.prompt, promptTokens: work.over!.tokens, maxTokens, stream: true });
    }
    if (out.add(ex) === undefined) return false;
    tally.sent++;
    if (slot.role === 'overlimit') {
      const v = judgeRejection(CONCURRENT_INTERLEAVE, 'beyond-context under concurrency', true, ex!, { contextTokens: ctx.introspection.contextTokens! });
      if (v.finding !== undefined) out.findings.push(v.finding);
      if (v.state === 'undecided') tally.undecided++;
      else tally.answered++;
      if (v.state === 'rejected') tally.rejected++;
      return false;
    }
    if (!decoded(ex!, ctx.registry.fragmentLength)) return false;
    tally.answered++;
    if (slot.role === 'planter') tally.plantersOk++;
    else tally.readersOk++;
    return true;
  };
  return { tally, slot };
}

/** The outcome from what the waves showed. */
function verdict(out: ResultBuilder, run: WaveRun): ScenarioResult {
  const { tally, cut } = run;
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
  if (out.power!.basis !== 'measured') {
    out.note(`fewer than the ${CONCURRENT_INTERLEAVE_WINDOWS} windows a pass needs (the workload whose power was measured)`);
    out.reason = 'power';
    return out.finish('inconclusive');
  }
  return out.finish('pass');
}

/** What the power statement says, by its basis (race-power.ts). */
function powerNote(power: Power, windows: number, held: boolean): string {
  const rate = `≥${power.detectableRate * 100}% of its eligible events`;
  if (!held) {
    return `power: none stated without ballast (measured on the bundled engine's ${CONCURRENT_INTERLEAVE_MEASURED_FAULTS.join(' and ')}: this workload without ballast caught it in 0 of 30 runs on a FIFO free list at 1/32 scale, docs/measured.md)`;
  }
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
