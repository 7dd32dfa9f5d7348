/**
 * overlimit-handoff: the incident. Plant markers in prompts that fill KV pages and let them finish; then
 * send prompts the endpoint must reject — between the KV pool and the context limit where the pool is
 * exposed and smaller, and beyond the context limit — each ending with the marker cue.
 *
 * Judged by what happened, never by the absence of an error: a clean rejection is a 4xx with an error
 * body and no generated text. A 200 with generated text on a prompt that had to be rejected is
 * `rejection-not-enforced`, marker or not (on a busy endpoint the stale pages it read are more likely other
 * customers' than ours). Any foreign marker anywhere is `cross-request-leak`. 5xx, timeouts, resets and
 * unrecognised 4xx (auth, rate limits) leave the scenario inconclusive.
 *
 * Where the pool is not exposed, a sweep of sizes below the context limit (within the budget) stands in
 * for "between": those prompts are legal, so a 200 is expected and only their markers are judged.
 */
import { overlimitPrompt, promptRef, repetitionsFor, tokensFor } from '../prompts.js';
import type { ScenarioResult } from '../result.js';
import { tokenLine } from './calibration.js';
import type { TokenLine } from '../prompts.js';
import type { ScenarioContext } from './context.js';
import type { Exchange } from './exchange.js';
import { exchange } from './exchange.js';
import { initialSizing, plant } from './planting.js';
import { ResultBuilder } from './result-builder.js';
import { judgeRejection, type RejectionVerdict } from './rejection-verdict.js';

export const OVERLIMIT_HANDOFF = 'overlimit-handoff';

interface LimitProbe {
  label: 'between-pool-and-context' | 'beyond-context' | `sweep-${number}`;
  tokens: number;
  mustReject: boolean;
}

/**
 * What both over-limit scenarios need before sending anything: a reachable endpoint, an advertised context
 * limit and a calibrated token line. Undefined (with the reason noted) when any is missing.
 */
export async function overLimitSizing(ctx: ScenarioContext, out: ResultBuilder): Promise<TokenLine | undefined> {
  if (!ctx.introspection.reachable) {
    out.note('endpoint unreachable');
    return undefined;
  }
  if (ctx.introspection.contextTokens === undefined) {
    out.note('the endpoint advertises no context limit: over-limit prompts cannot be sized');
    return undefined;
  }
  const line = await tokenLine(ctx, (ex) => out.add(ex));
  if (line === undefined) out.note('could not calibrate prompt sizes (no /tokenize and no usage.prompt_tokens)');
  return line;
}

export async function overlimitHandoff(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(OVERLIMIT_HANDOFF, ctx);
  const { contextTokens, poolTokens } = ctx.introspection;
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const line = await overLimitSizing(ctx, out);
  if (line === undefined || contextTokens === undefined) return out.finish('inconclusive');
  out.note(`calibrated via ${line.via}: ${line.perRepetition.toFixed(2)} tokens per filler paragraph + ${line.overhead.toFixed(0)}`);

  // Plant: enough marker-dense pages that the pages an over-limit request inherits are likely ours.
  const planterTokens = ctx.tuning.planterTokens ?? defaultPlanterTokens(poolTokens, contextTokens);
  const plantTokens = ctx.tuning.plantTokens ?? poolTokens ?? planterTokens * 4;
  const sizing = initialSizing();
  let planted = 0;
  let plantersOk = 0;
  for (let sent = 0; sent < plantTokens && !ctx.signal.aborted; sent += planterTokens) {
    const { ex } = await plant(ctx, sizing, { tokens: Math.min(planterTokens, plantTokens - sent), maxTokens: 8 });
    if (out.add(ex) === undefined) break;
    planted += ex!.record.usagePromptTokens ?? ex!.record.promptTokens ?? 0;
    if (ex!.result.transport === 'ok') plantersOk++;
  }
  out.note(`planted ${plantersOk} prompt(s), about ${planted} tokens of markers`);

  const probes = limitProbes(contextTokens, poolTokens, maxTokens, ctx.tuning.sweep ?? [0.5, 0.75, 0.95]);
  let undecided = 0;
  let rejected = 0;
  for (const probe of probes) {
    const reps = repetitionsFor(line, probe.tokens);
    const ex = out.add(
      await exchange(ctx, { role: probe.mustReject ? 'overlimit' : 'sweep', prompt: overlimitPrompt(reps, promptRef(ctx.runId)), promptTokens: tokensFor(line, reps), maxTokens, stream: true }),
    );
    if (ex === undefined) {
      out.note(`${probe.label}: not sent (${ctx.signal.aborted ? 'cycle stopped' : 'token budget exhausted'})`);
      undecided++;
      continue;
    }
    const verdict = judge(probe, ex, contextTokens, poolTokens);
    out.note(`${probe.label} (~${tokensFor(line, reps)} tokens): ${verdict.note}`);
    if (verdict.finding) out.findings.push(verdict.finding);
    if (verdict.state === 'undecided') undecided++;
    if (verdict.state === 'rejected') rejected++;
  }

  if (plantersOk === 0) {
    out.note('no planter was accepted: nothing to leak, isolation not established');
    return out.finish('inconclusive');
  }
  if (undecided > 0) return out.finish('inconclusive');
  if (rejected === 0) out.note('no prompt that had to be rejected was sent');
  return out.finish(rejected > 0 ? 'pass' : 'inconclusive');
}

function defaultPlanterTokens(pool: number | undefined, context: number): number {
  return Math.max(256, Math.min(4096, Math.floor((pool ?? context) / 4)));
}

export function limitProbes(context: number, pool: number | undefined, maxTokens: number, sweep: number[]): LimitProbe[] {
  const margin = Math.max(16, Math.ceil(context * 0.02));
  const probes: LimitProbe[] = [];
  if (pool !== undefined) {
    const lo = pool + margin;
    const hi = context - maxTokens - margin;
    if (lo < hi) probes.push({ label: 'between-pool-and-context', tokens: Math.floor((lo + hi) / 2), mustReject: true });
  } else {
    for (const f of sweep) probes.push({ label: `sweep-${f}`, tokens: Math.floor(context * f) - maxTokens, mustReject: false });
  }
  probes.push({ label: 'beyond-context', tokens: context + margin, mustReject: true });
  return probes;
}

function judge(probe: LimitProbe, ex: Exchange, context: number, pool: number | undefined): RejectionVerdict {
  return judgeRejection(OVERLIMIT_HANDOFF, probe.label, probe.mustReject, ex, {
    probe: probe.label,
    promptTokensEstimated: probe.tokens,
    contextTokens: context,
    poolTokens: pool ?? null,
  });
}
