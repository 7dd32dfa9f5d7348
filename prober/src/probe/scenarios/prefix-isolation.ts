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
 *     fresh   — B sends a new prefix of the same length that nobody sent (the timing baseline);
 *     short   — B sends a suffix alone (fresh vs short: what a full hit on the prefix would save).
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
 * - Is there a prefix cache at all? One judgement for the three prefix scenarios (prefix-reuse.ts): counters
 *   and a timing test powered to see what a hit saves. Counters that timing contradicts are not trusted.
 * - B's timing test must be powered to see half the saving a hit gives (A's own, else a full hit's), even
 *   where counters speak for B: a tier the counters omit shows only there. When the first rounds are too
 *   weak for either test, 24 rounds over 4x longer prefixes are played once and judged on their own.
 * - Outcome: fail on any finding above info; not-applicable only on positive evidence of absence
 *   (prefix-reuse.ts), or when only synthetic identities were compared and they share (cache-salt-ignored);
 *   inconclusive with reason `power` when absence could not be shown or B's timing could not see a hit;
 *   pass only when reuse was shown, B showed none by trusted counters or by a powered timing test, and the
 *   timing test ran; otherwise inconclusive with the reasons.
 */
import { randomInt } from 'node:crypto';
import { makeFinding, type Finding } from '../findings.js';
import type { ScenarioResult } from '../result.js';
import { minPairsFor, timingSideChannelTest, type PairedSample, type TimingDecision } from '../stats.js';
import { detectableSaving, hitSaving, STATED_POWER } from '../timing-power.js';
import type { ScenarioContext } from './context.js';
import { describeTiming, HIT_SHARE, judgeReuse, notApplicableNote, recordReuse, type PrefixReuseVerdict } from './prefix-reuse.js';
import { MIN_PREFIX_MARKERS, PrefixSender, prefixMarkerCount, type Sent } from './prefix-sender.js';
import { ResultBuilder } from './result-builder.js';
import { sameIdentity, tenantPair, type TenantPair } from './tenant-pair.js';

export const PREFIX_ISOLATION = 'prefix-isolation';

const DEFAULT_TIMING_PAIRS = 12;
const DEFAULT_PREFIX_TOKENS = 512;
/**
 * Where no response reports cached tokens (vLLM without --enable-prompt-tokens-details, many proxies), or
 * the first rounds' timing test was too weak to see what a hit saves (a slow or noisy front), the timing
 * test is the judge, and it gets more pairs over longer prefixes (a longer prefix is a larger share of the
 * first token's time). On the bundled engine, 12 pairs over 512-token prefixes caught a shared cache in 2
 * of 5 cycles (effect about 25%); 24 pairs over 2048-token prefixes in 5 of 5 (effect about 48%, p <= 2e-5).
 * Only then is the extra cost paid; an explicit timingPairs or prefixTokens is kept as given.
 */
const ESCALATED_TIMING_PAIRS = 24;
const ESCALATED_PREFIX_FACTOR = 4;
/**
 * Same-tenant controls served from cache (cached tokens above the baseline) that show the cache reuses
 * prefixes. Under load (three replicas probed on two busy cores, other scenarios filling the pool) the
 * bundled engine's controls hit in only 4-5 of 12 rounds: the prefix was evicted before the re-send.
 */
const CONTROL_HITS_SHOWING_REUSE = 3;
/** Rounds of cached-token sharing between synthetic identities after which the scenario stops (cache_salt ignored). */
const MOOT_AFTER = 2;

interface Round {
  plant?: Sent;
  control?: Sent;
  reader?: Sent;
  fresh?: Sent;
  /** B's suffix alone: what a full hit on the prefix leaves to prefill (fresh vs short = a hit's saving). */
  short?: Sent;
}

function reportsCachedTokens(round: Round): boolean {
  return [round.plant, round.control, round.reader, round.fresh].some((s) => s?.ex.result.transport === 'ok' && s.ex.result.usage?.cachedTokens !== undefined);
}

