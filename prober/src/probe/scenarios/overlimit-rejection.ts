/**
 * overlimit-rejection: the cheap tier of overlimit-handoff. It sends only the prompts the endpoint must
 * reject (between the KV pool and the context limit where the pool is exposed and smaller, and beyond the
 * context limit), with no planting and no legal-size sweep. A clean rejection costs the endpoint almost
 * nothing, so this can run on every replica every few minutes, while the planted overlimit-handoff runs
 * now and then (schedule.scenarios).
 *
 * It judges only the rejection: a 200 with generated text on a must-reject prompt is
 * `rejection-not-enforced` (the incident's precondition), and a foreign marker in any response (from an
 * earlier planted run) is still `cross-request-leak`. Its pass means "every over-limit prompt was cleanly
 * rejected", not "no leak": only overlimit-handoff, with pages planted, can show the leak itself.
 */
import { overlimitPrompt, promptRef, repetitionsFor, tokensFor } from '../prompts.js';
import type { ScenarioResult } from '../result.js';
import type { ScenarioContext } from './context.js';
import { exchange } from './exchange.js';
import { limitProbes, overLimitSizing } from './overlimit-handoff.js';
import { ResultBuilder } from './result-builder.js';
import { judgeRejection } from './rejection-verdict.js';

export const OVERLIMIT_REJECTION = 'overlimit-rejection';

export async function overlimitRejection(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(OVERLIMIT_REJECTION, ctx);
  const { contextTokens, poolTokens } = ctx.introspection;
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const line = await overLimitSizing(ctx, out);
  if (line === undefined || contextTokens === undefined) return out.finish('inconclusive');
  let undecided = 0;
  let rejected = 0;
  for (const probe of limitProbes(contextTokens, poolTokens, maxTokens, []).filter((p) => p.mustReject)) {
    const reps = repetitionsFor(line, probe.tokens);
    const ex = out.add(await exchange(ctx, { role: 'overlimit', prompt: overlimitPrompt(reps, promptRef(ctx.runId)), promptTokens: tokensFor(line, reps), maxTokens, stream: true }));
    if (ex === undefined) {
      out.note(`${probe.label}: not sent (${ctx.signal.aborted ? 'cycle stopped' : 'token budget exhausted'})`);
      undecided++;
      continue;
    }
    const verdict = judgeRejection(OVERLIMIT_REJECTION, probe.label, true, ex, {
      probe: probe.label, promptTokensEstimated: probe.tokens, contextTokens, poolTokens: poolTokens ?? null,
    });
    out.note(`${probe.label} (~${tokensFor(line, reps)} tokens): ${verdict.note}`);
    if (verdict.finding) out.findings.push(verdict.finding);
    if (verdict.state === 'undecided') undecided++;
    if (verdict.state === 'rejected') rejected++;
  }
  if (undecided > 0 || rejected === 0) return out.finish('inconclusive');
  return out.finish('pass');
}
