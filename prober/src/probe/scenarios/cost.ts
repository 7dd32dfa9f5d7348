/**
 * What one run of each scenario is expected to cost a healthy endpoint, from the sizes it advertises: tokens
 * sent (prompt tokens uploaded, what budgets count) and tokens computed (prompt tokens the endpoint
 * prefills plus tokens it generates; a prompt it rejects at admission costs it nothing to compute). Each
 * formula follows the scenario's own sizing (scenarios/*.ts) and counts its dominant requests; a test holds
 * them to bench/full-scale.json (measured at scale 1 on the bundled engine). `kvcanary run` sizes its default
 * budget from these; serve its daily cost and its derived hourly budget (service/scenario-cost.ts).
 */
import type { ProbeTuning } from './context.js';
import { limitProbes } from './overlimit-handoff.js';
import { DEFAULT_INTERLEAVE_WAVES, interleaveSizes } from './interleave-sizing.js';

export interface EndpointSizes {
  contextTokens?: number;
  /** The pool that bounds admission (prefill's in disaggregated serving). */
  poolTokens?: number;
  /** The pool where requests reserve their pages (decode's in disaggregated serving). */
  reservationPoolTokens?: number;
  /** The largest pool the endpoint exposes. */
  largestPoolTokens?: number;
  pageSize?: number;
}

export interface TokenCost {
  sent: number;
  computed: number;
}

/** Race windows a pass needs (r = 0.1 at c = 0.95). */
const RACE_WINDOWS = 29;
/** Planter prompts are at most this long (abort-race, concurrent-interleave, overlimit-handoff). */
const PLANTER_CAP = 4096;
/** Tokenizer calibration and the few small requests every planting scenario makes first. */
const CALIBRATION = 2_000;
/**
 * Budgets over the expected cost: a race scenario re-tries windows that did not count (up to twice the
 * windows), a ballast piece that ends is restarted, calibration misses by a few percent.
 */
export const BUDGET_HEADROOM = 1.5;
/**
 * reuse-probe.ts, which prefix-churn and prefix-collision run when their own re-sends show no reuse: 24 rounds
 * of a 2,048-token planted prefix, its re-send and a fresh one (each with a 64-token suffix and up to 48
 * generated), and the suffix alone.
 */
const REUSE_PROBE = 24 * (3 * (2048 + 64 + 48) + 64 + 48);

/** `kvcanary run`'s default budget: what the selected scenarios are expected to send, with headroom; `fallback` when none is priced. */
export function runBudget(scenarios: readonly string[], sizes: EndpointSizes, tuning: ProbeTuning | undefined, fallback: number): number {
  let sent = 0;
  let unpriced = false;
  for (const s of scenarios) {
    const cost = scenarioCost(s, sizes, tuning);
    if (cost === undefined) unpriced = true;
    else sent += cost.sent;
  }
  // A scenario the endpoint's advertised sizes cannot price (none advertised) gets the fallback on top.
  return Math.ceil(sent * BUDGET_HEADROOM) + (unpriced || sent === 0 ? fallback : 0);
}

const clamp = (x: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, x));

function abortRace(s: EndpointSizes, t: ProbeTuning, bound: number, out: number): TokenCost {
  const planter = t.planterTokens ?? clamp(Math.floor(bound / 2), 256, PLANTER_CAP);
  const page = s.pageSize ?? 16;
  const reader = Math.floor(planter / 4);
  const reservation = s.reservationPoolTokens ?? s.largestPoolTokens ?? s.poolTokens;
  const planterReserve = planter + out + page;
  const slack = reservation === undefined ? 0 : Math.max(4 * page, Math.ceil(reservation * 0.02));
  const ballast = reservation === undefined || t.abortBallast === false ? 0 : Math.max(0, reservation - planterReserve - slack);
  const readers = clamp(Math.ceil((planterReserve + slack) / (reader + out)) + 1, 4, 64);
  const windows = t.abortRounds ?? RACE_WINDOWS;
  // The ballast: about half its tokens as prompt, the rest as a generation it holds (and is aborted in); held
  // by generation, a 256-token prompt per piece.
  const ballastPrompt = t.ballastHold === 'generation' ? (ballast > 0 ? 512 : 0) : Math.ceil(ballast / 2);
  const perWindow = planter + readers * reader;
  // A ballast piece that ends is re-sent before the next window. Measured at full scale (bench/full-scale.json,
  // incident): 6.35 M tokens sent for 1.2 M computed, the ballast re-sent about once per piece every three
  // windows, its prompt served from the prefix cache each time. Budgets must hold it; the computed estimate
  // assumes that cache (an endpoint without one computes the re-sends too).
  const resends = ballastPrompt * Math.ceil(windows / 3);
  const sent = CALIBRATION + ballastPrompt + resends + planter + windows * perWindow;
  // Aborted planters compute part of their prompt; readers compute theirs and `out` tokens each.
  const computed = CALIBRATION + ballastPrompt + planter + windows * (planter + readers * (reader + out));
  return { sent, computed };
}

