/**
 * The model: one layer, one head, attention only, an induction (copy) head.
 *
 *   key_i   = vector of the NGRAM tokens before token i          (embeddings.ts)
 *   value_i = embedding of token i
 *   query   = vector of the last NGRAM tokens of the sequence
 *   o       = sum_i softmax(beta * query . key_i) value_i   over every position the page table covers
 *   logits  = logitScale * E . o                              over the 256 byte tokens
 *
 * A query equals exactly the keys of the positions that followed the same n-gram earlier, so attention
 * concentrates there and the logits favour the token that came next: the model continues text by copying.
 * Unrelated keys score ~N(0, 1/64); at beta = 20 a single exact match still holds ~95% of the attention
 * over 1,048,576 random positions (exp(20) against 2^20 * exp(20^2 / 128)). Without a match the output is
 * a blur of many positions' tokens, i.e. the text degenerates instead of reproducing anything.
 *
 * Nothing here knows about requests beyond the ids it stamps and checks: whatever the page table points
 * at is attended, and every read of another request's data is reported to the ground-truth sink.
 * Prefill is O(L * d): the only layer's output is needed at the last position alone, so prefill writes
 * K and V for every prompt position and attends once.
 */
import { D_HEAD, type KvMemory } from './kv-memory.js';
import { ngramVector, tokenEmbeddings } from './embeddings.js';
import { BYTE_TOKENS } from './tokenizer.js';
import { createAttentionKernel, type AttentionKernel, type AttentionMode, type KernelPreference } from './attention/kernel.js';

export interface ModelConfig {
  /** Tokens in the n-gram that keys and queries encode. @default 8 */
  ngram: number;
  /** Attention sharpness in softmax(beta * q.k). @default 20 */
  beta: number;
  /** logits = logitScale * E.o; sets how peaked sampling at temperature 1 is. @default 16 */
  logitScale: number;
}

export const DEFAULT_MODEL_CONFIG: Readonly<ModelConfig> = { ngram: 8, beta: 20, logitScale: 16 };

/** One attention read that covered data written by other requests (ground truth). */
export interface ForeignRead {
  pages: number[];
  writers: number[];
}
export type ForeignReadSink = (reader: number, read: ForeignRead) => void;

export interface InductionModelOptions {
  config?: Partial<ModelConfig>;
  kernel?: KernelPreference;
  /** `skip`: no attention arithmetic (attention/skip-kernel.ts), for cost runs. @default 'full' */
  attention?: AttentionMode;
  onForeignRead?: ForeignReadSink;
  /**
   * Another thread writes this memory (the disaggregated transfer): take the ground-truth scan and the
   * kernel under the pages' locks, so no write lands between them (KvMemory.readFenced).
   */
  fenceReads?: boolean;
}

export class InductionModel {
  readonly config: ModelConfig;
  readonly kernel: AttentionKernel;
  private readonly embeddings = tokenEmbeddings();
  private readonly key = new Float32Array(D_HEAD);
  private readonly query = new Float32Array(D_HEAD);
  private readonly out = new Float32Array(D_HEAD);
  private readonly onForeignRead: ForeignReadSink | undefined;
  private readonly fenceReads: boolean;

  constructor(readonly memory: KvMemory, options: InductionModelOptions = {}) {
    this.config = { ...DEFAULT_MODEL_CONFIG, ...options.config };
    if (!Number.isInteger(this.config.ngram) || this.config.ngram < 1) throw new RangeError('ngram must be an integer >= 1');
    this.kernel = createAttentionKernel(memory, options.kernel, options.attention);
    this.onForeignRead = options.onForeignRead;
    this.fenceReads = options.fenceReads ?? false;
  }

  /**
   * Writes K and V for positions [from, to) of `tokens` into the slots `pages` maps them to, stamped with
   * `writer`. `writerGens[i]`, when given, is the generation the writer believes page table entry i has
   * (the disaggregated transfer path passes what it was told at bootstrap); otherwise the page's current one.
   */
  writeKv(pages: Int32Array, tokens: ArrayLike<number>, from: number, to: number, writer: number, writerGens?: Int32Array): void {
    const memory = this.memory;
    const P = memory.pageSize;
    const n = this.config.ngram;
    const key = this.key;
    const table = this.embeddings;
    let index = Math.floor(from / P);
    let slot = from - index * P;
    for (let pos = from; pos < to; pos++) {
      const page = pages[index] as number;
      ngramVector(tokens, pos, n, key, 0);
      const gen = writerGens !== undefined ? (writerGens[index] as number) : (memory.generation[page] as number);
      memory.writeKv(page, slot, key, 0, table, (tokens[pos] as number) * D_HEAD, writer, gen);
      if (++slot === P) {
        slot = 0;
        index++;
      }
    }
  }

  /**
   * Logits (256 byte tokens) for the token after tokens[0, length), attending over positions
   * [0, attendPositions) of `pages` as `reader`. A correct engine passes attendPositions = positions whose
   * KV it wrote; the incident's decode passed every prompt position of its reservation.
   */
  nextLogits(pages: Int32Array, tokens: ArrayLike<number>, length: number, attendPositions: number, reader: number, logits: Float32Array): void {
    const { ngram, beta, logitScale } = this.config;
    ngramVector(tokens, length, ngram, this.query, 0);
    const o = this.out;
    // Ground truth is taken from the same bytes the kernel reads: under the page locks when another thread writes.
    const read = (): ForeignRead | undefined => {
      const foreign = this.memory.foreignReads(pages, attendPositions, reader);
      this.kernel.attend(pages, attendPositions, this.query, beta, o);
      return foreign;
    };
    const foreign = this.fenceReads ? this.memory.readFenced(pages, attendPositions, read) : read();
    if (foreign !== undefined) this.onForeignRead?.(reader, foreign);
    const table = this.embeddings;
    for (let t = 0; t < BYTE_TOKENS; t++) {
      let acc = 0;
      const e = t * D_HEAD;
      for (let d = 0; d < D_HEAD; d++) acc += (table[e + d] as number) * (o[d] as number);
      logits[t] = logitScale * acc;
    }
  }
}
