/**
 * prefix-isolation: does a prefix cache keep tenants apart? (vLLM's `cache_salt`, CVE-2025-46570; SGLang
 * HiCache ignoring the salt, PR #37058; prompt caches restoring another conversation, llama.cpp #27148.)
 *
 * Design — what is judged, and by what:
 * - Each cycle runs `timingPairs` rounds. In round i tenant A plants a fresh prefix Q_i (several pages:
 *   `prefixTokens`, default 512, of markers, so far above page sizes of 16-256) followed by a suffix with
 *   one more marker of its own and the marker cue. Then, in random order, back to back:
 *     control — A sends Q_i again with a different suffix (same tenant: must reuse the cache);
 *     reader  — B sends the same Q_i with its own suffix (must not);
 *     fresh   — B sends a new prefix of the same length that nobody sent (the timing baseline).
 *   Every prefix starts with a random marker, so its first page is unique and nothing before this round
 *   (the prober's other prompts, the chat template) can make its pages hit.
 * - Markers and the fact that B sends A's prefix: the prefix's markers are registered to A's planting
 *   request, and a request's response echoing markers *it sent itself* proves nothing, so matches of
 *   markers in a request's own prompt are counted as self-echo. What B never sends are A's suffix
 *   markers (after the prefix): B's response carrying one is text crossing tenants, `cross-request-leak`
 *   (planted by A, read by B). The same holds for A's control and A's planter's suffix (another request).
 *   The prefix markers stay registered, so they are found if they surface anywhere else, later included.
 * - Sharing, by cached tokens (where reported): a tenant's "baseline" is the most cached tokens it got on
 *   prefixes nobody had sent (template and BOS pages only); B's reader above B's baseline was served pages
 *   only A had computed: `prefix-cache-shared-across-tenants`, with facts (cached tokens, whether salts and
 *   keys differ, never the key values).
 * - Same-tenant control (vLLM PR #53347: "different salt, no reuse" also passes when caching is off): A's
 *   control must show reuse — cached tokens above A's baseline, or, where cached tokens are not reported
 *   (or reported but always 0 by a proxy), a significant TTFT saving over the round's fresh prefix. Without it
 *   the scenario is inconclusive.
 * - Timing (stats.ts): B's TTFT on A's prefix vs on its fresh prefix, paired per round, one-sided exact
 *   sign-flip permutation test at `timingAlpha` (default 0.001) plus a minimum effect `timingMinEffect`
 *   (default: 20% faster in median). Significant and large: `prefix-timing-side-channel`. The same test
 *   on A's control vs the round's fresh prefix measures the effect a cache hit has at all (in the notes).
 * - Declared boundaries (tenant-pair.ts): between configured tenants, sharing is
 *   `prefix-cache-shared-across-tenants` (critical) and a timing effect `prefix-timing-side-channel`; between
 *   the synthetic identities (same key, random salts) either is `cache-salt-ignored` (info): the endpoint
 *   ignores cache_salt, and no boundary anyone declared was crossed.
 * - A timing effect for B that B's own cached tokens contradict (reported, trustworthy by A's control, and no
 *   reuse for B) is raised only if a second, independent set of rounds confirms it (a false alarm seen in a
 *   full run: one window of pairs skewed by what earlier scenarios left running).
 * - Requests the endpoint fails (llama-server ends some streams with an error on noise output) are never
 *   answers: up to as many rounds again are played while the timing test lacks answered pairs.
 * - Outcome: fail on any finding above info; not-applicable when an exact same-tenant re-send shows no reuse
 *   (prefix-reuse.ts), or when only synthetic identities were compared and they share (cache-salt-ignored);
 *   pass only when the control showed reuse, B showed none, and the timing test ran (enough pairs to reach
 *   alpha); otherwise inconclusive with the reasons.
 */
import { randomInt } from 'node:crypto';
import { makeFinding, type Finding } from '../findings.js';
import { generateMarker } from '../markers.js';
import { MARKER_CUE } from '../prompts.js';
import type { ScenarioResult } from '../result.js';
import { minPairsFor, timingSideChannelTest, type PairedSample, type TimingDecision } from '../stats.js';
import type { ScenarioContext, Tenant } from './context.js';
import { exchange, sentBySelf, type Exchange } from './exchange.js';
import { notApplicableNote, recordReuse, reuseByCachedTokens, type PrefixReuseVerdict } from './prefix-reuse.js';
import { ResultBuilder } from './result-builder.js';
import { sameIdentity, tenantPair, type TenantPair } from './tenant-pair.js';

