/**
 * capacity-audit: is the KV pool smaller than the context limit the endpoint advertises? Prompts between
 * the two are the ones that reached the incident's path. Read from what the endpoint exposes:
 * - SGLang /get_server_info and vLLM /metrics give a pool in tokens: it must cover the advertised context.
 * - llama.cpp has no shared pool to compare: each slot owns the KV cells it runs in (`-c` split across
 *   `-np` slots, or one unified buffer every slot may use whole with `--kv-unified`), and /slots lists the
 *   context each slot enforces (`n_ctx`); a prompt over it is refused before it is scheduled
 *   (`exceed_context_size_error`). So the structure bounds every slot's context by its KV cache: pass when
 *   no slot's `n_ctx` is below the advertised context (every slot can hold what is advertised), a
 *   `pool-below-context` finding when one is.
 * - Nothing exposed by any dialect: not applicable ("not exposed"); overlimit-handoff judges the same risk
 *   by behaviour. A context limit without a pool, or a pool without a limit, stays inconclusive.
 */
import { makeFinding } from '../findings.js';
import type { ScenarioResult } from '../result.js';
import type { ScenarioContext } from './context.js';
import { ResultBuilder } from './result-builder.js';

export const CAPACITY_AUDIT = 'capacity-audit';

export async function capacityAudit(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(CAPACITY_AUDIT, ctx);
  const { contextTokens, poolTokens, maxInputTokens, slots } = ctx.introspection;
  if (!ctx.introspection.reachable) {
    out.note('endpoint unreachable: capacity unknown');
    return out.finish('inconclusive');
  }
  if (poolTokens === undefined && slots !== undefined) return auditSlots(ctx, out, slots);
  if (poolTokens === undefined && contextTokens === undefined) {
    out.note('not applicable: no KV pool or context limit is exposed by any known dialect (SGLang /get_server_info, vLLM /metrics, llama.cpp /props and /slots); overlimit-handoff judges the same risk by behaviour');
    return out.finish('not-applicable');
  }
  if (poolTokens === undefined) {
    out.note(`not applicable: the KV pool is not exposed (context limit ${contextTokens} is); overlimit-handoff judges the same risk by behaviour`);
    return out.finish('not-applicable');
  }
  if (contextTokens === undefined) {
    out.note(`not exposed: context limit (KV pool ${poolTokens} tokens is)`);
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

/** llama.cpp: every slot's context is bounded by the KV cells that slot runs in. */
function auditSlots(ctx: ScenarioContext, out: ResultBuilder, slots: { total: number; nCtx: number[] }): ScenarioResult {
  const smallest = Math.min(...slots.nCtx);
  const advertised = ctx.introspection.contextTokens ?? smallest;
  out.note(
    `llama.cpp: ${slots.total} slot(s), /slots n_ctx ${[...new Set(slots.nCtx)].join('/')} per slot; each slot runs in KV cells of its own ` +
      `(-c split across the slots, or one unified buffer a slot may use whole), and a prompt over its slot's n_ctx is refused before it is scheduled ` +
      `(exceed_context_size_error; overlimit-handoff checks that by behaviour): no slot admits more context than its KV cache holds`,
  );
  if (smallest < advertised) {
    out.findings.push(
      makeFinding('pool-below-context', CAPACITY_AUDIT, {
        match: `slot n_ctx ${smallest} < advertised context ${advertised}`,
        facts: { contextTokens: advertised, poolTokens: smallest, slots: slots.total, ratio: Math.round((smallest / advertised) * 1000) / 1000, dialect: ctx.introspection.dialect },
      }),
    );
    out.note(`a slot holds ${smallest} tokens, below the advertised context ${advertised}: prompts in between are admitted to other slots only, or not at all`);
  } else {
    out.note(`every slot's n_ctx covers the advertised context ${advertised}`);
  }
  return out.finish('pass');
}
