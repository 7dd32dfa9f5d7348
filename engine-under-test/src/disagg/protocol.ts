/**
 * Messages between the router (main thread), the prefill worker and the decode worker. Router <-> worker
 * messages go over each worker's own port; prefill <-> decode talk directly over a MessageChannel (the
 * bootstrap connection), so a room's bootstrap and completion never wait on the router.
 *
 * A room is one request; its id is the request id (also the writer/reader id in the KV memory's ground
 * truth and in /debug/exposures). Every room the router adds reaches exactly one end on each side:
 * decode either bootstraps it (then prefill answers `transferred`, `closed` or `rejected`) or drops it
 * before bootstrap (`dropped`).
 */
import type { KernelName } from '../attention/kernel.js';
import type { MessagePort } from 'node:worker_threads';
import type { PromptKind, Rejection } from '../admission.js';
import type { EngineConfig } from '../config.js';
import type { SamplingParams } from '../sampler.js';

export type WorkerRole = 'prefill' | 'decode';

export interface WorkerInit {
  role: WorkerRole;
  config: EngineConfig;
  /** Decode's KV pool memory: a shared WebAssembly.Memory both workers attach to. */
  decodeMemory: WebAssembly.Memory;
  /** This worker's end of the prefill <-> decode channel. */
  peer: MessagePort;
  /** Counters published for the router (stats-block.ts). */
  stats: SharedArrayBuffer;
  /** Reply area for synchronous questions (sync-call.ts). */
  reply: SharedArrayBuffer;
}

/** Router -> decode. */
export type ToDecode =
  | { t: 'add'; id: number; prompt: Uint16Array; maxTokens: number; sampling: SamplingParams; cacheSalt?: string }
  | { t: 'abort'; id: number }
  | { t: 'check' };

/** Router -> prefill. */
export type ToPrefill =
  | { t: 'add'; id: number; prompt: Uint16Array; promptKind: PromptKind }
  | { t: 'abort'; id: number }
  | { t: 'check' };

/**
 * Decode -> prefill. `bootstrap`: decode reserved `pages` (the room's whole page table, prompt + max_tokens)
 * whose generations were `gens`; prefill writes positions [skipTokens, promptTokens) into them. Decode holds
 * one lease on each page of that range until prefill says no batch can land any more.
 */
export type DecodeToPrefill =
  | { t: 'bootstrap'; room: number; pages: Int32Array; gens: Int32Array; skipTokens: number; promptTokens: number }
  | { t: 'dropped'; room: number };

/**
 * Prefill -> decode. `transferred`: every batch landed (completion metadata: room and tokens written);
 * `closed`: the room was aborted and no batch can land any more; `rejected`: prefill's admission refused
 * the room, nothing was or will be written. Prefill drops the room's leases before sending any of them.
 */
export type PrefillToDecode = { t: 'transferred'; room: number; tokens: number } | { t: 'closed'; room: number } | { t: 'rejected'; room: number };

/** One thing decode reports for a request. */
export type DecodeEvent =
  | { k: 'token'; id: number; token: number }
  /** Admitted with this many prompt tokens from the prefix cache (sent once, before any token). */
  | { k: 'cached'; id: number; tokens: number }
  | { k: 'end'; id: number; reason: 'length' | 'aborted' | 'error'; promptTokens: number; completionTokens: number; message?: string }
  | { k: 'foreign'; reader: number; pages: number[]; writers: number[] };

/** Decode -> router. Events of one step travel together, in order (a foreign read before the token it produced). */
export type FromDecode = { t: 'ready'; kernel: KernelName } | { t: 'events'; events: DecodeEvent[] } | { t: 'error'; message: string };

/** Prefill -> router. */
export type FromPrefill = { t: 'ready' } | { t: 'rejected'; id: number; rejection: Rejection } | { t: 'error'; message: string };