function concurrentInterleave(s: EndpointSizes, t: ProbeTuning, out: number): TokenCost {
  const waves = t.interleaveWaves ?? DEFAULT_INTERLEAVE_WAVES;
  const { planterTokens: planter, readerTokens: reader, ballastTokens } = interleaveSizes(s, t);
  // A window per wave at best; the widths repeat until 29 windows. Over-limit prompts (one a wave at most)
  // only in the first pass, rejected by a healthy endpoint. Half the slots are planters; half the readers are
  // the long reader, half a short one that opens like a planter (counted as a long one here).
  const slotsPerPass = waves.reduce((a, w) => a + w, 0);
  const passes = Math.ceil(RACE_WINDOWS / Math.max(1, waves.length));
  const slots = slotsPerPass * passes;
  const over = s.contextTokens === undefined ? 0 : waves.length * (s.contextTokens + Math.max(16, Math.ceil(s.contextTokens * 0.02)));
  const half = slots / 2;
  // The ballast (interleave-sizing.ts): about half its tokens as prompt (held by generation, a 256-token prompt
  // per piece), prefilled once and held for the run. A piece whose generation ends is re-sent before the next
  // wave, its prompt then served from a prefix cache where there is one (the computed estimate counts it once).
  // Measured at full scale (bench/full-scale.json): 6.84 M sent (remediated), 7.10 M (incident), about six
  // re-sends of the ballast's prompt in a run's 30 waves: budgets hold one every five waves.
  const ballastPrompt = ballastTokens === 0 ? 0 : t.ballastHold === 'generation' ? 512 : Math.ceil(ballastTokens / 2);
  const resends = ballastPrompt * Math.ceil((passes * waves.length) / 5);
  return {
    sent: CALIBRATION + over + ballastPrompt + resends + half * (planter + reader),
    computed: CALIBRATION + ballastPrompt + half * (planter + reader + 2 * out),
  };
}

/** One run's expected cost on a healthy endpoint, or undefined when it depends on a size nobody stated. */
export function scenarioCost(scenario: string, s: EndpointSizes, t: ProbeTuning = {}): TokenCost | undefined {
  const { contextTokens: ctx, poolTokens: pool } = s;
  const bound = Math.min(pool ?? Infinity, ctx ?? Infinity);
  const known = Number.isFinite(bound);
  const out = t.readerMaxTokens ?? 48;
  switch (scenario) {
    case 'capacity-audit':
      return { sent: 0, computed: 0 };
    case 'overlimit-rejection':
      if (ctx === undefined) return undefined;
      return { sent: CALIBRATION + limitProbes(ctx, pool, out, []).filter((p) => p.mustReject).reduce((a, p) => a + p.tokens, 0), computed: CALIBRATION };
    case 'overlimit-handoff': {
      if (ctx === undefined) return undefined;
      const planter = t.planterTokens ?? Math.max(256, Math.min(PLANTER_CAP, Math.floor((pool ?? ctx) / 4)));
      const plant = t.plantTokens ?? pool ?? 4 * planter;
      const probes = limitProbes(ctx, pool, out, t.sweep ?? [0.5, 0.75, 0.95]);
      const admitted = probes.filter((p) => !p.mustReject).reduce((a, p) => a + p.tokens + out, 0);
      return {
        sent: CALIBRATION + plant + probes.reduce((a, p) => a + p.tokens, 0),
        computed: CALIBRATION + plant + Math.ceil(plant / planter) * 8 + admitted,
      };
    }
    case 'abort-race':
      return known ? abortRace(s, t, bound, out) : undefined;
    case 'concurrent-interleave':
      return known ? concurrentInterleave(s, t, out) : undefined;
    case 'prefix-isolation': {
      // Per round (prefix-isolation.ts): A's plant, A's control, B's read, a fresh prefix and the suffix alone;
      // a confirmation set of rounds again; and, where the first timing test is too weak to state absence, once
      // 24 rounds over prefixes 4x longer. Budgets hold the worst case, so a powered test is never cut short.
      const prefix = t.prefixTokens ?? 512;
      const round = (p: number): number => 4 * (p + 64 + out) + 64 + out;
      const sent = CALIBRATION + 2 * (t.timingPairs ?? 12) * round(prefix) + 24 * round(4 * prefix);
      return { sent, computed: sent };
    }
    case 'prefix-collision': {
      const per = (t.prefixTokens ?? 512) + out;
      const sent = CALIBRATION + 4 * per + REUSE_PROBE;
      return { sent, computed: sent };
    }
    case 'prefix-churn': {
      const churnPool = s.largestPoolTokens ?? pool;
      const churn = t.plantTokens ?? (churnPool === undefined ? undefined : Math.ceil(churnPool * 1.05));
      if (churn === undefined) return undefined;
      const rounds = t.churnRounds ?? 2;
      const per = churn + 4 * ((t.prefixTokens ?? 512) + out);
      const sent = CALIBRATION + rounds * per + REUSE_PROBE;
      return { sent, computed: sent };
    }
    default:
      return undefined;
  }
}

