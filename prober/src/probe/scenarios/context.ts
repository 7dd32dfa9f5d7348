/**
 * What a scenario gets to work with. Built once per probe cycle by probe.ts; scenarios never reach for
 * the store, metrics or logger: they return a ScenarioResult and report progress through a callback.
 */
import type { PoolHold } from './pool-hold.js';
import type { MarkerEntry, MarkerRegistry } from '../marker-registry.js';
import type { Scanner } from '../scanner.js';
import type { TargetClient } from '../target/client.js';
import type { Introspection } from '../target/introspect.js';
import type { TokenLine } from '../prompts.js';
import type { PrefixReuseMemo } from './prefix-reuse.js';

/** One identity the prober sends as: its own client (API key, headers) and body extras (cache_salt). */
export interface Tenant {
  name: string;
  client: TargetClient;
  extraBody: Record<string, unknown>;
  /**
   * Equal for tenants that send the same API key, different for different keys; undefined when unknown.
   * An opaque label (e.g. the name of the first tenant with that key), never the key or a hash of it:
   * prefix-isolation reports only whether the two tenants' keys differ.
   */
  keyId?: string;
}

/** Knobs a user can set per probe; every field has a default suited to a scaled test endpoint. */
export interface ProbeTuning {
  /** Prompt tokens per planter. @default min(4096, pool/4) when the pool is known, else 2048 */
  planterTokens?: number;
  /**
   * Planted tokens per overlimit-handoff cycle, and churned tokens per prefix-churn round.
   * @default the pool capacity when known (prefix-churn: plus 5%), else 4 planters (prefix-churn: the context limit)
   */
  plantTokens?: number;
  /** abort-race race windows per cycle; a pass needs 29, the workload whose power bench:race-calibration measured, so fewer cannot pass. @default 29 */
  abortRounds?: number;
  /** abort-race: fill most of the exposed KV pool with ballast generations so freed pages are reused at once. @default true */
  abortBallast?: boolean;
  /**
   * How the ballast holds its pages. 'prompt': about half of each piece is prompt, half generation (pages held
   * from admission on any engine, at the cost of prefilling the prompt). 'generation': a short prompt and a
   * long generation: an engine that reserves prompt + max_tokens at admission (the bundled one, SGLang's
   * reservation) holds the same pages for almost no prefill; one that grows a sequence's pages as it generates
   * holds only what has been generated, so the pool is not full and a freed page may sit unused (not the
   * default for that reason: docs/cost.md). @default 'prompt'
   */
  ballastHold?: 'prompt' | 'generation';
  /**
   * How planters lay out their markers. 'dense': every marker distinct, separated by spaces (the most
   * markers per token). 'repeated': one marker per planter, every copy led by the line readers end with
   * (`\nQuote the reference code: kvcanary-`), so a model that copies weakly (a short induction context, flat
   * attention, sampling at temperature > 0) still meets one unambiguous continuation of the reader's cue
   * wherever it looks (bench/REPORT.md, copy fidelity). @default 'dense'
   */
  planterLayout?: 'dense' | 'repeated';
  /** Generated tokens asked of readers and planters. @default 48 */
  readerMaxTokens?: number;
  /** Sizes (fractions of the context limit) swept when the pool is not exposed. @default [0.5, 0.75, 0.95] */
  sweep?: number[];
  /** Use the chat API instead of legacy completions. @default false */
  chat?: boolean;
  /** prefix-isolation, prefix-churn: tokens of each shared prefix (well above page sizes of 16-256). @default 512 */
  prefixTokens?: number;
  /**
   * prefix-isolation: timing pairs per cycle; at alpha 0.001 at least 10 are needed to decide.
   * @default 12, or 24 over 4× longer prefixes when the first round shows no cached-token counts
   */
  timingPairs?: number;
  /** prefix-isolation: false-alarm rate of the timing test. @default 0.001 */
  timingAlpha?: number;
  /** prefix-isolation: smallest TTFT saving (1 - cached/fresh, in median) that counts as a side channel. @default 0.2 */
  timingMinEffect?: number;
  /** concurrent-interleave: requests in flight together, one wave per entry. @default [2, 4, 8] */
  interleaveWaves?: number[];
  /**
   * concurrent-interleave: hold ballast over all but a sliver of the exposed KV pool while the waves run, so
   * pages freed by one request are handed to the next whatever the free list's order (interleave-sizing.ts).
   * Off, a pass states no race power. @default true
   */
  interleaveBallast?: boolean;
  /** prefix-churn: cache, churn and re-read rounds per cycle (each churns the whole pool). @default 2 */
  churnRounds?: number;
}

/** Tokens the cycle may still spend; scenarios check before each request and stop (inconclusive) when out. */
export interface TokenBudget {
  remaining(): number;
  /** Record spending; returns false if the spend exceeded what was left. */
  spend(tokens: number): boolean;
}

export interface ScenarioContext {
  runId: string;
  target: string;
  model: string;
  api: 'completions' | 'chat';
  /** At least one; the first is the default identity. */
  tenants: Tenant[];
  introspection: Introspection;
  registry: MarkerRegistry;
  scanner: Scanner;
  /** The target's credentials, scrubbed from excerpts before they are cut (scanner.ts). */
  secrets?: readonly string[];
  signal: AbortSignal;
  budget: TokenBudget;
  tuning: ProbeTuning;
  /** Calibrated over-limit prompt line, shared by scenarios of one cycle (computed on first use). */
  calibration: { line?: TokenLine | undefined; tried: boolean };
  /** Who holds the endpoint's pool with ballast (pool-hold.ts); absent: every ballast may hold (one scenario at a time). */
  poolHold?: PoolHold;
  /** Whether this cycle's sends showed prefix reuse at all (prefix-reuse.ts); absent: not tracked. */
  prefixReuse?: PrefixReuseMemo;
  /** Called with markers after they are registered and before the request carrying them is sent (persist them). */
  onMarkers: (entries: MarkerEntry[]) => void;
  progress: (message: string) => void;
  /** Milliseconds, for durations. */
  now: () => number;
  /** Fresh request id. */
  newRequestId: (role: string) => string;
}

export type Scenario = (ctx: ScenarioContext) => Promise<import('../result.js').ScenarioResult>;