function answeredAny(round: Round): boolean {
  return [round.plant, round.control, round.reader, round.fresh].some((s) => s?.ex.result.transport === 'ok');
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
  const tunable = ctx.tuning.timingPairs === undefined && ctx.tuning.prefixTokens === undefined;
  let escalated = false;
  const escalate = async (why: string): Promise<void> => {
    escalated = true;
    const longer = await prefixMarkerCount(ctx, ESCALATED_PREFIX_FACTOR * (ctx.tuning.prefixTokens ?? DEFAULT_PREFIX_TOKENS), maxTokens);
    rounds = ESCALATED_TIMING_PAIRS;
    prefixMarkers = Math.max(prefixMarkers, longer.count);
    out.note(`${why}: timing speaks, so ${rounds} rounds and from now on ${longer.note}`);
  };
  /**
   * Plays rounds into `done`: `planned` of them, and up to as many again while too few timing pairs were
   * answered to decide (an endpoint that fails some requests, e.g. llama-server on noise output, still gets
   * judged; an error is never read as an answer).
   */
  const play = async (done: Round[], planned: number, escalateIfUnreported: boolean): Promise<void> => {
    // Once synthetic identities showed in MOOT_AFTER rounds, by cached tokens, that the endpoint ignores
    // cache_salt, there is no declared boundary left to test and the timing test has nothing to decide: stop.
    const moot = (): boolean => !pair.declared && tokenFacts(done).shared.length >= MOOT_AFTER;
    let checked = false;
    for (let i = 0; !ctx.signal.aborted && !moot() && (i < planned || (i < 2 * planned && usablePairs(done) < needed)); i++) {
      // Decided on the first round with an answer: an unanswered round says nothing about cached tokens.
      const firstAnswered = escalateIfUnreported && !checked ? done.find(answeredAny) : undefined;
      if (firstAnswered !== undefined) checked = true;
      if (firstAnswered !== undefined && tunable && !escalated && !reportsCachedTokens(firstAnswered)) {
        await escalate('cached_tokens not reported in the first answered round');
        planned = rounds;
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
        async () => void (round.short = (await sender.send(pair.b, 'prefix-short', []))?.sent),
      ];
      // Random order within the round: neither side of a timing pair is systematically first.
      for (let k = steps.length - 1; k > 0; k--) {
        const j = randomInt(k + 1);
        [steps[k], steps[j]] = [steps[j]!, steps[k]!];
      }
      for (const step of steps) await step();
    }
  };

  let done: Round[] = [];
  await play(done, rounds, true);
  noteRounds(out, ctx, pair, done, rounds, needed);
  // Too weak to see what a hit saves (a slow or noisy front), or B unjudgeable by timing: once, longer
  // prefixes and more pairs, judged on their own.
  const opts = { alpha, minEffect };
  if (!ctx.signal.aborted && tunable && !escalated && out.findings.length === 0) {
    const a = analyse(done, opts);
    // B's timing must be able to see a hit even where counters speak for B: a tier the counters do not
    // include (a host tier, a second cache) shows only there.
    const weak = a.verdict.reason === 'power' ? 'the timing test was too weak to see what a hit saves' : a.verdict.reuse === 'shown' && !a.bPowered && !a.cross.detected ? `${pair.b.name}'s timing test was too weak to see the saving a hit gives` : undefined;
    if (weak !== undefined) {
      out.note(`first ${done.length} round(s): ${a.verdict.evidence}`);
      await escalate(weak);
      done = [];
      await play(done, rounds, false);
      noteRounds(out, ctx, pair, done, rounds, needed);
    }
  }

  // A timing effect for B that B's own cached tokens contradict (reported, reuse shown for A, none for B) is
  // not raised on one test: earlier traffic of the run (late batches of aborted requests, leftover load) can
  // skew one window of pairs. A second, independent set of rounds must confirm it.
  let retest: Round[] | undefined;
  const first = tokenFacts(done);
  if (!ctx.signal.aborted && first.contradicts && crossTest(done, opts).detected) {
    out.note(`timing effect for ${pair.b.name} although its cached tokens show no reuse: re-testing with ${rounds} fresh rounds before raising it`);
    retest = [];
    await play(retest, rounds, false);
  }
  return judge(ctx, out, pair, done, opts, retest);
}

