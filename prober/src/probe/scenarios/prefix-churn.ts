/**
 * prefix-churn: does a prefix-cache entry outlive its KV pages? (llama.cpp #27148: a slot's prompt-cache
 * entry restored into a fresh sequence while the slot's cells were already reused by another conversation.)
 * A cached prefix whose pages are handed to another request must stop being a hit; an entry that survives
 * serves the next request with the same prefix another request's KV.
 *
 * Design — one round, `churnRounds` (default 2) per cycle:
 * - warm:    tenant A sends P: a fresh marker registered to this request (so no earlier prompt can share
 *            P's first page, and nothing else can hit P), filler to about `prefixTokens` (default 512, well
 *            above page sizes of 16-256), and the marker cue. max_tokens is small.
 * - control: A sends the same P again and must be served from the cache: cached tokens above the warm
 *            request's. Without that, caching is off or unobservable and a clean re-read proves nothing
 *            (vLLM PR #53347's reasoning, as in prefix-isolation).
 * - churn:   tenant B plants marker-dense prompts totalling the largest exposed KV pool plus a margin (or
 *            `plantTokens`), each at most 90% of what one request may hold, several in flight together.
 *            Free lists hand out the least recently released page first (vLLM's free block queue, SGLang's
 *            allocator, the bundled engine's fifo) and P's pages were released last, so only churn covering
 *            the whole pool is sure to reach them. Planter sizes start pessimistic; when usage shows the
 *            churn fell short, more planters go out (a few waves at most), smaller after a rejection.
 * - re-read: A sends P once more, now with `readerMaxTokens` (default 48). A correct cache has dropped P's
 *            entries with their pages (cached tokens fall below the control's: the churn evidently reached
 *            them); a stale entry restores pages that now hold B's markers, and the cue invites a copy.
 * The three sends of a round are the same prompt, so the control's and the re-read's cached tokens compare
 * directly. P's marker in a response of A's is self-echo (A sent it); any other foreign marker in any
 * response is `cross-request-leak`. B adds no power as a reader: the stale entry is keyed by A's prefix
 * (and salt); B serves as the other conversation whose pages A's entry outlives.
 *
 * llama.cpp (its /slots listed): the cache is per slot, so every send of a round, the churn included, is
 * pinned to one slot (`id_slot`) and the churn covers that slot's n_ctx cells. llama.cpp copies a slot's
 * prompt to its host prompt cache (`--cache-ram`) when another request takes the slot, and restores it on a
 * later hit: P then stays cached after churn that certainly took its cells. That restore is judged by its
 * result: greedy decoding (temperature 0) over P's own KV continues exactly as the warm send's fresh
 * computation did (the control, a cache hit before the churn, shows the endpoint is deterministic across a
 * hit); a restore of cells another request wrote would not. An identical continuation counts as exercised.
 *
 * Outcome: fail on any finding; not-applicable when exact re-sends (warm → control) show no reuse at all
 * (prefix-reuse.ts; or the cycle's prefix-isolation found none); pass when a round was exercised end to end
 * — the control showed reuse, the re-read was answered and showed P evicted (or, on llama.cpp, restored
 * intact) — and no round kept P cached through churn that covered the known pool (an entry that survived
 * its pages without the text showing, or a tier beyond the exposed pool: either way not established).
 * Otherwise inconclusive with the reasons; never a throw. Requests the endpoint fails are never answers:
 * up to MAX_ROUNDS rounds are played while none was exercised end to end.
 */
import { readerPrompt, repetitionsFor, tokensFor, type TokenLine } from '../prompts.js';
import type { ScenarioResult } from '../result.js';
import { tokenLine } from './calibration.js';
import type { ScenarioContext, Tenant } from './context.js';
import { exchange, sentBySelf, type Exchange } from './exchange.js';
import { initialSizing, plant, type PlanterSizing } from './planting.js';
import { cycleReuse, notApplicableNote, recordReuse, reuseByCachedTokens } from './prefix-reuse.js';
import { measureReuse } from './reuse-probe.js';
import { ResultBuilder } from './result-builder.js';
import { tenantPair, type TenantPair } from './tenant-pair.js';

export const PREFIX_CHURN = 'prefix-churn';

