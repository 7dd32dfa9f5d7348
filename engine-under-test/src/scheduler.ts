/**
 * Continuous batching with chunked prefill, one step at a time, yielding to the event loop between steps
 * (setImmediate) so that HTTP keeps being served during a long prefill or a long-context decode.
 *
 * One step:
 *   1. admit waiting sequences in arrival order while the pool can hold their whole reservation
 *      (prompt + max_tokens pages, allocated up front, so a running sequence never runs out of pages
 *      and there is no preemption); strict FIFO, so a large request is not starved by small ones;
 *   2. prefill: up to `chunkTokens` prompt tokens across prefilling sequences, in admission order; a
 *      sequence whose prompt is complete attends once and emits its first token;
 *   3. decode: one token for each decoding sequence, round-robin, until `decodePositionsPerStep`
 *      attention positions have been read (at least one sequence per step), so a step's length stays
 *      bounded even with several million-token sequences.
 * With a prefix cache, admission first looks the prompt's blocks up and pins the cached run (their prefill
 * is skipped: kvWritten starts after them), and prefill registers each prompt page once it is written in full.
 * A finished or aborted sequence releases its pages at once: "stop computing", "stop writing",
 * "stop reading" and "safe to reallocate" coincide here because everything happens on one thread between
 * steps; the disaggregated mode is where they come apart.
 */
import type { KvPool } from './kv-pool.js';
import type { InductionModel } from './model.js';
import type { PrefixCache } from './prefix-cache.js';
import type { Sequence } from './sequence.js';
import { reserveWithPrefix } from './prefix-reservation.js';

export interface SchedulerOptions {
  /** Prompt tokens prefilled per step, across sequences. @default 4096 */
  chunkTokens: number;
  /** Attention positions decode may read per step before yielding. @default 4_194_304 */
  decodePositionsPerStep: number;
  /** Sequences running (prefill or decode) at once. @default 256 */
  maxRunning: number;
}

export type FinishReason = 'length' | 'aborted' | 'error';

export interface SchedulerCounters {
  promptTokensTotal: number;
  generationTokensTotal: number;
  finishedTotal: Record<FinishReason, number>;
  steps: number;
}

export class Scheduler {
  private readonly waiting: Sequence[] = [];
  private readonly running: Sequence[] = [];
  private scheduled = false;
  private closed = false;
  private decodeCursor = 0;
  private readonly logits = new Float32Array(256);
  readonly counters: SchedulerCounters = {
    promptTokensTotal: 0,
    generationTokensTotal: 0,
    finishedTotal: { length: 0, aborted: 0, error: 0 },
    steps: 0,
  };

  constructor(
    private readonly pool: KvPool,
    private readonly model: InductionModel,
    private readonly options: SchedulerOptions,
    private readonly defer: (fn: () => void) => void = setImmediate,
    private readonly cache?: PrefixCache,
  ) {}

  get waitingCount(): number {
    return this.waiting.length;
  }

  get runningCount(): number {
    return this.running.length;
  }

  prefillState(): { prefilling: number; pendingTokens: number } {
    let prefilling = 0;
    let pendingTokens = 0;
    for (const s of this.running) {
      if (s.phase === 'prefill') {
        prefilling++;
        pendingTokens += s.promptLength - s.kvWritten;
      }
    }
    return { prefilling, pendingTokens };
  }

  enqueue(seq: Sequence): void {
    if (this.closed) {
      this.finish(seq, 'aborted');
      return;
    }
    seq.phase = 'waiting';
    this.waiting.push(seq);
    this.schedule();
  }

  /** Stops a sequence wherever it is and frees its pages now. */
  abort(seq: Sequence): void {
    if (seq.phase === 'finished') return;
    if (seq.phase === 'waiting') {
      const i = this.waiting.indexOf(seq);
      if (i >= 0) this.waiting.splice(i, 1);
    } else {
      const i = this.running.indexOf(seq);
      if (i >= 0) this.running.splice(i, 1);
    }
    this.finish(seq, 'aborted');
    this.schedule();
  }

  /** Aborts every sequence and stops stepping. */
  close(): void {
    this.closed = true;
    for (const seq of [...this.waiting, ...this.running]) this.abort(seq);
  }

  private schedule(): void {
    if (this.scheduled || this.closed) return;
    if (this.running.length === 0 && this.waiting.length === 0) return;
    this.scheduled = true;
    this.defer(() => this.step());
  }

  /** One scheduler step (public for tests that drive the engine by hand). */
  step(): void {
    this.scheduled = false;
    if (this.closed) return;
    const step = ++this.counters.steps;
    this.admit();
    this.prefill(step);
    this.decode(step);
    for (let i = this.running.length - 1; i >= 0; i--) {
      if ((this.running[i] as Sequence).phase === 'finished') this.running.splice(i, 1);
    }
    this.schedule();
  }

