/**
 * One request to the target, scanned as it streams. Every response of every role goes through the
 * scanner: a leak can surface in a planter or a control as well as in a reader.
 */
import { makeFinding, unknownPlanterNote, type Finding, type PlantedBy } from '../findings.js';
import { UNKNOWN_OWNER } from '../marker-registry.js';
import type { RequestRecord } from '../result.js';
import type { MarkerMatch } from '../scanner.js';
import type { AbortAfter, CompletionResult, Prompt } from '../target/client.js';
import type { ScenarioContext, Tenant } from './context.js';
import { linkSignals } from '../linked-signal.js';

export interface ExchangeSpec {
  role: string;
  tenant?: Tenant;
  prompt: Prompt;
  /** Completions only: the exact token ids to send instead of `prompt` (then ''). */
  tokenIds?: readonly number[];
  /** The prober's estimate of the prompt's tokens (for budgets and records). */
  promptTokens: number;
  maxTokens: number;
  stream?: boolean;
  abortAfter?: AbortAfter;
  requestId?: string;
  extraBody?: Record<string, unknown>;
  /** Ends the request early (in addition to the cycle's signal). */
  signal?: AbortSignal;
  /** Called on the first generated text (the request is then decoding and holds its KV pages). */
  onFirstText?: () => void;
  /** Sees each generated chunk after the scanner (a scenario comparing continuations keeps a bounded prefix). */
  onText?: (chunk: string) => void;
}

export interface Exchange {
  requestId: string;
  tenant: string;
  result: CompletionResult;
  record: RequestRecord;
  /** Foreign matches only (self-echo is kept apart). */
  foreign: MarkerMatch[];
  selfEcho: number;
}

/** Sends one request unless the budget or the cycle's signal says stop; undefined means not sent. */
export async function exchange(ctx: ScenarioContext, spec: ExchangeSpec): Promise<Exchange | undefined> {
  if (ctx.signal.aborted) return undefined;
  if (!ctx.budget.spend(spec.promptTokens + spec.maxTokens)) return undefined;
  const tenant = spec.tenant ?? ctx.tenants[0]!;
  const requestId = spec.requestId ?? ctx.newRequestId(spec.role);
  const session = ctx.scanner.open({ requestId, tenant: tenant.name, role: spec.role, runId: ctx.runId, ...(ctx.secrets === undefined ? {} : { secrets: ctx.secrets }) });
  // Disposed once the request is over: linked-signal.ts says why not AbortSignal.any.
  const link = linkSignals([ctx.signal, spec.signal]);
  const abortAfter = { ...spec.abortAfter, signal: link.signal };
  let first = spec.onFirstText;
  const result = await tenant.client.complete({
    api: ctx.api,
    model: ctx.model,
    prompt: spec.prompt,
    ...(spec.tokenIds !== undefined ? { tokenIds: spec.tokenIds } : {}),
    maxTokens: spec.maxTokens,
    temperature: 0,
    stream: spec.stream ?? true,
    extraBody: { ...tenant.extraBody, ...spec.extraBody, ...(spec.stream ?? true ? { stream_options: { include_usage: true } } : {}) },
    abortAfter,
    onText: (chunk) => {
      session.push(chunk);
      spec.onText?.(chunk);
      if (first !== undefined && chunk.length > 0) {
        first();
        first = undefined;
      }
    },
  }).finally(link.dispose);
  const matches = session.end();
  const record: RequestRecord = {
    requestId,
    role: spec.role,
    tenant: tenant.name,
    transport: result.transport,
    promptTokens: spec.promptTokens,
    latencyMs: Math.round(result.latencyMs),
    ...(result.status !== undefined ? { status: result.status } : {}),
    ...(result.usage !== undefined
      ? {
          usagePromptTokens: result.usage.promptTokens,
          usageCompletionTokens: result.usage.completionTokens,
          ...(result.usage.cachedTokens !== undefined ? { cachedTokens: result.usage.cachedTokens } : {}),
        }
      : {}),
    ...(result.ttftMs !== undefined ? { ttftMs: Math.round(result.ttftMs) } : {}),
    ...(result.finishReason !== undefined ? { finishReason: result.finishReason } : {}),
    ...(result.errorBody !== undefined ? { error: result.errorBody.slice(0, 300) } : result.detail !== undefined && result.transport !== 'ok' ? { error: result.detail.slice(0, 300) } : {}),
  };
  return {
    requestId,
    tenant: tenant.name,
    result,
    record,
    foreign: matches.filter((m) => m.foreign),
    selfEcho: matches.filter((m) => m.self).length,
  };
}