export const PREFIX_ISOLATION = 'prefix-isolation';

const DEFAULT_TIMING_PAIRS = 12;
const DEFAULT_PREFIX_TOKENS = 512;
/**
 * Where no response reports cached tokens (vLLM without --enable-prompt-tokens-details, many proxies) the
 * timing test is B's only judge. On the bundled engine, 12 pairs over 512-token prefixes caught a shared
 * cache in 2 of 5 cycles (effect about 25%); 24 pairs over 2048-token prefixes in 5 of 5 (effect about 48%,
 * p <= 2e-5). Only then is the extra cost paid; an explicit timingPairs or prefixTokens is kept as given.
 */
const UNREPORTED_TIMING_PAIRS = 24;
const UNREPORTED_PREFIX_FACTOR = 4;
/**
 * Same-tenant controls served from cache (cached tokens above the baseline) that show the cache reuses
 * prefixes. Under load (three replicas probed on two busy cores, other scenarios filling the pool) the
 * bundled engine's controls hit in only 4-5 of 12 rounds: the prefix was evicted before the re-send.
 */
const CONTROL_HITS_SHOWING_REUSE = 3;
/** Rounds of cached-token sharing between synthetic identities after which the scenario stops (cache_salt ignored). */
const MOOT_AFTER = 2;

function reportsCachedTokens(round: Round): boolean {
  return [round.plant, round.control, round.reader, round.fresh].some((s) => s?.ex.result.transport === 'ok' && s.ex.result.usage?.cachedTokens !== undefined);
}

function answeredAny(round: Round): boolean {
  return [round.plant, round.control, round.reader, round.fresh].some((s) => s?.ex.result.transport === 'ok');
}

/** Tokens one marker with its separator costs at least on common tokenizers (random base32 splits finely). */
const MIN_TOKENS_PER_MARKER = 12;
/** Room for the suffix (one marker, the cue) and a chat template. */
const SUFFIX_ALLOWANCE_TOKENS = 96;
const MIN_PREFIX_MARKERS = 4;
/** A marker is 36 characters with its separator: no tokenizer spends more than one token per character. */
const MARKER_CHARS_UPPER_BOUND_TOKENS = 36;

interface Sent {
  ex: Exchange;
  /** When the request's first marker was planted (for evidence). */
  at: string;
}

interface Round {
  plant?: Sent;
  control?: Sent;
  reader?: Sent;
  fresh?: Sent;
}