function noteRounds(out: ResultBuilder, ctx: ScenarioContext, pair: TenantPair, done: Round[], rounds: number, needed: number): void {
  if (done.length < rounds && !ctx.signal.aborted && !pair.declared && tokenFacts(done).shared.length >= MOOT_AFTER) {
    out.note(`stopped after ${done.length} round(s): cached tokens show the endpoint ignores cache_salt, and no other boundary was declared`);
  } else if (done.length < rounds) out.note(`stopped after ${done.length} of ${rounds} rounds (${ctx.signal.aborted ? 'cycle stopped' : 'token budget exhausted'})`);
  else if (done.length > rounds) out.note(`${done.length - rounds} extra round(s): requests went unanswered and the timing test needs ${needed} answered pairs`);
}

function usablePairs(rounds: readonly Round[]): number {
  return rounds.filter((r) => r.reader?.ex.result.transport === 'ok' && r.fresh?.ex.result.transport === 'ok' && r.reader.ex.result.ttftMs !== undefined && r.fresh.ex.result.ttftMs !== undefined).length;
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

/**
 * The rounds' evidence: the one reuse judgement (prefix-reuse.ts), whether cached tokens can be trusted to
 * speak for B, and whether B's timing test could have seen the saving A's own hits give.
 */
function analyse(rounds: readonly Round[], opts: { alpha: number; minEffect: number }) {
  const facts = tokenFacts(rounds);
  const verdict = judgeReuse(
    {
      counters: rounds.map((r) => ({ first: cachedOf(r.plant), resend: okSent(r.plant) ? cachedOf(r.control) : undefined })),
      control: pairsOf(rounds, (r) => [r.control, r.fresh]),
      hit: pairsOf(rounds, (r) => [r.short, r.fresh]),
      alpha: opts.alpha,
    },
    PREFIX_ISOLATION,
  );
  const crossPairs = pairsOf(rounds, (r) => [r.reader, r.fresh]);
  const cross = timingSideChannelTest(crossPairs, opts);
  const same = timingSideChannelTest(pairsOf(rounds, (r) => [r.control, r.fresh]), opts);
  // Counters speak for B only when they showed A's own reuse and timing did not contradict them.
  const countersSpeak = facts.tokensShowReuse && verdict.countersHideHits !== true;
  const bByTiming = verdict.reuse === 'shown' && !countersSpeak;
  // B's test must be able to see a share of what a hit saves: A's own hits where the control measured them,
  // else a full hit (a fresh prefix against the suffix alone).
  const full = hitSaving(pairsOf(rounds, (r) => [r.short, r.fresh])) ?? 0;
  const bNeeds = HIT_SHARE * (same.significant && same.effect > 0 ? same.effect : full);
  const bDetectable = detectableSaving(crossPairs, opts.alpha);
  const bPowered = bDetectable.saving !== undefined && bNeeds > 0 && bDetectable.saving <= bNeeds;
  return { facts, verdict, cross, crossPairs, same, countersSpeak, bByTiming, bNeeds, bDetectable, bPowered };
}

function judge(ctx: ScenarioContext, out: ResultBuilder, pair: TenantPair, rounds: Round[], opts: { alpha: number; minEffect: number }, retest?: Round[]): ScenarioResult {
  const { a, b } = pair;
  const sent = rounds.flatMap((r) => [r.plant, r.control, r.reader, r.fresh, r.short]).filter((s): s is Sent => s !== undefined);
  const answered = sent.filter(okSent).length;
  out.note(`${rounds.length} round(s): ${answered}/${sent.length} requests answered`);
  const an = analyse(rounds, opts);
  const { verdict, cross, crossPairs, same } = an;

  // --- Cached tokens.
  const { baselineA, baselineB, controls, controlHits, readers, vouched, shared } = an.facts;
  const reported = sent.some((s) => okSent(s) && s.ex.result.usage?.cachedTokens !== undefined);
  if (controls.length > 0) {
    out.note(
      `cached_tokens: ${a.name} control above its baseline ${baselineA} in ${controlHits.length}/${controls.length} round(s) (max ${maxOf(controls.map((r) => cachedOf(r.control))) ?? 0}); ` +
        `${b.name} on ${a.name}'s prefix above its baseline ${baselineB} in ${shared.length}/${readers.length}`,
    );
  } else {
    out.note(reported ? 'cached_tokens reported, but on no answered control' : 'cached_tokens not reported: reuse can only be judged by timing');
  }
  if (verdict.countersHideHits === true) out.note('usage counters hide cache hits: the same-tenant re-send was served faster than a fresh prefix while its cached tokens showed none; judged on timing');
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

  // --- Is there a prefix cache at all? One judgement for the three prefix scenarios (prefix-reuse.ts).
  out.note(`prefix reuse: ${verdict.reuse}: ${verdict.evidence}`);
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
  if (verdict.reuse !== 'shown') {
    if (verdict.reason === 'power') out.reason = 'power';
    reasons.push(
      verdict.reason === 'power'
        ? `prefix reuse could be neither shown nor ruled out: ${verdict.evidence}; a miss for ${b.name} proves nothing (vLLM PR #53347)`
        : controls.length > 0
          ? `the same-tenant control showed no reuse (cached_tokens above baseline in ${controlHits.length}/${controls.length} rounds, no timing effect), too few answered re-sends to call caching off, so a miss for ${b.name} proves nothing (vLLM PR #53347)`
          : `cached_tokens are not reported and ${a.name}'s control showed no timing effect: reuse is unobservable, so a miss for ${b.name} proves nothing (vLLM PR #53347)`,
    );
  } else if (an.countersSpeak) {
    if (vouched.length === 0) reasons.push(`${b.name}'s reuse could not be observed (no cached_tokens on its reads in a round whose control hit)`);
    else if (!cross.significant) {
      out.note(
        an.bPowered
          ? `${b.name}: no cached tokens and no timing saving on ${a.name}'s prefix (a saving >= ${Math.round(an.bDetectable.saving! * 100)}% would have shown with probability ${STATED_POWER})`
          : `${b.name}: judged by cached tokens; its timing test could not see a saving below ${an.bDetectable.saving === undefined ? '90%' : `${Math.round(an.bDetectable.saving * 100)}%`} (a tier the counters do not include would show only there)`,
      );
    }
  } else if (cross.significant && !timingShared) {
    reasons.push(`${b.name}'s first token on ${a.name}'s prefix was ${Math.round(cross.effect * 100)}% sooner (p = ${cross.pValue.toPrecision(2)}), below the finding's floor of ${Math.round(opts.minEffect * 100)}%: sharing neither shown nor ruled out`);
  } else if (!cross.significant && !an.bPowered) {
    out.reason = 'power';
    reasons.push(
      `${b.name} is judged on timing (${verdict.countersHideHits === true ? 'usage counters hide cache hits' : 'cached tokens not reported'}), and its test was underpowered: ${a.name}'s hits saved ${Math.round(Math.max(0, same.effect) * 100)}%, ` +
        `a saving of ${Math.round(an.bNeeds * 100)}% had to be visible, and only ${an.bDetectable.saving === undefined ? 'none up to 90%' : `${Math.round(an.bDetectable.saving * 100)}%`} would have shown with probability ${STATED_POWER}`,
    );
  } else if (!cross.significant) {
    out.note(`${b.name} judged on timing: no saving on ${a.name}'s prefix, and a saving >= ${Math.round(an.bDetectable.saving! * 100)}% would have shown with probability ${STATED_POWER}`);
  }
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

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
