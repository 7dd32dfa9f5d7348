/**
 * Was a prompt that had to be rejected actually rejected? Judged by what happened, never by the absence
 * of an error: a clean rejection is a 4xx with an error body and no generated text (or an error event in a
 * 2xx stream with no text before it, as SGLang and llama.cpp send). A 2xx that generated text, or a 2xx
 * with neither text nor error, is `rejection-not-enforced`. Anything else (5xx, timeouts, resets, auth or
 * rate-limit errors) cannot be judged.
 */
import { makeFinding, type Finding } from '../findings.js';
import { rejectionOf } from '../target/rejection.js';
import type { Exchange } from './exchange.js';

const REJECTION_STATUSES = new Set([400, 413, 422]);

export interface RejectionVerdict {
  state: 'rejected' | 'served' | 'undecided';
  note: string;
  finding?: Finding;
}

export function judgeRejection(
  scenario: string,
  label: string,
  mustReject: boolean,
  ex: Exchange,
  facts: Record<string, string | number | boolean | null>,
): RejectionVerdict {
  const r = ex.result;
  const is2xx = r.status !== undefined && r.status >= 200 && r.status < 300;
  const allFacts = {
    ...facts,
    status: r.status ?? null,
    generatedChars: r.generatedChars,
    finishReason: r.finishReason ?? null,
    usagePromptTokens: r.usage?.promptTokens ?? null,
    usageCompletionTokens: r.usage?.completionTokens ?? null,
  };
  const notEnforced = (why: string): RejectionVerdict => ({
    state: 'served',
    note: `${why}: rejection not enforced`,
    finding: makeFinding('rejection-not-enforced', scenario, {
      match: `${label}: ${why}`,
      read: { requestId: ex.requestId, role: ex.record.role, tenant: ex.tenant, ...(r.status !== undefined ? { status: r.status } : {}) },
      facts: allFacts,
    }),
  });
  if (is2xx && r.generatedChars > 0) {
    // Text was generated: an error event after it does not undo that (SGLang #33507's 200s).
    return mustReject ? notEnforced(`HTTP ${r.status} with ${r.generatedChars} generated chars`) : { state: 'served', note: `served (${r.status}, ${r.generatedChars} chars), legal size` };
  }
  if (r.transport === 'http-4xx' && r.status !== undefined && REJECTION_STATUSES.has(r.status) && r.generatedChars === 0) {
    const rej = rejectionOf(r);
    return { state: 'rejected', note: `rejected ${r.status}${rej.overLimit ? ` (${rej.dialect}${rej.limit !== undefined ? `, limit ${rej.limit}` : ''})` : ' (error text not recognised as a length limit)'}` };
  }
  if (is2xx && r.errorInStream && r.generatedChars === 0) return { state: 'rejected', note: `rejected inside a ${r.status} stream: ${(r.errorBody ?? '').slice(0, 120)}` };
  if (is2xx && r.transport === 'ok' && r.generatedChars === 0) {
    return mustReject ? notEnforced(`HTTP ${r.status} without an error (finish_reason ${r.finishReason ?? 'none'})`) : { state: 'served', note: `served ${r.status} with no text` };
  }
  return { state: 'undecided', note: `${r.transport}${r.status !== undefined ? ` ${r.status}` : ''}${r.detail !== undefined ? ` (${r.detail.slice(0, 80)})` : ''}: cannot judge` };
}