const DEFAULT_ROUNDS = 2;
/** Generated tokens of the warm and control sends and of planters: their output is not the point. */
const SHORT_MAX_TOKENS = 8;
/** Room for a chat template around P. */
const TEMPLATE_ALLOWANCE_TOKENS = 64;
/** Tokens per filler paragraph assumed when nothing measured them (about 4 characters per token). */
const ASSUMED_TOKENS_PER_REPETITION = 108;
/** Churn beyond the pool: page rounding, the template, pages other traffic releases meanwhile. */
const CHURN_MARGIN = 0.05;
/** Share of the churn target a wave may fall short by without another wave (less than the margin). */
const CHURN_TOLERANCE = 0.01;
/** One planter holds at most this share of what a request may hold (context, max input, pool). */
const PIECE_SHARE = 0.9;
const MAX_CHURN_WAVES = 4;
const MAX_PLANTERS_IN_FLIGHT = 8;
const MIN_PIECE_TOKENS = 64;

interface ChurnTally {
  target: number;
  /** Prompt tokens the planters carried (usage where reported, else the estimate). */
  sent: number;
  planters: number;
  ok: number;
  /** Some planter's prompt tokens came from the estimate (usage not reported). */
  estimated: boolean;
}

interface Round {
  warm?: Exchange;
  control?: Exchange;
  churn?: ChurnTally;
  reread?: Exchange;
  /** llama.cpp: the slot every send of the round was pinned to (`id_slot`). */
  slot?: number;
  /** llama.cpp: prompt tokens the pinned slot held after the churn (/slots), when read. */
  slotHeldAfterChurn?: number;
  /** The first generated characters of warm, control and re-read (greedy decoding; compared, never stored). */
  text: { warm: string; control: string; reread: string };
}

/** Generated characters kept per send for the continuation comparison. */
const TEXT_KEEP_CHARS = 400;
/** Rounds played at most while none was exercised end to end (requests the endpoint failed). */
const MAX_ROUNDS = 4;
/** Pauses before re-sending a control that showed no reuse (a tier that writes back after the request ended). */
export const TIER_SETTLE_MS = [50, 250, 1000] as const;

