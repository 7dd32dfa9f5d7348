/**
 * prefix-collision: does the prefix cache key on the exact tokens, in order? A cache whose block key an
 * outside client can make collide serves one prompt's KV to another (CVE-2025-25183: vLLM's block hash
 * used Python's `hash()`, predictable and collidable; any key that drops order, position or part of the
 * tokens is the same class). A hit on a different prompt means the response was computed over another
 * request's pages: wrong text for the victim, and for an attacker who crafts the collision, a read of
 * whatever that prompt's owner put there.
 *
 * Design — what is sent and what is judged:
 * - Each round tenant A plants a prefix Q (fresh markers, `prefixTokens` default 512, several pages) with a
 *   suffix marker and the marker cue; then A sends Q again with another suffix (the control: the cache is on
 *   and reports reuse); then A sends the collider: Q's own token ids (from the endpoint's /tokenize) with
 *   the tokens inside every `w`-token window reordered (offsets 1..w-1 reversed, offset 0 kept), then a
 *   suffix of its own. Every aligned block of any multiple of `w` tokens holds the same multiset of tokens
 *   as Q's, in another order. `w` is the advertised page size, else 8 (which divides the common 16-256).
 *   The collider is sent as A, with A's key and cache_salt: whether salts separate tenants is
 *   prefix-isolation's question; this one is whether the key is the tokens.
 * - Judged by cached tokens: an exact cache may serve the collider at most the longest common prefix of
 *   its token ids with the plant's (in practice the first token) or A's baseline on a prefix nobody had
 *   sent (template and BOS pages). More is `prefix-cache-collision`.
 * - Judged by markers: the collider's prompt holds no marker intact (the reordering scrambles them), so a
 *   response carrying one of Q's markers, or A's suffix markers, was computed over the plant's KV:
 *   `cross-request-leak`.
 * - Needs /v1/completions (a token-id prompt) and a /tokenize that lists ids; without them, or without a
 *   control that shows reuse (caching off, or cached tokens not reported), the scenario is inconclusive:
 *   a miss then proves nothing — except where the endpoint demonstrably has no prefix cache (the exact
 *   re-sends reported no reuse, here or in the cycle's prefix-isolation: prefix-reuse.ts): not-applicable.
 */
import { makeFinding } from '../findings.js';
import { generateMarker } from '../markers.js';
import { MARKER_CUE } from '../prompts.js';
import type { ScenarioResult } from '../result.js';
import type { ScenarioContext, Tenant } from './context.js';
import { exchange, sentBySelf, type Exchange } from './exchange.js';
import { cycleReuse, notApplicableNote, recordReuse, reuseByCachedTokens, type PrefixReuseVerdict } from './prefix-reuse.js';
import { measureReuse } from './reuse-probe.js';
import { TIER_SETTLE_MS } from './prefix-churn.js';
import type { MarkerEntry } from '../marker-registry.js';
import { ResultBuilder } from './result-builder.js';
import { tenantPair } from './tenant-pair.js';

export const PREFIX_COLLISION = 'prefix-collision';

const ROUNDS = 2;
const MAX_ROUNDS = 8;
/** Sends of the control, and of the collider, in one round while the endpoint fails them. */
const ATTEMPTS = 3;
/** Window used when the endpoint does not advertise its page size: divides every common page size from 16 up. */
const DEFAULT_WINDOW = 8;
const MAX_WINDOW = 1024;
/** Room for the suffix (one marker, the cue) beyond the prefix. */
const SUFFIX_ALLOWANCE_TOKENS = 96;
const CUE_LINE = `\nQuote one reference code: ${MARKER_CUE}`;

interface Round {
  plant?: Exchange;
  control?: Exchange;
  collider?: Exchange;
  /** When the plant's markers were registered (for evidence). */
  plantedAt?: string;
  /** Longest common prefix of the collider's token ids with the plant's. */
  commonPrefix?: number;
}