export async function prefixIsolation(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(PREFIX_ISOLATION, ctx);
  if (!ctx.introspection.reachable) {
    out.note('endpoint unreachable');
    return out.finish('inconclusive');
  }
  const pair = tenantPair(ctx);
  out.note(pair.note);
  if (sameIdentity(pair)) {
    out.note(`${pair.a.name} and ${pair.b.name} send the same key and the same cache_salt: sharing between them is expected, nothing to test`);
    return out.finish('inconclusive');
  }
  let rounds = ctx.tuning.timingPairs ?? DEFAULT_TIMING_PAIRS;
  const alpha = ctx.tuning.timingAlpha ?? 0.001;
  const minEffect = ctx.tuning.timingMinEffect ?? 0.2;
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const markers = await prefixMarkerCount(ctx, ctx.tuning.prefixTokens ?? DEFAULT_PREFIX_TOKENS, maxTokens);
  out.note(markers.note);
  if (markers.count < MIN_PREFIX_MARKERS) {
    out.note('the context limit leaves no room for a prefix several pages long');
    return out.finish('inconclusive');
  }

  const sender = new PrefixSender(ctx, out, maxTokens);
  const needed = minPairsFor(alpha);
  let prefixMarkers = markers.count;
  /**
   * Plays rounds into `done`: `planned` of them, and up to as many again while too few timing pairs were
   * answered to decide (an endpoint that fails some requests, e.g. llama-server on noise output, still gets
   * judged; an error is never read as an answer).
   */
  let escalated = false;
  const play = async (done: Round[], planned: number, escalate: boolean): Promise<void> => {
    // Once synthetic identities showed in MOOT_AFTER rounds, by cached tokens, that the endpoint ignores
    // cache_salt, there is no declared boundary left to test and the timing test has nothing to decide: stop.
    const moot = (): boolean => !pair.declared && tokenFacts(done).shared.length >= MOOT_AFTER;
    for (let i = 0; !ctx.signal.aborted && !moot() && (i < planned || (i < 2 * planned && usablePairs(done) < needed)); i++) {
      // Decided on the first round with an answer: an unanswered round says nothing about cached tokens.
      const firstAnswered = escalate && !escalated ? done.find(answeredAny) : undefined;
      if (firstAnswered !== undefined) escalated = true;
      if (firstAnswered !== undefined && ctx.tuning.timingPairs === undefined && ctx.tuning.prefixTokens === undefined && !reportsCachedTokens(firstAnswered)) {
        // Without cached tokens the timing test alone speaks for B: give it more pairs and a longer prefix to skip.
        const longer = await prefixMarkerCount(ctx, UNREPORTED_PREFIX_FACTOR * (ctx.tuning.prefixTokens ?? DEFAULT_PREFIX_TOKENS), maxTokens);
        planned = rounds = UNREPORTED_TIMING_PAIRS;
        prefixMarkers = Math.max(prefixMarkers, longer.count);
        out.note(`cached_tokens not reported in the first answered round: timing alone speaks, so ${rounds} rounds and from now on ${longer.note}`);
      }
      const round: Round = {};
      done.push(round);
      const planted = sender.reserve(pair.a, 'prefix-planter', prefixMarkers);
      const fresh = sender.reserve(pair.b, 'prefix-fresh', prefixMarkers);
      const prefix = await sender.send(pair.a, 'prefix-planter', planted.markers, planted.requestId);
      if (prefix === undefined) break;
      round.plant = prefix.sent;
      if (prefix.sent.ex.result.transport !== 'ok') continue;
      const steps: Array<() => Promise<void>> = [
        async () => void (round.control = (await sender.send(pair.a, 'prefix-control', prefix.markers))?.sent),
        async () => void (round.reader = (await sender.send(pair.b, 'prefix-reader', prefix.markers))?.sent),
        async () => void (round.fresh = (await sender.send(pair.b, 'prefix-fresh', fresh.markers, fresh.requestId))?.sent),
      ];
      // Random order within the round: neither side of a timing pair is systematically first.
      for (let k = steps.length - 1; k > 0; k--) {
        const j = randomInt(k + 1);
        [steps[k], steps[j]] = [steps[j]!, steps[k]!];
      }
      for (const step of steps) await step();
    }
  };

  const done: Round[] = [];
  await play(done, rounds, true);
  if (done.length < rounds && !ctx.signal.aborted && !pair.declared && tokenFacts(done).shared.length >= MOOT_AFTER) {
    out.note(`stopped after ${done.length} round(s): cached tokens show the endpoint ignores cache_salt, and no other boundary was declared`);
  } else if (done.length < rounds) out.note(`stopped after ${done.length} of ${rounds} rounds (${ctx.signal.aborted ? 'cycle stopped' : 'token budget exhausted'})`);
  else if (done.length > rounds) out.note(`${done.length - rounds} extra round(s): requests went unanswered and the timing test needs ${needed} answered pairs`);

  // A timing effect for B that B's own cached tokens contradict (reported, reuse shown for A, none for B) is
  // not raised on one test: earlier traffic of the run (late batches of aborted requests, leftover load) can
  // skew one window of pairs. A second, independent set of rounds must confirm it.
  let retest: Round[] | undefined;
  const first = tokenFacts(done);
  if (!ctx.signal.aborted && first.contradicts && crossTest(done, { alpha, minEffect }).detected) {
    out.note(`timing effect for ${pair.b.name} although its cached tokens show no reuse: re-testing with ${rounds} fresh rounds before raising it`);
    retest = [];
    await play(retest, rounds, false);
  }
  return judge(ctx, out, pair, done, { alpha, minEffect }, retest);
}

