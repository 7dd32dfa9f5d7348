/**
 * Does the endpoint reuse a prompt prefix at all? The three prefix scenarios stress a prefix cache; an
 * endpoint without one demonstrably lacks the mechanism, and they are then `not-applicable` rather than
 * inconclusive for ever. The evidence is an exact same-tenant re-send of a fresh prefix:
 * - `none`: cached tokens were reported on the re-sends and never rose above the first sends' (template and
 *   BOS pages only), in at least MIN_CONCLUSIVE_RESENDS answered re-sends; or, where cached tokens are not
 *   reported, the escalated timing control (re-send vs a fresh prefix) ran with enough pairs to reach its
 *   alpha and showed no effect;
 * - `shown`: the re-send was served from the cache (cached tokens, or a significant timing saving);
 * - `unknown`: anything else. Errors and timeouts are never read as "not reported" or "no reuse".
 * Judged afresh every cycle from that cycle's own sends (a cache switched on later is judged at once). The
 * first prefix scenario of a cycle that measured it records its verdict here (`ScenarioContext.prefixReuse`,
 * one per cycle) for the others, whose own controls may lack a timing test.
 */
export type PrefixReuse = 'shown' | 'none' | 'unknown';

export interface PrefixReuseVerdict {
  reuse: PrefixReuse;
  /** The evidence, one line, for the scenario's notes. */
  evidence: string;
  /** The scenario whose sends were the evidence. */
  by: string;
}

/** One cycle's memo (ScenarioContext.prefixReuse). */
export interface PrefixReuseMemo {
  verdict?: PrefixReuseVerdict;
}

/** Answered exact re-sends reporting cached tokens needed before "never reused" is conclusive. */
export const MIN_CONCLUSIVE_RESENDS = 2;

/**
 * Verdict from cached-token counts of (first send, exact re-send) pairs where both were answered. `undefined`
 * entries (not answered, or not reported) are skipped.
 */
export function reuseByCachedTokens(pairs: ReadonlyArray<{ first?: number | undefined; resend?: number | undefined }>): { reuse: PrefixReuse; evidence: string } {
  const known = pairs.filter((p): p is { first: number; resend: number } => p.first !== undefined && p.resend !== undefined);
  if (known.length === 0) return { reuse: 'unknown', evidence: 'no answered re-send reported cached tokens' };
  const hits = known.filter((p) => p.resend > p.first);
  const detail = `exact same-tenant re-sends: cached tokens above the first send's in ${hits.length}/${known.length} (re-sends ${known.map((p) => p.resend).join(', ')}; first sends ${known.map((p) => p.first).join(', ')})`;
  if (hits.length > 0) return { reuse: 'shown', evidence: detail };
  if (known.length >= MIN_CONCLUSIVE_RESENDS) return { reuse: 'none', evidence: `${detail}: the endpoint reuses no prompt prefix` };
  return { reuse: 'unknown', evidence: `${detail}: too few to conclude` };
}

/** Records a verdict for the cycle (the first conclusive one stands). */
export function recordReuse(memo: PrefixReuseMemo | undefined, verdict: PrefixReuseVerdict): void {
  if (memo === undefined || verdict.reuse === 'unknown') return;
  if (memo.verdict === undefined || memo.verdict.reuse === 'unknown') memo.verdict = verdict;
}

/** The note a not-applicable prefix scenario carries. */
export function notApplicableNote(v: PrefixReuseVerdict): string {
  return `not applicable: the endpoint shows no prompt-prefix reuse (${v.by}: ${v.evidence}); judged again every run`;
}