export async function prefixCollision(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(PREFIX_COLLISION, ctx);
  const { reachable, tokenizeIds, pageSize, contextTokens } = ctx.introspection;
  if (!reachable) {
    out.note('endpoint unreachable');
    return out.finish('inconclusive');
  }
  if (ctx.api !== 'completions') {
    out.note('the collider is a token-id prompt, which only /v1/completions takes: not run with the chat API');
    return finishUnbuilt(ctx, out, tenantPair(ctx).a);
  }
  if (tokenizeIds === undefined) {
    out.note('no /tokenize that lists token ids: the collider cannot be built');
    return finishUnbuilt(ctx, out, tenantPair(ctx).a);
  }
  const window = pageSize !== undefined && pageSize >= 4 && pageSize <= MAX_WINDOW ? pageSize : DEFAULT_WINDOW;
  out.note(`collider blocks reordered in ${window}-token windows (${pageSize !== undefined ? `page size ${pageSize} advertised` : 'page size not advertised'})`);

  const tenant = tenantPair(ctx).a;
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const perMarker = await tokensPerMarker(tokenizeIds);
  if (perMarker === undefined) {
    out.note('/tokenize did not answer with token ids');
    return finishUnbuilt(ctx, out, tenantPair(ctx).a);
  }
  let count = Math.ceil((ctx.tuning.prefixTokens ?? 512) / perMarker);
  if (contextTokens !== undefined) count = Math.min(count, Math.floor((contextTokens - maxTokens - SUFFIX_ALLOWANCE_TOKENS) / perMarker));
  if (count * perMarker < 2 * window) {
    out.note(`the context limit leaves no room for a prefix of two ${window}-token windows`);
    return out.finish('inconclusive');
  }
  out.note(`prefixes of ${count} markers (about ${Math.round(count * perMarker)} tokens)`);

  const rounds: Round[] = [];
  // Up to MAX_ROUNDS while no round has an answered control and collider (an endpoint that fails some
  // requests still gets judged; an error is never read as an answer).
  const complete = (): boolean => rounds.some((r) => ok(r.control) && ok(r.collider));
  for (let i = 0; (i < ROUNDS || (i < MAX_ROUNDS && !complete())) && !ctx.signal.aborted; i++) {
    const round = await runRound(ctx, out, tenant, { count, window, maxTokens, tokenizeIds });
    if (round === undefined) break;
    rounds.push(round);
  }
  return judge(ctx, out, rounds, window, tenant);
}

async function runRound(
  ctx: ScenarioContext,
  out: ResultBuilder,
  tenant: Tenant,
  opts: { count: number; window: number; maxTokens: number; tokenizeIds: (text: string) => Promise<number[] | undefined> },
): Promise<Round | undefined> {
  const round: Round = {};
  const plantId = ctx.newRequestId('collision-planter');
  const mark = (requestId: string, role: string) => ctx.registry.plant({ runId: ctx.runId, requestId, role, tenant: tenant.name });
  const prefixEntries = Array.from({ length: opts.count }, () => mark(plantId, 'collision-planter'));
  const plantSuffix = mark(plantId, 'collision-planter');
  ctx.onMarkers([...prefixEntries, plantSuffix]);
  round.plantedAt = plantSuffix.plantedAt;
  const prefix = prefixEntries.map((e) => e.marker).join(' ') + '\n';
  const plantText = `${prefix}${plantSuffix.marker}${CUE_LINE}`;
  const plantIds = await opts.tokenizeIds(plantText);
  if (plantIds === undefined) {
    out.note('/tokenize stopped answering with token ids');
    return undefined;
  }
  round.plant = out.add(await exchange(ctx, { role: 'collision-planter', tenant, requestId: plantId, prompt: plantText, promptTokens: plantIds.length, maxTokens: opts.maxTokens }));
  if (round.plant === undefined || round.plant.result.transport !== 'ok') return round;

  // An endpoint may fail a request after admitting it (llama.cpp ends a stream with an error when a model
  // emits bytes its output parser rejects): the control and the collider are re-sent, each time with a
  // suffix (and, for the collider, an order) of its own, so no attempt is a re-send of another.
  const send = { ctx, out, tenant, prefix, mark, ...opts };
  for (let attempt = 0; attempt < ATTEMPTS && (attempt === 0 || worthResending(round.control)); attempt++) {
    const control = await sendControl(send, prefixEntries.map((e) => e.marker), plantIds.length);
    if (control === undefined) return round;
    round.control = control;
  }
  // A tier that stores a prefix only after the request ended (a host tier's write-back) serves it a moment
  // later: while the control shows no reuse, it is sent again after a pause.
  for (const pause of TIER_SETTLE_MS) {
    const [p, c] = [round.plant.result.usage?.cachedTokens, round.control?.result.usage?.cachedTokens];
    if (!ok(round.control) || p === undefined || c === undefined || c > p || ctx.signal.aborted) break;
    await new Promise((r) => setTimeout(r, pause));
    const control = await sendControl(send, prefixEntries.map((e) => e.marker), plantIds.length);
    if (control === undefined) return round;
    round.control = control;
  }
  const sent: number[][] = [plantIds];
  for (let attempt = 0; attempt < ATTEMPTS && (attempt === 0 || worthResending(round.collider)); attempt++) {
    const collider = await sendCollider(send, attempt, sent);
    if (collider === undefined) return round;
    round.collider = collider.exchange;
    // What an exact cache may legitimately serve: the longest prefix shared with anything this round sent.
    round.commonPrefix = collider.commonPrefix;
  }
  return round;
}