  private admit(): void {
    while (this.waiting.length > 0 && this.running.length < this.options.maxRunning) {
      const seq = this.waiting[0] as Sequence;
      const total = this.pool.pagesFor(seq.reservationTokens);
      const reserved = reserveWithPrefix(this.pool, this.cache, seq, total);
      if (reserved === undefined) return;
      const { table, hits } = reserved;
      this.waiting.shift();
      seq.table = table;
      seq.phase = 'prefill';
      if (this.cache !== undefined && seq.prefix !== undefined) {
        this.cache.borrowed(seq.id, seq.prefix, hits);
        seq.cachedTokens = hits.length * this.pool.pageSize;
        seq.kvWritten = seq.cachedTokens;
      }
      this.running.push(seq);
    }
  }

  private prefill(step: number): void {
    let budget = this.options.chunkTokens;
    for (const seq of this.running) {
      if (budget <= 0) break;
      if (seq.phase !== 'prefill') continue;
      try {
        const n = Math.min(budget, seq.promptLength - seq.kvWritten);
        this.model.writeKv(this.pagesOf(seq), seq.tokens, seq.kvWritten, seq.kvWritten + n, seq.id);
        this.registerWritten(seq, seq.kvWritten, seq.kvWritten + n);
        seq.kvWritten += n;
        budget -= n;
        this.counters.promptTokensTotal += n;
        if (seq.kvWritten === seq.promptLength) {
          seq.phase = 'decode';
          this.generate(seq, step);
        }
      } catch (err) {
        this.fail(seq, err);
      }
    }
  }

  private decode(step: number): void {
    const n = this.running.length;
    if (n === 0) return;
    let budget = this.options.decodePositionsPerStep;
    let served = 0;
    for (let k = 0; k < n && (served === 0 || budget > 0); k++) {
      const index = (this.decodeCursor + k) % n;
      const seq = this.running[index] as Sequence;
      if (seq.phase !== 'decode' || seq.lastStep === step) continue;
      try {
        // Write the previous token's KV, then attend over everything written.
        this.model.writeKv(this.pagesOf(seq), seq.tokens, seq.kvWritten, seq.length, seq.id);
        seq.kvWritten = seq.length;
        budget -= seq.length;
        served++;
        this.generate(seq, step);
      } catch (err) {
        this.fail(seq, err);
      }
      this.decodeCursor = index + 1;
    }
  }

  private generate(seq: Sequence, step: number): void {
    this.model.nextLogits(this.pagesOf(seq), seq.tokens, seq.length, seq.kvWritten, seq.id, this.logits);
    const token = seq.sample(this.logits);
    seq.tokens[seq.length++] = token;
    seq.generated++;
    seq.lastStep = step;
    this.counters.generationTokensTotal++;
    seq.channel.push({ type: 'token', token });
    if (seq.generated >= seq.maxTokens) this.finish(seq, 'length');
  }

  /** Prompt pages completed by a write of positions [from, to) become cache entries (and ground truth). */
  private registerWritten(seq: Sequence, from: number, to: number): void {
    const cache = this.cache;
    const plan = seq.prefix;
    if (cache === undefined || plan === undefined) return;
    const P = this.pool.pageSize;
    const pages = this.pagesOf(seq);
    const last = Math.min(Math.floor(to / P), plan.keys.length);
    for (let b = Math.floor(from / P); b < last; b++) {
      const page = pages[b] as number;
      cache.written(plan, b, page, seq.id);
      cache.register(plan, b, page);
    }
  }

  private pagesOf(seq: Sequence): Int32Array {
    if (seq.table === undefined) throw new Error(`sequence ${seq.id} has no page table`);
    return seq.table.pages;
  }

  private fail(seq: Sequence, err: unknown): void {
    this.finish(seq, 'error', err instanceof Error ? err.message : String(err));
  }

  private finish(seq: Sequence, reason: FinishReason, message?: string): void {
    if (seq.phase === 'finished') return;
    seq.phase = 'finished';
    if (seq.table !== undefined) this.pool.release(seq.table);
    this.cache?.finished(seq.id);
    this.counters.finishedTotal[reason]++;
    seq.channel.push({
      type: 'end',
      reason,
      promptTokens: seq.promptLength,
      completionTokens: seq.generated,
      ...(this.cache !== undefined ? { cachedTokens: seq.cachedTokens } : {}),
      ...(message !== undefined ? { message } : {}),
    });
    seq.channel.close();
  }
}