/**
 * Counts matches of markers the request itself sent in its prompt (registered to another request that
 * planted them first, e.g. a shared prefix) as self-echo: echoing its own prompt proves nothing.
 */
export function sentBySelf(ex: Exchange, sent: Iterable<string>): Exchange {
  const own = new Set(sent);
  const echoed = ex.foreign.filter((m) => own.has(m.marker)).length;
  return echoed === 0 ? ex : { ...ex, foreign: ex.foreign.filter((m) => !own.has(m.marker)), selfEcho: ex.selfEcho + echoed };
}

/**
 * The planter as evidence: the owner the registry found, with the decrypted request number; a marker that
 * decrypts but whose planting this store does not hold has only its number (marker-registry.ts UNKNOWN_OWNER).
 */
export function plantedEvidence(owner: MarkerMatch['owner'], by: MarkerMatch['plantedBy']): PlantedBy {
  const requestNo = owner.requestNo;
  if (owner.runId === UNKNOWN_OWNER) return { ...(requestNo !== undefined ? { requestNo } : {}), by: 'unknown', note: unknownPlanterNote(requestNo) };
  return {
    ...(requestNo !== undefined ? { requestNo } : {}),
    runId: owner.runId, requestId: owner.requestId, role: owner.role, tenant: owner.tenant, at: owner.plantedAt,
    by, ...(owner.target !== undefined ? { target: owner.target } : {}),
  };
}

/** One cross-request-leak finding per foreign marker seen in a response (its longest match stands for it). */
export function leakFindings(scenario: string, ex: Exchange): Finding[] {
  const best = new Map<string, MarkerMatch>();
  for (const m of ex.foreign) {
    const prev = best.get(m.marker);
    if (prev === undefined || m.length > prev.length) best.set(m.marker, m);
  }
  return [...best.values()].map((m) =>
    makeFinding(
      'cross-request-leak',
      scenario,
      {
        match: m.fragment,
        excerpt: m.excerpt,
        planted: plantedEvidence(m.owner, m.plantedBy),
        read: { requestId: ex.requestId, role: ex.record.role, tenant: ex.tenant, ...(ex.result.status !== undefined ? { status: ex.result.status } : {}) },
        facts: { exact: m.exact, matchedChars: m.length, bodyOffset: m.bodyOffset, prefixed: m.prefixed },
      },
      m.chance,
    ),
  );
}

/**
 * The endpoint computed the prompt and decoded over it, and what it generated went through the scanner: it
 * answered in full, or streamed at least a fragment's worth of text (`fragmentLength`, the shortest piece of a
 * marker the scanner reports) before an error. The second counts: llama.cpp's chat parser, for one, rejects
 * an output it has already streamed whole (a generation cut mid-character at max_tokens ends in a 2xx
 * stream's error event), and the request still held its pages and read them. A stream cut shorter than a
 * fragment could not have shown a leak, so it does not count. Scenarios that need the usage of a complete
 * answer (cached tokens) ask for `transport === 'ok'` instead.
 */
export function decoded(ex: Exchange, fragmentLength: number): boolean {
  return ex.result.transport === 'ok' || ex.result.generatedChars >= fragmentLength;
}

/** Billed tokens as the endpoint reported them (0 where it reported none). */
export function billed(ex: Exchange | undefined): number {
  const u = ex?.result.usage;
  return u === undefined ? 0 : u.promptTokens + u.completionTokens;
}