interface Send {
  ctx: ScenarioContext;
  out: ResultBuilder;
  tenant: Tenant;
  prefix: string;
  mark: (requestId: string, role: string) => MarkerEntry;
  maxTokens: number;
  window: number;
  tokenizeIds: (text: string) => Promise<number[] | undefined>;
}

/** The control: the plant's prefix again, exactly, with a suffix of its own. */
async function sendControl(s: Send, prefixMarkers: string[], promptTokens: number): Promise<Exchange | undefined> {
  const requestId = s.ctx.newRequestId('collision-control');
  const suffix = s.mark(requestId, 'collision-control');
  s.ctx.onMarkers([suffix]);
  const prompt = `${s.prefix}${suffix.marker}${CUE_LINE}`;
  const control = await exchange(s.ctx, { role: 'collision-control', tenant: s.tenant, requestId, prompt, promptTokens, maxTokens: s.maxTokens });
  return control === undefined ? undefined : s.out.add(sentBySelf(control, prefixMarkers));
}

/**
 * The collider: the prefix's token ids in another order (`variant` of reorderWindows), and a suffix of its
 * own; `sent` (the round's earlier token-id prompts) gives the common prefix an exact cache may serve, and
 * gains this one. Undefined when not sent.
 */
async function sendCollider(s: Send, variant: number, sent: number[][]): Promise<{ exchange: Exchange; commonPrefix: number } | undefined> {
  const requestId = s.ctx.newRequestId('collision-probe');
  const suffix = s.mark(requestId, 'collision-probe');
  s.ctx.onMarkers([suffix]);
  const [prefixIds, fullIds] = await Promise.all([s.tokenizeIds(s.prefix), s.tokenizeIds(`${s.prefix}${suffix.marker}${CUE_LINE}`)]);
  if (prefixIds === undefined || fullIds === undefined) {
    s.out.note('/tokenize stopped answering with token ids');
    return undefined;
  }
  // The last prefix token may merge with the suffix's first: only the part both tokenizations agree on is reordered.
  const agreed = commonPrefixLength(prefixIds, fullIds, prefixIds.length - 1);
  const blocks = Math.floor(agreed / s.window);
  if (blocks < 1) {
    s.out.note(`the prefix's tokenization is not stable across suffixes (${agreed} tokens agree): no collider this round`);
    return undefined;
  }
  const ids = [...reorderWindows(fullIds.slice(0, blocks * s.window), s.window, variant), ...fullIds.slice(blocks * s.window)];
  const commonPrefix = Math.max(...sent.map((other) => commonPrefixLength(ids, other, ids.length)));
  sent.push(ids);
  const collider = await exchange(s.ctx, { role: 'collision-probe', tenant: s.tenant, requestId, prompt: '', tokenIds: ids, promptTokens: ids.length, maxTokens: s.maxTokens });
  return collider === undefined ? undefined : { exchange: s.out.add(collider), commonPrefix };
}

async function judge(ctx: ScenarioContext, out: ResultBuilder, rounds: Round[], window: number, tenant: Tenant): Promise<ScenarioResult> {
  const runId = ctx.runId;
  const cached = (ex: Exchange | undefined): number | undefined => (ok(ex) ? ex.result.usage?.cachedTokens : undefined);
  const baseline = Math.max(0, ...rounds.map((r) => cached(r.plant) ?? 0));
  const controlled = rounds.filter((r) => (cached(r.control) ?? 0) > baseline);
  const probed = rounds.filter((r) => ok(r.collider));
  const measured = probed.filter((r) => cached(r.collider) !== undefined);
  out.note(
    `${rounds.length} round(s): control cached tokens above the baseline ${baseline} in ${controlled.length}; ` +
      `${probed.length} collider(s) answered, cached tokens ${measured.map((r) => `${cached(r.collider)} (common prefix ${r.commonPrefix ?? 0})`).join(', ') || 'not reported'}`,
  );
  const collided = measured.filter((r) => cached(r.collider)! > Math.max(baseline, r.commonPrefix ?? 0));
  if (collided.length > 0) {
    const worst = collided.reduce((m, r) => (cached(r.collider)! > cached(m.collider)! ? r : m));
    const collider = worst.collider!;
    const plant = worst.plant!;
    out.findings.push(
      makeFinding('prefix-cache-collision', PREFIX_COLLISION, {
        match: `a prompt no request had sent (another's prefix with its ${window}-token windows reordered) was served ${cached(collider)} cached prompt tokens`,
        planted: { runId, requestId: plant.requestId, role: plant.record.role, tenant: plant.tenant, at: worst.plantedAt ?? '' },
        read: { requestId: collider.requestId, role: collider.record.role, tenant: collider.tenant, ...(collider.result.status !== undefined ? { status: collider.result.status } : {}) },
        facts: {
          cachedTokens: cached(collider) ?? null,
          legitimateMax: Math.max(baseline, worst.commonPrefix ?? 0),
          promptTokens: collider.result.usage?.promptTokens ?? null,
          window,
          collidedRounds: collided.length,
          rounds: measured.length,
        },
      }),
    );
  }
  // Is there a prefix cache at all? The control is an exact same-tenant re-send; counters alone never
  // conclude "none": that takes the cycle's one powered judgement (prefix-reuse.ts), measured if need be.
  const byTokens = reuseByCachedTokens(rounds.map((r) => ({ first: cached(r.plant), resend: ok(r.plant) ? cached(r.control) : undefined })));
  if (byTokens.reuse === 'shown') recordReuse(ctx.prefixReuse, { ...byTokens, by: PREFIX_COLLISION });
  let verdict: PrefixReuseVerdict | undefined;
  if (controlled.length === 0 && out.findings.length === 0 && !ctx.signal.aborted) {
    verdict = await cycleReuse(ctx.prefixReuse, () => measureReuse(ctx, out, tenant, PREFIX_COLLISION));
    out.note(`prefix reuse: ${verdict.reuse}: ${verdict.evidence} (${verdict.by})`);
    if (verdict.reuse === 'none' && out.findings.length === 0) {
      out.note(notApplicableNote(verdict));
      return out.finish('not-applicable');
    }
    if (verdict.reason === 'power') out.reason = 'power';
  }
  const reasons: string[] = [];
  if (controlled.length === 0) {
    reasons.push(
      verdict?.countersHideHits === true
        ? 'usage counters hide cache hits: timing shows prefix reuse the cached tokens do not report, so a collider served from the cache would not show in its cached tokens'
        : rounds.some((r) => cached(r.control) !== undefined)
        ? 'the same-prompt control showed no reuse: caching may be off, so a miss for the collider proves nothing'
        : 'cached tokens are not reported: only the marker signal could speak, and a miss proves nothing',
    );
  }
  if (probed.length === 0) reasons.push('no collider was answered');
  for (const r of reasons) out.note(r);
  return out.finish(reasons.length === 0 ? 'pass' : 'inconclusive');
}

