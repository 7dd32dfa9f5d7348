/**
 * Sends the prefix scenarios' marker prompts: a prefix of registered markers (a fresh one, or another
 * request's, to hit its cache entries), a suffix marker of the request's own and the marker cue. Markers of
 * the request's own prompt echoed back are self-echo; every other foreign marker is a finding. Shared by
 * prefix-isolation and the reuse measurement (reuse-probe.ts).
 */
import { generateMarker } from '../markers.js';
import { MARKER_CUE } from '../prompts.js';
import type { ScenarioContext, Tenant } from './context.js';
import { exchange, sentBySelf, type Exchange } from './exchange.js';
import type { ResultBuilder } from './result-builder.js';

/** Tokens one marker with its separator costs at least on common tokenizers (random base32 splits finely). */
const MIN_TOKENS_PER_MARKER = 12;
/** Room for the suffix (one marker, the cue) and a chat template. */
const SUFFIX_ALLOWANCE_TOKENS = 96;
export const MIN_PREFIX_MARKERS = 4;
/** A marker is 36 characters with its separator: no tokenizer spends more than one token per character. */
const MARKER_CHARS_UPPER_BOUND_TOKENS = 36;

export interface Sent {
  ex: Exchange;
  /** When the request's first marker was planted (for evidence). */
  at: string;
}

/** Sends prefix+suffix requests: registers markers first, and counts echoes of a request's own prompt as self. */
export class PrefixSender {
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

export async function prefixMarkerCount(ctx: ScenarioContext, targetTokens: number, maxTokens: number): Promise<{ count: number; note: string }> {
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