export async function prefixChurn(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(PREFIX_CHURN, ctx);
  const { contextTokens, maxInputTokens, reachable } = ctx.introspection;
  if (!reachable) {
    out.note('endpoint unreachable');
    return out.finish('inconclusive');
  }
  const pair = tenantPair(ctx);
  out.note(`${pair.note}; ${pair.a.name} caches and re-reads a prefix, ${pair.b.name} churns the pool`);
  const rounds = ctx.tuning.churnRounds ?? DEFAULT_ROUNDS;
  const readerMaxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const requestCap = Math.min(contextTokens ?? Infinity, maxInputTokens ?? Infinity);

  // --- P's size: filler paragraphs to about prefixTokens, within the context limit.
  const line = await tokenLine(ctx, (ex) => out.add(ex));
  const prefix = prefixRepetitions(line, ctx.tuning.prefixTokens ?? 512, requestCap, readerMaxTokens);
  out.note(prefix.note);
  if (prefix.reps === undefined) return out.finish('inconclusive');

  // --- Churn: the largest exposed pool (where a prefix cache keeps its pages), plus a margin. llama.cpp keeps
  // its cache per slot: every send of a round is pinned to one slot (`id_slot`), and the churn must cover
  // that slot's cells (its n_ctx) — churn sent to another slot never reaches P.
  const slots = ctx.introspection.slots;
  const pool = slots !== undefined && ctx.introspection.poolTokens === undefined ? Math.min(...slots.nCtx) : (ctx.introspection.largestPoolTokens ?? ctx.introspection.poolTokens);
  if (slots !== undefined) out.note(`llama.cpp slots: each round pins its sends and its churn to one of ${slots.total} slot(s) (id_slot), whose ${pool} cells the churn covers`);
  const perRequest = Math.min(requestCap, pool ?? Infinity);
  const pieceCap = Number.isFinite(perRequest) ? Math.floor(perRequest * PIECE_SHARE) - SHORT_MAX_TOKENS : undefined;
  const pieceTokens = Math.min(ctx.tuning.planterTokens ?? pieceCap ?? 2048, pieceCap ?? Infinity);
  const churnTarget = ctx.tuning.plantTokens ?? (pool !== undefined ? Math.ceil(pool * (1 + CHURN_MARGIN)) : Number.isFinite(requestCap) ? requestCap : pieceTokens * 4);
  out.note(
    pool !== undefined
      ? `${poolLabel(ctx.introspection, slots !== undefined && ctx.introspection.poolTokens === undefined)} ${pool} tokens${ctx.introspection.pageSize !== undefined ? ` (pages of ${ctx.introspection.pageSize})` : ''}: churn of ${churnTarget} tokens per round in planters of at most ${pieceTokens}`
      : `KV pool not exposed: churn of ${churnTarget} tokens per round (${ctx.tuning.plantTokens !== undefined ? 'plantTokens' : Number.isFinite(requestCap) ? 'the context limit' : 'four planters'}), which may not reach P's pages; only the re-read's cached tokens can show it did`,
  );
  if (pieceTokens < MIN_PIECE_TOKENS) {
    out.note(`a planter may hold at most ${pieceTokens} tokens: too little to churn the pool`);
    return out.finish('inconclusive');
  }

  const sender = new PrefixSender(ctx, out);
  const sizing = initialSizing();
  const done: Round[] = [];
  let stopped = false;
  // Exercised end to end: P re-sent, the churn carried its whole target, P re-read. A round whose planters
  // failed (a transient 5xx, a server that cannot fit them just then) leaves another round to be played.
  const complete = (r: Round): boolean => r.control?.result.transport === 'ok' && r.reread?.result.transport === 'ok' && r.churn !== undefined && !churnShort(r.churn, pool);
  for (let i = 0; (i < rounds || (i < Math.max(rounds, MAX_ROUNDS) && !done.some(complete))) && !(stopped = ctx.signal.aborted); i++) {
    const round: Round = { text: { warm: '', control: '', reread: '' } };
    done.push(round);
    const slot = slots !== undefined ? i % slots.total : undefined;
    const a = slot === undefined ? pair.a : pinned(pair.a, slot);
    const b = slot === undefined ? pair.b : pinned(pair.b, slot);
    if (slot !== undefined) round.slot = slot;
    const keep = (k: keyof Round['text']) => (chunk: string) => {
      if (round.text[k].length < TEXT_KEEP_CHARS) round.text[k] = (round.text[k] + chunk).slice(0, TEXT_KEEP_CHARS);
    };
    const marker = ctx.registry.plant({ runId: ctx.runId, requestId: ctx.newRequestId('churn-warm'), role: 'churn-warm', tenant: pair.a.name });
    ctx.onMarkers([marker]);
    const prompt = `${marker.marker}\n${readerPrompt(prefix.reps)}`;
    const own = [marker.marker];
    round.warm = await sender.send(a, 'churn-warm', prompt, own, SHORT_MAX_TOKENS, marker.requestId, keep('warm'));
    if ((stopped = round.warm === undefined)) break;
    if (round.warm.result.transport !== 'ok') continue; // not answered: this round proves nothing, try another
    round.control = await sender.send(a, 'churn-control', prompt, own, SHORT_MAX_TOKENS, undefined, keep('control'));
    if ((stopped = round.control === undefined)) break;
    // A tier that stores a prefix only after the request ended (a host tier's write-back) serves it a moment
    // later: while the re-send shows no reuse, it is sent again after a pause (TIER_SETTLE_MS).
    for (const pause of TIER_SETTLE_MS) {
      const [w, c] = [round.warm.result.usage?.cachedTokens, round.control?.result.usage?.cachedTokens];
      if (round.control?.result.transport !== 'ok' || w === undefined || c === undefined || c > w || ctx.signal.aborted) break;
      await new Promise((r) => setTimeout(r, pause));
      round.text.control = '';
      const again = await sender.send(a, 'churn-control', prompt, own, SHORT_MAX_TOKENS, undefined, keep('control'));
      if (again === undefined) break;
      round.control = again;
    }
    round.churn = await churn(ctx, out, sizing, b, churnTarget, pieceTokens);
    if ((stopped = round.churn.planters === 0)) break; // nothing churned: a re-read would show nothing
    if (slot !== undefined) {
      const held = (await ctx.introspection.readSlots?.())?.find((st) => st.id === slot)?.nPromptTokens;
      if (held !== undefined) round.slotHeldAfterChurn = held;
    }
    round.reread = await sender.send(a, 'churn-reader', prompt, own, readerMaxTokens, undefined, keep('reread'));
    if ((stopped = round.reread === undefined)) break;
  }
  if (stopped) out.note(`stopped early, ${done.length} of ${rounds} round(s) begun (${ctx.signal.aborted ? 'cycle stopped' : 'token budget exhausted, or the first send of P was not answered'})`);
  return judge(ctx, out, done, pool, pair);
}