/** The collider could not be built: not applicable where the cycle's one reuse judgement finds no prefix reuse, else inconclusive. */
async function finishUnbuilt(ctx: ScenarioContext, out: ResultBuilder, tenant: Tenant): Promise<ScenarioResult> {
  if (!ctx.signal.aborted) {
    const verdict = await cycleReuse(ctx.prefixReuse, () => measureReuse(ctx, out, tenant, PREFIX_COLLISION));
    out.note(`prefix reuse: ${verdict.reuse}: ${verdict.evidence} (${verdict.by})`);
    if (verdict.reuse === 'none' && out.findings.length === 0) {
      out.note(notApplicableNote(verdict));
      return out.finish('not-applicable');
    }
    if (verdict.reason === 'power') out.reason = 'power';
  }
  return out.finish('inconclusive');
}

/** Tokens one marker with its separator costs on the endpoint's tokenizer (8 sampled, never registered). */
async function tokensPerMarker(tokenizeIds: (text: string) => Promise<number[] | undefined>): Promise<number | undefined> {
  const one = await tokenizeIds('x');
  const eight = await tokenizeIds(`x${Array.from({ length: 8 }, () => ` ${generateMarker()}`).join('')}`);
  if (one === undefined || eight === undefined || eight.length <= one.length) return undefined;
  return (eight.length - one.length) / 8;
}

/**
 * Each `w`-token window with offsets 1..w-1 permuted: the same tokens per window (and per multiple of w),
 * another order. Variant 0 reverses them; variant k > 0 rotates them by k (mod w-1), so variants differ
 * from each other and from the original at offset 1 (where w-1 allows: `variant` is taken mod w-2).
 */
export function reorderWindows(ids: readonly number[], w: number, variant = 0): number[] {
  const outIds = [...ids];
  const k = w > 3 ? variant % (w - 2) : 0;
  for (let start = 0; start + w <= ids.length; start += w) {
    for (let i = 1; i < w; i++) outIds[start + i] = ids[k === 0 ? start + w - i : start + 1 + ((i - 1 + k) % (w - 1))]!;
  }
  return outIds;
}

function ok(ex: Exchange | undefined): ex is Exchange {
  return ex !== undefined && ex.result.transport === 'ok';
}

/**
 * The endpoint failed this request of its own accord (a 5xx, an error event after admission, a reset, a body
 * that did not parse): worth another send. Not a timeout, a refusal or a 4xx, which would only repeat.
 */
function worthResending(ex: Exchange | undefined): boolean {
  return ex !== undefined && (ex.result.transport === 'http-5xx' || ex.result.transport === 'malformed' || ex.result.transport === 'reset');
}

export function commonPrefixLength(a: readonly number[], b: readonly number[], limit: number): number {
  const n = Math.min(a.length, b.length, Math.max(0, limit));
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
