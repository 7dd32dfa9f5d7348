/**
 * The reuse measurement prefix-churn and prefix-collision run when their own re-sends showed no reuse and
 * the cycle has no verdict yet (a `serve` cycle runs each scenario on its own): the same evidence
 * prefix-isolation gathers, for one tenant. Each round, tenant A plants a fresh prefix of registered markers,
 * then, in random order: the exact prefix again with another suffix (the re-send), a fresh prefix of the
 * same length (the timing baseline) and the suffix alone (what a full hit leaves to prefill). Judged by
 * prefix-reuse.ts's `judgeReuse`, so no scenario concludes "no prefix cache" on less than that.
 */
import { randomInt } from 'node:crypto';
import type { PairedSample } from '../stats.js';
import type { ScenarioContext, Tenant } from './context.js';
import { judgeReuse, type PrefixReuseVerdict } from './prefix-reuse.js';
import { MIN_PREFIX_MARKERS, PrefixSender, prefixMarkerCount, type Sent } from './prefix-sender.js';
import type { ResultBuilder } from './result-builder.js';

/** Rounds and prefix length: prefix-isolation's escalated test (a long prefix makes a hit a large share of the first token's time). */
const ROUNDS = 24;
const PREFIX_TOKENS = 2048;

interface Round {
  plant?: Sent;
  control?: Sent;
  fresh?: Sent;
  short?: Sent;
}

export async function measureReuse(ctx: ScenarioContext, out: ResultBuilder, tenant: Tenant, by: string): Promise<PrefixReuseVerdict> {
  const alpha = ctx.tuning.timingAlpha ?? 0.001;
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const markers = await prefixMarkerCount(ctx, Math.max(PREFIX_TOKENS, ctx.tuning.prefixTokens ?? 0), maxTokens);
  if (markers.count < MIN_PREFIX_MARKERS) return { reuse: 'unknown', evidence: 'the context limit leaves no room for a prefix several pages long', by };
  out.note(`measuring prefix reuse (${ROUNDS} rounds: an exact re-send, a fresh prefix and the suffix alone; ${markers.note})`);
  const sender = new PrefixSender(ctx, out, maxTokens);
  const rounds: Round[] = [];
  for (let i = 0; i < ROUNDS && !ctx.signal.aborted; i++) {
    const round: Round = {};
    rounds.push(round);
    const planted = sender.reserve(tenant, 'reuse-planter', markers.count);
    const fresh = sender.reserve(tenant, 'reuse-fresh', markers.count);
    const prefix = await sender.send(tenant, 'reuse-planter', planted.markers, planted.requestId);
    if (prefix === undefined) break;
    round.plant = prefix.sent;
    if (prefix.sent.ex.result.transport !== 'ok') continue;
    const steps: Array<() => Promise<void>> = [
      async () => void (round.control = (await sender.send(tenant, 'reuse-control', prefix.markers))?.sent),
      async () => void (round.fresh = (await sender.send(tenant, 'reuse-fresh', fresh.markers, fresh.requestId))?.sent),
      async () => void (round.short = (await sender.send(tenant, 'reuse-short', []))?.sent),
    ];
    for (let k = steps.length - 1; k > 0; k--) {
      const j = randomInt(k + 1);
      [steps[k], steps[j]] = [steps[j]!, steps[k]!];
    }
    for (const step of steps) await step();
  }
  const ok = (s: Sent | undefined): s is Sent => s !== undefined && s.ex.result.transport === 'ok';
  const cached = (s: Sent | undefined): number | undefined => (ok(s) ? s.ex.result.usage?.cachedTokens : undefined);
  const pairs = (pick: (r: Round) => [Sent | undefined, Sent | undefined]): PairedSample[] =>
    rounds.flatMap((r) => {
      const [hit, miss] = pick(r);
      const c = ok(hit) ? hit.ex.result.ttftMs : undefined;
      const f = ok(miss) ? miss.ex.result.ttftMs : undefined;
      return c !== undefined && f !== undefined ? [{ cached: c, fresh: f }] : [];
    });
  return judgeReuse(
    {
      counters: rounds.map((r) => ({ first: cached(r.plant), resend: ok(r.plant) ? cached(r.control) : undefined })),
      control: pairs((r) => [r.control, r.fresh]),
      hit: pairs((r) => [r.short, r.fresh]),
      alpha,
    },
    `${by}'s reuse measurement`,
  );
}
