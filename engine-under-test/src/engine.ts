/**
 * The engine contract the HTTP server talks to, free of HTTP. The single-node engine (`single-node.ts`)
 * implements it; the disaggregated router (`disagg/router.ts`) implements it too, behind the same server.
 */
import type { PromptKind, Rejection } from './admission.js';
import type { DefenseBlocks } from './defenses.js';
import type { ExposureSnapshot } from './exposure-log.js';
import type { KvPoolStats } from './kv-pool.js';
import type { PrefixCacheStats } from './prefix-cache.js';
import type { EngineMode } from './presets.js';
import type { SamplingParams } from './sampler.js';

export interface GenerationRequest {
  /** Token ids, BOS first (see tokenizer.ts). */
  promptTokens: Uint16Array;
  /** >= 1. */
  maxTokens: number;
  sampling: SamplingParams;
  /** Wording of rejections only. @default 'prompt' */
  promptKind?: PromptKind;
  /** vLLM's `cache_salt`: mixed into the prefix cache's first block hash, so only equal salts share. */
  cacheSalt?: string;
}

export type EngineEvent =
  | { type: 'token'; token: number }
  | {
      type: 'end';
      /**
       * length: max_tokens reached; aborted: abort() was called (client gone, stop string, shutdown); error:
       * the engine failed it; rejected: admission refused it after it was accepted (the disaggregated mode's
       * prefill finds an over-pool prompt only once it is bootstrapped), before any token.
       */
      reason: 'length' | 'aborted' | 'error' | 'rejected';
      promptTokens: number;
      completionTokens: number;
      message?: string;
      /** Present when reason is 'rejected'. */
      rejection?: Rejection;
      /** Prompt tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens). */
      cachedTokens?: number;
    };

export interface RequestHandle {
  /** Engine-wide request id (also the writer/reader id in the KV pool and the exposure log). */
  readonly id: number;
  readonly promptTokens: number;
  /** Prompt tokens served from the prefix cache, known once admitted (undefined without a prefix cache). */
  readonly cachedTokens?: number;
  /** Iterate once. Stopping early aborts the request. */
  readonly events: AsyncIterable<EngineEvent>;
  /** Stop generating and release the request's pages now. Idempotent. */
  abort(): void;
}

export type OverloadRejection = { code: 'engine_overloaded'; message: string };

export type SubmitResult =
  | { ok: true; request: RequestHandle }
  | { ok: false; rejection: Rejection }
  | { ok: false; overloaded: OverloadRejection };

export interface EngineInfo {
  mode: EngineMode;
  preset: string;
  modelId: string;
  contextTokens: number;
  /** Tokens the KV pool holds (the capacity that bounds admission: prefill's pool when disaggregated). */
  poolTokens: number;
  pageSize: number;
  numPages: number;
  freeList: string;
  zeroOnRelease: boolean;
  /** The prefix cache is on. */
  prefixCache?: boolean;
  chunkTokens: number;
  maxRunning: number;
  kernel: string;
  /** Unix seconds. */
  startedAt: number;
  /** Enabled faults and defenses (ground truth for tests: GET /debug/config). */
  faults: string[];
  defenses: string[];
  /** Mode-specific facts for /get_server_info (e.g. each role's pool in the disaggregated mode). */
  details?: Record<string, unknown>;
}

export interface EngineStats {
  waiting: number;
  running: number;
  /** Running sequences still in prefill, and the prompt tokens they have left to write. */
  prefilling: number;
  prefillTokensPending: number;
  pool: KvPoolStats;
  promptTokensTotal: number;
  generationTokensTotal: number;
  finishedTotal: Record<'length' | 'aborted' | 'error', number>;
  rejectedTotal: Record<string, number>;
  foreignPageReadsTotal: number;
  steps: number;
  /** Disaggregated mode: each role's pool (`pool` above is decode's, where reads happen). */
  pools?: { prefill: KvPoolStats; decode: KvPoolStats };
  /** Disaggregated mode: KV transfer from prefill into decode's pool. */
  transfer?: TransferStats;
  /** Disaggregated mode with the host-offload tier. */
  hostOffload?: HostOffloadStats;
  /** What the defenses caught (0 when a defense is off). */
  defended?: DefenseStats;
  /** What each defense stopped, every defense named (see defenses.ts). */
  defenseBlocks: DefenseBlocks;
  /** The prefix cache, when on (single-node mode). `promptTokensTotal` counts only prompt tokens prefilled. */
  prefixCache?: PrefixCacheStats;
}

export interface TransferStats {
  batchesLanded: number;
  /** Ground truth: batches that landed on a page their room no longer held (late writes). */
  lateBatchesLanded: number;
  tokensLanded: number;
  /** Milliseconds during which at least one batch was in flight (for throughput: tokens / busy time). */
  busyMs: number;
}

export interface HostOffloadStats {
  /** Pages the tier holds. */
  entries: number;
  pagesWrittenBack: number;
  pagesLoaded: number;
  /** Prompt pages served from the tier instead of prefill. */
  hitPages: number;
}

export interface DefenseStats {
  /** page-tags: reads refused (each fails its request closed). */
  pageTagMismatches: number;
  /** transfer-integrity: transfer batches dropped as stale or corrupt. */
  staleBatchesDropped: number;
  /** transfer-integrity: host copies dropped as stale. */
  staleCopiesDropped: number;
}

export interface Engine {
  info(): EngineInfo;
  submit(request: GenerationRequest): SubmitResult;
  stats(): EngineStats;
  exposures(): ExposureSnapshot;
  /**
   * Verifies the KV pools' invariants (empty = consistent). Synchronous: the disaggregated engine asks its
   * workers and waits for their answers (see disagg/sync-call.ts).
   */
  checkInvariants(): string[];
  /** Drops every prefix-cache entry (pages stay with their holders or on the free list); returns how many. */
  flushPrefixCache?(): number;
  /** Aborts everything and stops scheduling. */
  close(): Promise<void>;
}
