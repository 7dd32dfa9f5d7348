/**
 * A TargetClient bound to one probe cycle: every request it sends also ends when the cycle's signal fires
 * (so a deadline or shutdown aborts everything in flight, whatever the scenario passed), and every exchange's
 * transport is reported to a liveness watch, which cuts the cycle as `unreachable` after a few consecutive
 * transport failures (refused, reset, timeout, or a response past the size limit) rather than letting each scenario wait out its own timeouts.
 */
import type { TransportClass } from '../result.js';
import { linkSignals, type LinkedSignal } from '../linked-signal.js';
import { RunCut } from '../run-cut.js';
import { TargetClient, type CallOptions, type CallResult, type CompletionRequest, type CompletionResult, type Prompt, type TargetClientOptions } from './client.js';

/** Transport failures that say the endpoint is dead or hostile (a flood past the response limit counts too). */
const DEAD: ReadonlySet<TransportClass> = new Set(['refused', 'reset', 'timeout', 'too-large']);

export interface Liveness {
  note(transport: TransportClass): void;
}

/** Counts consecutive transport failures across a cycle's clients; at `limit`, aborts the cycle. */
export function createLiveness(limit: number, cut: (c: RunCut) => void): Liveness {
  let run = 0;
  let last: TransportClass | undefined;
  let done = false;
  return {
    note(transport) {
      if (transport === 'aborted') return;  // our own doing: says nothing about the endpoint
      if (!DEAD.has(transport)) { run = 0; return; }
      run++;
      last = transport;
      if (run >= limit && !done) {
        done = true;
        cut(new RunCut('unreachable', `unreachable: ${run} requests in a row failed (last: ${last}); the rest of the run was not attempted`));
      }
    },
  };
}

export class WatchedTargetClient extends TargetClient {
  readonly #signal: AbortSignal;
  readonly #liveness: Liveness;

  constructor(opts: TargetClientOptions, signal: AbortSignal, liveness: Liveness) {
    super(opts);
    this.#signal = signal;
    this.#liveness = liveness;
  }

  /** The cycle's signal joined with the caller's; disposed when the request is over (linked-signal.ts). */
  #with(signal: AbortSignal | undefined): LinkedSignal {
    return linkSignals([this.#signal, signal]);
  }

  override async complete(req: CompletionRequest): Promise<CompletionResult> {
    const after = req.abortAfter;
    const link = this.#with(after instanceof AbortSignal ? after : after?.signal);
    try {
      const abortAfter = after instanceof AbortSignal ? link.signal : { ...after, signal: link.signal };
      const r = await super.complete({ ...req, abortAfter });
      this.#liveness.note(r.transport);
      return r;
    } finally {
      link.dispose();
    }
  }

  override async requestJson(method: 'GET' | 'POST', path: string, json?: unknown, opts: CallOptions = {}): Promise<CallResult<unknown>> {
    const link = this.#with(opts.signal);
    try {
      const r = await super.requestJson(method, path, json, { ...opts, signal: link.signal });
      this.#liveness.note(r.transport);
      return r;
    } finally {
      link.dispose();
    }
  }

  override async requestText(path: string, opts: CallOptions = {}): Promise<CallResult<string>> {
    const link = this.#with(opts.signal);
    try {
      const r = await super.requestText(path, { ...opts, signal: link.signal });
      this.#liveness.note(r.transport);
      return r;
    } finally {
      link.dispose();
    }
  }

  override async requestTokenCount(path: string, template: Record<string, unknown>, text: Prompt, opts: CallOptions = {}): Promise<CallResult<number>> {
    const link = this.#with(opts.signal);
    try {
      const r = await super.requestTokenCount(path, template, text, { ...opts, signal: link.signal });
      this.#liveness.note(r.transport);
      return r;
    } finally {
      link.dispose();
    }
  }
}
