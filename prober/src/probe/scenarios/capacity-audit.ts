/**
 * capacity-audit: is the KV pool smaller than the context limit the endpoint advertises? Prompts between
 * the two are the ones that reached the incident's path. Read from what the endpoint exposes (SGLang
 * /get_server_info, vLLM /metrics cache config, llama.cpp /props); when either figure is missing the audit
 * is inconclusive, never a pass.
 */
import { makeFinding } from '../findings.js';
import type { ScenarioResult } from '../result.js';
import type { ScenarioContext } from './context.js';
import { ResultBuilder } from './result-builder.js';

export const CAPACITY_AUDIT = 'capacity-audit';

export async function capacityAudit(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(CAPACITY_AUDIT, ctx);
  const { contextTokens, poolTokens, maxInputTokens } = ctx.introspection;
  if (!ctx.introspection.reachable) {
    out.note('endpoint unreachable: capacity unknown');
    return out.finish('inconclusive');
  }
  if (contextTokens === undefined || poolTokens === undefined) {
    out.note(`not exposed: ${contextTokens === undefined ? 'context limit' : ''}${contextTokens === undefined && poolTokens === undefined ? ' and ' : ''}${poolTokens === undefined ? 'KV pool capacity' : ''}`);
    return out.finish('inconclusive');
  }
  if (poolTokens < contextTokens) {
    out.findings.push(
      makeFinding('pool-below-context', CAPACITY_AUDIT, {
        match: `pool ${poolTokens} < context ${contextTokens}`,
        facts: {
          contextTokens,
          poolTokens,
          ratio: Math.round((poolTokens / contextTokens) * 1000) / 1000,
          ...(maxInputTokens !== undefined ? { maxInputTokens } : {}),
          dialect: ctx.introspection.dialect,
        },
      }),
    );
    out.note(`KV pool ${poolTokens} tokens is below the advertised context ${contextTokens}`);
  } else {
    out.note(`KV pool ${poolTokens} tokens covers the advertised context ${contextTokens}`);
  }
  return out.finish('pass');
}