/** The same tenant, its requests pinned to one llama.cpp slot. */
function pinned(t: Tenant, slot: number): Tenant {
  return { ...t, extraBody: { ...t.extraBody, id_slot: slot } };
}

/** Sends P for tenant A; P's own marker in the response is self-echo (the request sent it), not a leak. */
class PrefixSender {
  #tokensPerChar = 1; // pessimistic until usage says otherwise: budgets must not be overspent

  constructor(
    private readonly ctx: ScenarioContext,
    private readonly out: ResultBuilder,
  ) {}

  async send(tenant: Tenant, role: string, prompt: string, own: readonly string[], maxTokens: number, requestId?: string, onText?: (chunk: string) => void): Promise<Exchange | undefined> {
    const ex = await exchange(this.ctx, {
      ...(onText !== undefined ? { onText } : {}),
      role,
      tenant,
      prompt,
      promptTokens: Math.ceil(prompt.length * this.#tokensPerChar),
      maxTokens,
      stream: true,
      ...(requestId !== undefined ? { requestId } : {}),
    });
    if (ex === undefined) return undefined;
    const usage = ex.result.usage;
    if (usage !== undefined && usage.promptTokens > 0) this.#tokensPerChar = Math.min(1, usage.promptTokens / prompt.length);
    const judged = sentBySelf(ex, own);
    this.out.add(judged);
    return judged;
  }
}

function prefixRepetitions(line: TokenLine | undefined, targetTokens: number, requestCap: number, maxTokens: number): { reps?: number; note: string } {
  const room = requestCap - maxTokens - TEMPLATE_ALLOWANCE_TOKENS;
  if (line !== undefined) {
    let reps = repetitionsFor(line, targetTokens);
    while (reps > 1 && tokensFor(line, reps) > room) reps--;
    if (tokensFor(line, reps) > room) return { note: `the context limit ${requestCap} leaves no room for a prefix several pages long` };
    return { reps, note: `prefix P of ${reps} filler paragraph(s), about ${tokensFor(line, reps)} tokens (calibrated via ${line.via})` };
  }
  // Unmeasured: aim by ~4 characters per token, cap pessimistically by one token per character.
  const chars = (reps: number): number => readerPrompt(reps).length + 40;
  let reps = Math.max(1, Math.round(targetTokens / ASSUMED_TOKENS_PER_REPETITION));
  while (reps > 1 && chars(reps) > room) reps--;
  if (chars(reps) > room) return { note: `the context limit ${requestCap} leaves no room for a prefix several pages long` };
  return { reps, note: `prefix P of ${reps} filler paragraph(s) (${chars(reps)} characters; token counts not calibrated)` };
}

/** Tenant B's planters until they carried `target` prompt tokens (a few waves at most). */
async function churn(ctx: ScenarioContext, out: ResultBuilder, sizing: PlanterSizing, tenant: Tenant, target: number, pieceTokens: number): Promise<ChurnTally> {
  const tally: ChurnTally = { target, sent: 0, planters: 0, ok: 0, estimated: false };
  let piece = pieceTokens;
  // Planters fall a little short of their size (whole markers); a sliver under the target needs no new wave.
  const enough = Math.floor(target * (1 - CHURN_TOLERANCE));
  for (let wave = 0; wave < MAX_CHURN_WAVES && tally.sent < enough && !ctx.signal.aborted; wave++) {
    const left = target - tally.sent;
    const count = Math.ceil(left / piece);
    const each = Math.ceil(left / count);
    let rejected = false;
    let sentAny = false;
    for (let first = 0; first < count && !ctx.signal.aborted; first += MAX_PLANTERS_IN_FLIGHT) {
      const batch = Array.from({ length: Math.min(MAX_PLANTERS_IN_FLIGHT, count - first) }, () =>
        plant(ctx, sizing, { tokens: each, role: 'churn-planter', tenant, maxTokens: SHORT_MAX_TOKENS, stream: true }),
      );
      for (const { ex } of await Promise.all(batch)) {
        if (out.add(ex) === undefined) continue;
        sentAny = true;
        tally.planters++;
        if (ex!.result.transport !== 'ok') {
          if (ex!.result.transport === 'http-4xx') rejected = true;
          continue;
        }
        tally.ok++;
        const billed = ex!.result.usage?.promptTokens;
        if (billed === undefined) tally.estimated = true;
        tally.sent += billed ?? ex!.record.promptTokens ?? 0;
      }
    }
    if (!sentAny) break; // token budget exhausted
    if (rejected) {
      if (piece / 2 < MIN_PIECE_TOKENS) break;
      piece = Math.floor(piece / 2);
    }
  }
  return tally;
}

/** The churn carried less than its target (within tolerance), and less than the exposed pool. */
function churnShort(c: ChurnTally, pool: number | undefined): boolean {
  return c.sent < Math.min(c.target * (1 - CHURN_TOLERANCE), pool ?? Infinity);
}

async function judge(ctx: ScenarioContext, out: ResultBuilder, rounds: Round[], pool: number | undefined, pair: TenantPair): Promise<ScenarioResult> {
  const ok = (ex: Exchange | undefined): ex is Exchange => ex !== undefined && ex.result.transport === 'ok';
  const cached = (ex: Exchange | undefined): number | undefined => (ok(ex) ? ex.result.usage?.cachedTokens : undefined);
  const fmt = (n: number | undefined): string => (n === undefined ? '?' : String(n));

  let reported = false;
  let reuse = 0;
  let answered = 0;
  let exercised = 0;
  let survived = 0;
  let shortChurn = 0;
  let restored = 0;
  let corrupt = 0;
  rounds.forEach((r, i) => {
    const [w, c, rr] = [cached(r.warm), cached(r.control), cached(r.reread)];
    if (c !== undefined) reported = true;
    const controlReuse = w !== undefined && c !== undefined && c > w;
    if (controlReuse) reuse++;
    if (ok(r.reread)) answered++;
    const covered = r.churn !== undefined && pool !== undefined && r.churn.sent >= pool;
    if (r.churn !== undefined && churnShort(r.churn, pool)) shortChurn++;
    const evicted = controlReuse && rr !== undefined && rr < c!;
    if (evicted) exercised++;
    // llama.cpp: the pinned slot held another prompt after the churn, yet P was served from the cache: its
    // KV came from a copy kept beyond the slot's cells (the host prompt cache, --cache-ram). Greedy decoding
    // over P's own KV continues exactly as the fresh computation did (warm = control shows this endpoint is
    // deterministic across a cache hit); a restore of cells another request wrote would not.
    // A slot holds one sequence: an answered planter pinned to P's slot took its cells.
    const slotTaken = r.slot !== undefined && (r.churn?.ok ?? 0) > 0;
    const keptBeyondSlot = controlReuse && rr !== undefined && rr >= c! && slotTaken;
    const deterministic = r.text.warm.length > 0 && r.text.control === r.text.warm;
    const intact = keptBeyondSlot && deterministic && r.text.reread.startsWith(r.text.control);
    if (intact) {
      exercised++;
      restored++;
    } else if (keptBeyondSlot && deterministic) corrupt++;
    if (controlReuse && rr !== undefined && rr >= c! && covered && !intact) survived++;
    const churn = r.churn === undefined ? 'no churn' : `churn ${r.churn.sent}/${r.churn.target} tokens in ${r.churn.ok}/${r.churn.planters} planter(s)${r.churn.estimated ? ' (partly estimated: usage not reported)' : ''}`;
    out.note(
      `round ${i + 1}: cached tokens warm ${fmt(w)}, control ${fmt(c)}, re-read ${fmt(rr)}; ${churn}; re-read ${r.reread === undefined ? 'not sent' : r.reread.result.transport === 'ok' ? 'answered' : r.reread.result.transport}` +
        (r.slot !== undefined ? `; slot ${r.slot}${r.slotHeldAfterChurn !== undefined ? ` held a ${r.slotHeldAfterChurn}-token prompt after the churn` : ''}` : '') +
        (evicted
          ? ': P evicted by the churn'
          : intact
            ? ': P restored from a copy kept beyond the slot (host prompt cache), its continuation identical to the fresh computation'
            : keptBeyondSlot && deterministic
              ? ": P served from the cache after the churn took its slot, but its continuation differs from the fresh computation's: the KV served for P was not P's own (llama.cpp #27148's class)"
              : controlReuse && rr !== undefined
                ? ': P still cached after the churn'
                : '') +
        (r.reread !== undefined && r.reread.foreign.length > 0 ? `; the re-read carried ${new Set(r.reread.foreign.map((m) => m.marker)).size} marker(s) of other requests` : ''),
    );
  });

  // A finding decides the outcome (finish() makes it a fail); the reasons below say why a clean run could not pass.
  if (out.findings.length > 0) return out.finish('inconclusive');
  // Is there a prefix cache at all? warm → control is an exact same-tenant re-send; counters alone never
  // conclude "none": that takes the cycle's one powered judgement (prefix-reuse.ts), measured if need be.
  const byTokens = reuseByCachedTokens(rounds.map((r) => ({ first: cached(r.warm), resend: ok(r.warm) ? cached(r.control) : undefined })));
  if (byTokens.reuse === 'shown') recordReuse(ctx.prefixReuse, { ...byTokens, by: PREFIX_CHURN });
  let hidden = false;
  if (reuse === 0 && !ctx.signal.aborted) {
    const verdict = await cycleReuse(ctx.prefixReuse, () => measureReuse(ctx, out, pair.a, PREFIX_CHURN));
    if (out.findings.length > 0) return out.finish('inconclusive');
    out.note(`prefix reuse: ${verdict.reuse}: ${verdict.evidence} (${verdict.by})`);
    if (verdict.reuse === 'none') {
      out.note(notApplicableNote(verdict));
      return out.finish('not-applicable');
    }
    if (verdict.reason === 'power') out.reason = 'power';
    hidden = verdict.countersHideHits === true;
  }
  if (restored > 0) out.note(`in ${restored} round(s) the churn took P's slot and P came back from the host prompt cache intact: entries there are copies, not the slot's reused cells`);
  const reasons: string[] = [];
  if (corrupt > 0) reasons.push(`in ${corrupt} round(s) P was served from the cache after the churn took its slot, with a continuation unlike the fresh computation's: the served KV was not P's own`);
  if (answered === 0) reasons.push('no re-read was answered');
  if (!reported) {
    reasons.push('cached tokens are not reported: reuse before the churn and eviction after it are unobservable, so a clean re-read proves nothing');
  } else if (reuse === 0 && hidden) {
    reasons.push('usage counters hide cache hits: timing shows prefix reuse the cached tokens do not report, so eviction after the churn is unobservable');
  } else if (reuse === 0) {
    reasons.push('the same-tenant control showed no reuse (cached tokens not above the first send): caching may be off, so a clean re-read proves nothing (vLLM PR #53347)');
  } else if (exercised === 0) {
    reasons.push(
      shortChurn > 0
        ? `the churn fell short of ${pool !== undefined ? 'the pool' : 'its target'} (token budget, rejected or failed planters), and no re-read showed P evicted: the churn may not have reached its pages`
        : pool === undefined
          ? 'the pool is not exposed and P stayed cached: the churn evidently did not reach its pages'
          : 'P was never evicted',
    );
  }
  if (survived > 0) {
    reasons.push(
      `in ${survived} round(s) P was still served from the cache after churn covering the exposed pool: a tier beyond that pool kept it, or an entry outlived its pages without another request's text showing`,
    );
  }
  for (const r of reasons) out.note(r);
  return out.finish(reasons.length === 0 ? 'pass' : 'inconclusive');
}

/**
 * Which pool a churn note's figure is, since it is not always the one the status page's header shows (the
 * smallest exposed): a slot's cells on llama.cpp, the largest pool where several are exposed (decode's, in
 * a disaggregated deployment, where a prefix cache keeps its pages), else the one pool.
 */
function poolLabel(i: { poolTokens?: number; largestPoolTokens?: number }, slotCells: boolean): string {
  if (slotCells) return 'slot KV cells';
  if (i.largestPoolTokens !== undefined && i.poolTokens !== undefined && i.largestPoolTokens !== i.poolTokens) return 'largest KV pool (where the prefix cache keeps its pages)';
  return 'KV pool';
}
