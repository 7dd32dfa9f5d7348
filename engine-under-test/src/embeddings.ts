/**
 * The model's pseudo-random vectors, all in 64 dimensions with entries +-1/8 (unit length by
 * construction; two unrelated vectors have dot product ~ N(0, 1/64), an identical pair exactly 1).
 *
 * - n-gram vectors: the key at position i is the vector of the NGRAM tokens before token i, and the query
 *   for the next token is the vector of the last NGRAM tokens. Positions with fewer preceding tokens are
 *   padded with BOS. The 64 signs are the bits of a 64-bit Murmur3-style hash of the n-gram.
 * - token embeddings: one vector per token id (the values, and the unembedding for the logits).
 */
import { fmix32, murmurRound } from './hash.js';
import { BOS, VOCAB_SIZE } from './tokenizer.js';
import { D_HEAD } from './kv-memory.js';

const ENTRY = 1 / Math.sqrt(D_HEAD);

function writeSigns(lo: number, hi: number, out: Float32Array, off: number): void {
  for (let d = 0; d < 32; d++) out[off + d] = ((lo >>> d) & 1) === 1 ? ENTRY : -ENTRY;
  for (let d = 0; d < 32; d++) out[off + 32 + d] = ((hi >>> d) & 1) === 1 ? ENTRY : -ENTRY;
}

/** Writes the vector of the n tokens before index `end` of `tokens` (BOS-padded) at out[off..off+64). */
export function ngramVector(tokens: ArrayLike<number>, end: number, n: number, out: Float32Array, off = 0): void {
  let h1 = 0x3c6ef372 ^ n;
  let h2 = 0x1b873593 ^ Math.imul(n, 0x9e3779b1);
  for (let i = end - n; i < end; i++) {
    const t = i >= 0 ? (tokens[i] as number) : BOS;
    h1 = murmurRound(h1, t);
    h2 = murmurRound(h2, t ^ 0x5bd1e995);
  }
  const lo = fmix32(h1 ^ Math.imul(h2, 0x85ebca77));
  const hi = fmix32(h2 ^ lo);
  writeSigns(lo, hi, out, off);
}

/** VOCAB_SIZE x 64 token embeddings, row-major. */
export function tokenEmbeddings(): Float32Array {
  const table = new Float32Array(VOCAB_SIZE * D_HEAD);
  for (let t = 0; t < VOCAB_SIZE; t++) {
    const lo = fmix32(murmurRound(0x7f4a7c15, t));
    const hi = fmix32(murmurRound(0x2545f491, t) ^ lo);
    writeSigns(lo, hi, table, t * D_HEAD);
  }
  return table;
}