function usablePairs(rounds: readonly Round[]): number {
  return rounds.filter((r) => r.reader?.ex.result.transport === 'ok' && r.fresh?.ex.result.transport === 'ok' && r.reader.ex.result.ttftMs !== undefined && r.fresh.ex.result.ttftMs !== undefined).length;
}

/** Sends prefix+suffix requests: registers markers first, and counts echoes of a request's own prompt as self. */
class PrefixSender {
  #tokensPerChar = 1; // pessimistic until usage says otherwise: budgets must not be overspent

  constructor(
    private readonly ctx: ScenarioContext,
    private readonly out: ResultBuilder,
    private readonly maxTokens: number,
  ) {}

  /**
   * Registers `count` fresh prefix markers for a request to be sent later. A round reserves both of its new
   * prefixes before its first send, so every timed send does the same client-side work (one suffix marker):
   * registering dozens of markers just before one side of a pair made that side measurably slower (a few
   * hundred microseconds, enough for 24 pairs to reach p < 0.001 against a server without any cache).
   */
  reserve(tenant: Tenant, role: string, count: number): { requestId: string; markers: string[] } {
    const { ctx } = this;
    const requestId = ctx.newRequestId(role);
    const entries = Array.from({ length: count }, () => ctx.registry.plant({ runId: ctx.runId, requestId, role, tenant: tenant.name }));
    ctx.onMarkers(entries);
    return { requestId, markers: entries.map((e) => e.marker) };
  }

