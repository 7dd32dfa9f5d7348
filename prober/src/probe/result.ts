/**
 * What one scenario run returns. Scenarios return data; the CLI, store, metrics and logger consume it.
 * Outcomes: `pass` only when isolation was positively established; anything the prober could not
 * establish is `inconclusive`, never a pass.
 */
import type { Finding } from './findings.js';

export type Outcome = 'pass' | 'fail' | 'inconclusive';

/** How one HTTP exchange with the target ended, as data. */
export type TransportClass =
  | 'ok'          // 2xx with a well-formed body
  | 'http-4xx'
  | 'http-5xx'
  | 'refused'     // ECONNREFUSED, DNS failure
  | 'reset'       // socket closed mid-exchange
  | 'timeout'
  | 'aborted'     // we aborted it on purpose
  | 'malformed'   // 2xx but the body or stream did not parse
  | 'too-large';  // the response exceeded the byte bound

export interface RequestRecord {
  requestId: string;
  role: string;           // planter | overlimit | reader | control | ...
  tenant: string;
  transport: TransportClass;
  status?: number;
  promptTokens?: number;  // as the prober estimated
  usagePromptTokens?: number;
  usageCompletionTokens?: number;
  cachedTokens?: number;
  latencyMs?: number;
  ttftMs?: number;
  finishReason?: string;
  /** Bounded error text from the target (never request bodies). */
  error?: string;
}

export interface ScenarioResult {
  name: string;
  outcome: Outcome;
  findings: Finding[];
  requests: RequestRecord[];
  /** Why the outcome is what it is, one short line each (reasons for inconclusive, what was established). */
  notes: string[];
  tokens: { sent: number; billed: number };
  durationMs: number;
}

/** fail beats inconclusive beats pass. */
export function combineOutcomes(outcomes: Outcome[]): Outcome {
  if (outcomes.includes('fail')) return 'fail';
  if (outcomes.length === 0 || outcomes.includes('inconclusive')) return 'inconclusive';
  return 'pass';
}

/** One probe cycle against one target: what `run` prints and what `serve` stores and exports. */
export interface ProbeRun {
  runId: string;
  /** The target's configured name (a low-cardinality label), e.g. "prod-glm". */
  target: string;
  baseUrl: string;
  model: string;
  startedAt: string;   // ISO 8601
  finishedAt: string;
  outcome: Outcome;
  scenarios: ScenarioResult[];
  /** What introspection learnt about the target (absent fields: not exposed). */
  capacity: { contextTokens?: number; poolTokens?: number; pageSize?: number };
  /** Was the endpoint reachable at all this cycle. */
  up: boolean;
}
