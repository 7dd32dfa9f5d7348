/**
 * The engine contract the HTTP server talks to, free of HTTP. The single-node engine (`single-node.ts`)
 * implements it; the disaggregated router implements it too, behind the same server.
 */
import type { PromptKind, Rejection } from './admission.js';
import type { ExposureSnapshot } from './exposure-log.js';
import type { KvPoolStats } from './kv-pool.js';
import type { SamplingParams } from './sampler.js';

export interface GenerationRequest {
  /** Token ids, BOS first (see tokenizer.ts). */
  promptTokens: Uint16Array;
  /** >= 1. */
  maxTokens: number;
  sampling: SamplingParams;
  /** Wording of rejections only. @default 'prompt' */
  promptKind?: PromptKind;
}

export type EngineEvent =
  | { type: 'token'; token: number }
  | {
      type: 'end';
      /** length: max_tokens reached; aborted: abort() was called (client gone, stop string, shutdown); error: the engine failed it. */
      reason: 'length' | 'aborted' | 'error';
      promptTokens: number;
      completionTokens: number;
      message?: string;
    };

export interface RequestHandle {
  /** Engine-wide request id (also the writer/reader id in the KV pool and the exposure log). */
  readonly id: number;
  readonly promptTokens: number;
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
  mode: 'single';
  preset: string;
  modelId: string;
  contextTokens: number;
  /** Tokens the KV pool holds (the capacity that bounds admission). */
  poolTokens: number;
  pageSize: number;
  numPages: number;
  freeList: string;
  zeroOnRelease: boolean;
  chunkTokens: number;
  maxRunning: number;
  kernel: string;
  /** Unix seconds. */
  startedAt: number;
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
}

export interface Engine {
  info(): EngineInfo;
  submit(request: GenerationRequest): SubmitResult;
  stats(): EngineStats;
  exposures(): ExposureSnapshot;
  /** Verifies the KV pool's invariants (empty = consistent). */
  checkInvariants(): string[];
  /** Aborts everything and stops scheduling. */
  close(): Promise<void>;
}