  /** Sends `prefixMarkers` (reserved for `requestId`, or another request's shared prefix) and a suffix marker of its own. */
  async send(tenant: Tenant, role: string, prefixMarkers: readonly string[], requestId = this.ctx.newRequestId(role)): Promise<{ sent: Sent; markers: string[] } | undefined> {
    const { ctx } = this;
    const suffix = ctx.registry.plant({ runId: ctx.runId, requestId, role, tenant: tenant.name });
    ctx.onMarkers([suffix]);
    const prompt = `${prefixMarkers.join(' ')}\n${suffix.marker}\nQuote one reference code: ${MARKER_CUE}`;
    const ex = await exchange(ctx, {
      role,
      tenant,
      requestId,
      prompt,
      promptTokens: Math.ceil(prompt.length * this.#tokensPerChar),
      maxTokens: this.maxTokens,
      stream: true,
    });
    if (ex === undefined) return undefined;
    const usage = ex.result.usage;
    if (usage !== undefined && usage.promptTokens > 0) this.#tokensPerChar = Math.min(1, usage.promptTokens / prompt.length);
    const judged = sentBySelf(ex, prefixMarkers);
    this.out.add(judged);
    return { sent: { ex: judged, at: suffix.plantedAt }, markers: [...prefixMarkers] };
  }
}

async function prefixMarkerCount(ctx: ScenarioContext, targetTokens: number, maxTokens: number): Promise<{ count: number; note: string }> {
  let perMarker = MIN_TOKENS_PER_MARKER;
  let via = `assuming at least ${MIN_TOKENS_PER_MARKER} tokens per marker`;
  const tokenize = ctx.introspection.tokenize;
  if (tokenize !== undefined && ctx.api === 'completions') {
    // Never sent as a completion and never registered: only counted.
    const sample = Array.from({ length: 8 }, () => generateMarker()).join(' ') + '\n';
    const counted = await tokenize(sample);
    if (counted !== undefined && counted > 0) {
      perMarker = Math.max(1, counted / 8);
      via = `${perMarker.toFixed(1)} tokens per marker by /tokenize`;
    }
  }
  let count = Math.ceil(targetTokens / perMarker);
  const context = ctx.introspection.contextTokens;
  let capped = '';
  if (context !== undefined) {
    const room = Math.floor((context - maxTokens - SUFFIX_ALLOWANCE_TOKENS) / Math.max(perMarker, MARKER_CHARS_UPPER_BOUND_TOKENS));
    if (count > room) {
      count = Math.max(0, room);
      capped = `, capped by the context limit ${context}`;
    }
  }
  return { count, note: `shared prefixes of ${count} markers (about ${Math.round(count * perMarker)} tokens; ${via}${capped})` };
}

const okSent = (s: Sent | undefined): s is Sent => s !== undefined && s.ex.result.transport === 'ok';
const cachedOf = (s: Sent | undefined): number | undefined => (okSent(s) ? s.ex.result.usage?.cachedTokens : undefined);
const ttftOf = (s: Sent | undefined): number | undefined => (okSent(s) ? s.ex.result.ttftMs : undefined);
function maxOf(xs: Array<number | undefined>): number | undefined {
  const known = xs.filter((x): x is number => x !== undefined);
  return known.length === 0 ? undefined : Math.max(...known);
}

/** What cached tokens say: baselines are what each tenant got on prefixes nobody had sent. */
function tokenFacts(rounds: readonly Round[]) {
  const baselineA = maxOf(rounds.map((r) => cachedOf(r.plant))) ?? 0;
  const baselineB = maxOf(rounds.map((r) => cachedOf(r.fresh))) ?? baselineA;
  const controls = rounds.filter((r) => cachedOf(r.control) !== undefined);
  const controlHits = controls.filter((r) => cachedOf(r.control)! > baselineA);
  const readers = rounds.filter((r) => cachedOf(r.reader) !== undefined);
  const shared = readers.filter((r) => cachedOf(r.reader)! > baselineB);
  // A control above the baseline is a fact (an exact re-send served from cache), not a vote: other load on
  // the endpoint can evict a prefix between its send and its re-send, so misses say little. Reuse is shown
  // by CONTROL_HITS_SHOWING_REUSE hits, or by half of fewer answered controls.
  const tokensShowReuse = controls.length > 0 && controlHits.length >= Math.min(CONTROL_HITS_SHOWING_REUSE, Math.ceil(controls.length / 2));
  /** B's reads in rounds whose control hit: the prefix was cached around B's read, so B's count speaks. */
  const vouched = controlHits.filter((r) => cachedOf(r.reader) !== undefined);
  /** Cached tokens are trustworthy here (A's control reuse shows) and B got none: a timing effect for B contradicts them. */
  const contradicts = tokensShowReuse && vouched.length > 0 && shared.length === 0;
  return { baselineA, baselineB, controls, controlHits, readers, vouched, shared, tokensShowReuse, contradicts };
}

function pairsOf(rounds: readonly Round[], pick: (r: Round) => [Sent | undefined, Sent | undefined]): PairedSample[] {
  return rounds.flatMap((r) => {
    const [hit, miss] = pick(r);
    const c = ttftOf(hit);
    const f = ttftOf(miss);
    return c !== undefined && f !== undefined ? [{ cached: c, fresh: f }] : [];
  });
}

/** B on A's prefix vs B on a fresh one (the side channel). */
function crossTest(rounds: readonly Round[], opts: { alpha: number; minEffect: number }): TimingDecision {
  return timingSideChannelTest(pairsOf(rounds, (r) => [r.reader, r.fresh]), opts);
}

function judge(ctx: ScenarioContext, out: ResultBuilder, pair: TenantPair, rounds: Round[], opts: { alpha: number; minEffect: number }, retest?: Round[]): ScenarioResult {
  const { a, b } = pair;
  const sent = rounds.flatMap((r) => [r.plant, r.control, r.reader, r.fresh]).filter((s): s is Sent => s !== undefined);
  const answered = sent.filter(okSent).length;
  out.note(`${rounds.length} round(s): ${answered}/${sent.length} requests answered`);

  // --- Cached tokens.
  const { baselineA, baselineB, controls, controlHits, readers, vouched, shared, tokensShowReuse } = tokenFacts(rounds);
  const reported = sent.some((s) => okSent(s) && s.ex.result.usage?.cachedTokens !== undefined);
  if (controls.length > 0) {
    out.note(
      `cached_tokens: ${a.name} control above its baseline ${baselineA} in ${controlHits.length}/${controls.length} round(s) (max ${maxOf(controls.map((r) => cachedOf(r.control))) ?? 0}); ` +
        `${b.name} on ${a.name}'s prefix above its baseline ${baselineB} in ${shared.length}/${readers.length}`,
    );
  } else {
    out.note(reported ? 'cached_tokens reported, but on no answered control' : 'cached_tokens not reported: reuse can only be judged by timing');
  }
  if (shared.length > 0) {
    const worst = shared.reduce((m, r) => (cachedOf(r.reader)! > cachedOf(m.reader)! ? r : m));
    const reader = worst.reader!;
    const plant = worst.plant!;
    out.findings.push(
      makeFinding(pair.declared ? 'prefix-cache-shared-across-tenants' : 'cache-salt-ignored', PREFIX_ISOLATION, {
        match: `${b.name} was served ${cachedOf(reader)} cached prompt tokens of a prefix only ${a.name} had sent${pair.declared ? '' : ' (the two differ only by cache_salt)'}`,
        planted: { runId: ctx.runId, requestId: plant.ex.requestId, role: plant.ex.record.role, tenant: a.name, at: plant.at },
        read: { requestId: reader.ex.requestId, role: reader.ex.record.role, tenant: b.name, ...(reader.ex.result.status !== undefined ? { status: reader.ex.result.status } : {}) },
        facts: {
          cachedTokens: cachedOf(reader) ?? null,
          baselineCachedTokens: baselineB,
          promptTokens: reader.ex.result.usage?.promptTokens ?? null,
          sharedRounds: shared.length,
          rounds: readers.length,
          saltsDiffer: pair.saltsDiffer,
          keysDiffer: pair.keysDiffer,
          syntheticTenants: pair.synthetic,
        },
      }),
    );
  }

  // --- Timing: B on A's prefix vs B fresh (the side channel); A's control vs the same fresh prefix (the
  // cache's own effect). Both pairs are sent in random order within the round, so each pair's members are
  // exchangeable without a cache. (A's plant always goes first: against it, on a server without any cache,
  // the control looked faster in most cycles at p < 0.001, and a cacheless server passed.)
  const crossPairs = pairsOf(rounds, (r) => [r.reader, r.fresh]);
  const cross = timingSideChannelTest(crossPairs, opts);
  const same = timingSideChannelTest(pairsOf(rounds, (r) => [r.control, r.fresh]), opts);
  out.note(`timing, ${a.name} control vs a fresh prefix (cache effect): ${describeTiming(same)}`);
  out.note(`timing, ${b.name} on ${a.name}'s prefix vs a fresh one (side channel): ${describeTiming(cross)}`);
  let timingShared = cross.detected;
  if (cross.detected && retest !== undefined) {
    const again = crossTest(retest, opts);
    out.note(`timing re-test, ${b.name} on ${a.name}'s prefix vs a fresh one: ${describeTiming(again)}${again.detected ? ': confirmed' : ': not confirmed, and cached tokens show no reuse for ' + b.name + ', so no timing finding'}`);
    timingShared = again.detected;
  }
  if (timingShared) {
    const first = rounds.find((r) => okSent(r.plant) && okSent(r.reader));
    if (pair.declared) out.findings.push(timingFinding(ctx, pair, cross, first));
    else if (shared.length === 0) out.findings.push(timingFinding(ctx, pair, cross, first, 'cache-salt-ignored'));
  }

  // --- Is there a prefix cache at all? An exact same-tenant re-send decides (prefix-reuse.ts).
  const byTokens = reuseByCachedTokens(rounds.map((r) => ({ first: cachedOf(r.plant), resend: okSent(r.plant) ? cachedOf(r.control) : undefined })));
  const controlReuse = tokensShowReuse || same.detected;
  let verdict: PrefixReuseVerdict = { reuse: 'unknown', evidence: byTokens.evidence, by: PREFIX_ISOLATION };
  if (controlReuse) verdict = { reuse: 'shown', evidence: tokensShowReuse ? byTokens.evidence : `same-tenant timing control: ${describeTiming(same)}`, by: PREFIX_ISOLATION };
  else if (byTokens.reuse === 'none') verdict = { reuse: 'none', evidence: `${byTokens.evidence}; timing control: ${describeTiming(same)}`, by: PREFIX_ISOLATION };
  else if (!reported && same.decidable && same.pairs >= UNREPORTED_TIMING_PAIRS) {
    verdict = { reuse: 'none', evidence: `cached_tokens not reported; the escalated same-tenant timing control showed no reuse effect: ${describeTiming(same)}`, by: PREFIX_ISOLATION };
  }
  recordReuse(ctx.prefixReuse, verdict);
  if (verdict.reuse === 'none' && out.findings.length === 0) {
    out.note(notApplicableNote(verdict));
    return out.finish('not-applicable');
  }
  // Synthetic identities sharing the cache: the endpoint ignores cache_salt (an info finding). No boundary was
  // declared between them, so there is no tenant isolation here to establish.
  if (!pair.declared && out.findings.some((f) => f.kind === 'cache-salt-ignored')) {
    out.note(`not applicable: no tenant boundary this endpoint honours was declared (${a.name} and ${b.name} differ only by cache_salt, which it ignores); configure tenants to have one checked`);
    return out.finish('not-applicable');
  }

  // --- Outcome.
  const reasons: string[] = [];
  if (!controlReuse) {
    reasons.push(
      controls.length > 0
        ? `the same-tenant control showed no reuse (cached_tokens above baseline in ${controlHits.length}/${controls.length} rounds, no timing effect), too few answered re-sends to call caching off, so a miss for ${b.name} proves nothing (vLLM PR #53347)`
        : `cached_tokens are not reported and ${a.name}'s control showed no timing effect at the test's power: reuse is unobservable, so a miss for ${b.name} proves nothing (vLLM PR #53347)`,
    );
  }
  // With trustworthy cached tokens B's count decides; otherwise only the timing test can speak for B.
  const bChecked = tokensShowReuse ? vouched.length > 0 : same.detected && cross.decidable;
  if (controlReuse && !bChecked) reasons.push(`${b.name}'s reuse could not be observed (no cached_tokens on its reads in a round whose control hit, and no timing power)`);
  const minPairs = minPairsFor(opts.alpha);
  if (!cross.decidable) reasons.push(`the timing test did not run: ${crossPairs.length} usable pair(s), ${minPairs} needed to reach alpha ${opts.alpha}`);
  for (const r of reasons) out.note(r);
  return out.finish(reasons.length === 0 ? 'pass' : 'inconclusive');
}

function timingFinding(ctx: ScenarioContext, pair: TenantPair, d: TimingDecision, round: Round | undefined, kind: 'prefix-timing-side-channel' | 'cache-salt-ignored' = 'prefix-timing-side-channel'): Finding {
  const plant = round?.plant;
  const reader = round?.reader;
  return makeFinding(
    kind,
    PREFIX_ISOLATION,
    {
      match: `${pair.b.name}'s time to first token on ${pair.a.name}'s prefix was ${Math.round(d.effect * 100)}% shorter in median (p = ${d.pValue.toPrecision(2)})`,
      ...(plant !== undefined ? { planted: { runId: ctx.runId, requestId: plant.ex.requestId, role: plant.ex.record.role, tenant: pair.a.name, at: plant.at } } : {}),
      ...(reader !== undefined
        ? { read: { requestId: reader.ex.requestId, role: reader.ex.record.role, tenant: pair.b.name, ...(reader.ex.result.status !== undefined ? { status: reader.ex.result.status } : {}) } }
        : {}),
      facts: {
        test: d.test,
        pairs: d.pairs,
        pValue: d.pValue,
        alpha: d.alpha,
        effect: round3(d.effect),
        minEffect: d.minEffect,
        medianCachedMs: round3(d.medianCachedMs),
        medianFreshMs: round3(d.medianFreshMs),
        saltsDiffer: pair.saltsDiffer,
        keysDiffer: pair.keysDiffer,
        syntheticTenants: pair.synthetic,
      },
    },
    d.pValue,
  );
}

function describeTiming(d: TimingDecision): string {
  if (d.pairs === 0) return 'no usable pairs';
  return (
    `${d.pairs} pairs, median ${d.medianCachedMs.toFixed(1)} vs ${d.medianFreshMs.toFixed(1)} ms (effect ${Math.round(d.effect * 100)}%, floor ${Math.round(d.minEffect * 100)}%), ` +
    `p = ${d.pValue.toPrecision(2)} at alpha ${d.alpha}${d.decidable ? '' : ' (too few pairs to decide)'}: ${d.detected ? 'effect' : 'no effect'}`
  );
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
