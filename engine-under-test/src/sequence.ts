/**
 * One request inside the engine: its tokens (prompt, then generated), how far its KV has been written,
 * its page table, and the channel its events go out on.
 *
 * Positions and KV: position i's KV is written once token i is known. Prefill writes positions
 * [0, promptLength); each decode step first writes the previous step's token, then attends over every
 * written position. The last generated token's KV is never needed, so a sequence reserves at most
 * promptLength + maxTokens slots (what admission checks).
 */
import type { EngineEvent, GenerationRequest } from './engine.js';
import type { EventChannel } from './event-channel.js';
import type { PageTable } from './kv-pool.js';
import type { PrefixPlan } from './prefix-cache.js';
import { createSampler, type Sampler } from './sampler.js';

export type SequencePhase = 'waiting' | 'prefill' | 'decode' | 'finished';

export class Sequence {
  readonly promptLength: number;
  readonly maxTokens: number;
  readonly tokens: Uint16Array;
  readonly sample: Sampler;
  phase: SequencePhase = 'waiting';
  /** Tokens known (prompt + generated). */
  length: number;
  /** Positions whose KV is in the pool. */
  kvWritten = 0;
  generated = 0;
  table: PageTable | undefined;
  /** Scheduler step in which this sequence last produced a token (one token per step). */
  lastStep = -1;
  readonly cacheSalt: string | undefined;
  /** Prefix-cache keys of the prompt's blocks (computed once, when first considered for admission). */
  prefix: PrefixPlan | undefined;
  /** Prompt tokens whose KV came from the prefix cache. */
  cachedTokens = 0;

  constructor(
    readonly id: number,
    request: GenerationRequest,
    readonly channel: EventChannel<EngineEvent>,
  ) {
    this.promptLength = request.promptTokens.length;
    this.maxTokens = request.maxTokens;
    this.tokens = new Uint16Array(this.promptLength + this.maxTokens);
    this.tokens.set(request.promptTokens);
    this.length = this.promptLength;
    this.sample = createSampler(request.sampling);
    this.cacheSalt = request.cacheSalt;
  }

  /** Slots this sequence reserves in the pool. */
  get reservationTokens(): number {
    return this.promptLength + this.maxTokens;
  }
}
