#!/usr/bin/env node
// Writes a llama-architecture GGUF whose weights are written, not trained, to copy from its context: an
// induction circuit. Greedy decoding continues whatever text in the attended KV is preceded by the same last
// tokens as the current position — so a request whose attention covers another request's cells copies that
// request's text, through llama.cpp's real forward pass.
//   node make-copier-model.mjs VOCAB_GGUF OUT_GGUF [--ctx 32768] [--seed 1]
// VOCAB_GGUF: a vocab-only GGUF whose tokenizer is copied (the snapshot ships models/ggml-vocab-llama-spm.gguf).
// No dependencies.
//
// The circuit (one attention head per layer, FFNs zero):
//   residual = [B: constant 1 | E: the token's code | P1..P7: codes of the 7 previous tokens | C: the copy]
//   Every part is a unit vector, so each RMSNorm divides by a known amount and its weight undoes it.
//   Layers 0-2 are previous-token heads at offsets 1, 2 and 4: they copy [E], [E,P1], [E,P1,P2,P3] of the
//   position that far back into P1, P2-P3, P4-P7 (a doubling window: 3 layers give 7 previous tokens).
//   Layer 3 is the induction head: its query is the window E,P1..P6 of the current position (recent tokens
//   weighted more), its key the window P1..P7 of every cached position (the 7 tokens before it): it attends
//   to the positions that follow the same 7 tokens and copies their token code E into C; the output layer
//   reads C only.
// Positions come from RoPE alone. llama rotates adjacent pairs (n_rot = head_dim) and the optional
// rope_freqs.weight divides each pair's angle, so every pair's speed is set exactly: 14 fast pairs at
// speeds pi*2^-p (a binary code of position: the score of the wanted offset beats any other by at least 2
// units, at any distance up to 16384), one slow pair (a recency tie-break among equal windows), and content
// pairs that never rotate. key_length = value_length widens the head beyond n_embd/n_head.
// Codes have 64 entries of the same magnitude (+-1/8): the KV cache is f16 and rounding hits all alike.
// Single-character tokens (each digit is one in this vocabulary) get exactly orthogonal codes (+-rows of a
// 64x64 Hadamard matrix); all other tokens random sign vectors.
import { writeFileSync } from 'node:fs';
import { GGML, T, readGgufKv, tokenizerKvs, writeGguf } from './gguf.mjs';

const [vocabPath, outPath, ...rest] = process.argv.slice(2);
if (!vocabPath || !outPath) { console.error('usage: make-copier-model.mjs VOCAB_GGUF OUT_GGUF [--ctx N] [--seed N]'); process.exit(64); }
const opt = (name, dflt) => { const i = rest.indexOf(`--${name}`); return i >= 0 ? Number(rest[i + 1]) : dflt; };
const CTX = opt('ctx', 32768);
const SEED = opt('seed', 1);

const vocab = readGgufKv(vocabPath);
const pieces = vocab.get('tokenizer.ggml.tokens')?.v;
if (!pieces) throw new Error(`${vocabPath} has no tokenizer.ggml.tokens`);
const nVocab = pieces.length;

// --- dimensions ---
const D = 64; // code width
const SLOTS = 7; // previous-token slots P1..P7: the induction window is 7 tokens
const OFFSETS = [1, 2, 4]; // previous-token layers; layer k copies 2^k slots from offset 2^k back
const FAST = 14; // positional pairs at speeds pi*2^-p, p < FAST: exact up to 2^FAST positions
const SLOW = FAST; // the recency pair's index
const CONTENT0 = 2 * (FAST + 1); // first content dimension of a head
const H = CONTENT0 + SLOTS * D + 2; // head width (key_length = value_length = n_rot), 480
const B = 0; // residual index of the constant
const slot = (j) => 1 + j * D; // residual start of E (j = 0) and P_j (j = 1..7)
const C = slot(SLOTS + 1); // residual start of the copy
const N_EMBD = Math.ceil((C + D) / 32) * 32; // 608
const N_FF = 32;
const N_LAYER = OFFSETS.length + 1;

// --- scales (pre-softmax scores are multiplied by 1/sqrt(H) = 0.0456) ---
const S_POS = 500; // previous-token heads: wanted offset beats any other by >= 2*500*0.0456 = 45 logits
const S_CONTENT = 160_000; // induction: one mismatched slot (weight >= 0.26) costs >= ~800 logits
const WEIGHTS = Array.from({ length: SLOTS }, (_, j) => 0.8 ** j); // recent tokens weigh more
const S_RECENCY = 12_000; // at most ~550 logits over the whole context: below any content mismatch
const EPS = Math.PI / 2 / 16384; // slow pair: sin(EPS * (m - i)) rises monotonically to the current position
const OUT_SCALE = 40;

// --- token codes ---
let s = SEED >>> 0 || 1;
const rand = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s; };
const hadamard = (r, c) => { let x = r & c, n = 0; while (x) { n += x & 1; x >>= 1; } return n & 1 ? -1 : 1; };
const codes = new Float32Array(nVocab * D);
const single = [];
pieces.forEach((p, t) => { const text = p.replaceAll('\u2581', ' '); if ([...text].length === 1) single.push({ t, ascii: text.charCodeAt(0) < 128 }); });
single.sort((a, b) => Number(b.ascii) - Number(a.ascii) || a.t - b.t);
const orthogonal = new Map(single.slice(0, 2 * D).map((x, k) => [x.t, k]));
for (let t = 0; t < nVocab; t++) {
  const k = orthogonal.get(t);
  for (let c = 0; c < D; c++) {
    const sign = k === undefined ? ((rand() & 1) ? 1 : -1) : hadamard(k % D, c) * (k < D ? 1 : -1);
    codes[t * D + c] = sign / Math.sqrt(D);
  }
}

// --- tensors ---
const tensors = [];
const add = (name, dims, type = GGML.F16) => { const data = new Float32Array(dims.reduce((a, b) => a * b, 1)); tensors.push({ name, dims, data, type }); return data; };
/** An attention matrix stored as ggml {nIn, nOut}, F32 (the induction query's scale is beyond f16): element (out, in) at out * nIn + in. */
const matrix = (name, nIn, nOut) => { const data = add(name, [nIn, nOut], GGML.F32); return { data, set: (out, inp, v) => { data[out * nIn + inp] = v; } }; };

const embd = add('token_embd.weight', [N_EMBD, nVocab]);
for (let t = 0; t < nVocab; t++) {
  embd[t * N_EMBD + B] = 1;
  for (let c = 0; c < D; c++) embd[t * N_EMBD + slot(0) + c] = codes[t * D + c];
}
// Unit vectors in the residual before each layer: B and E, then each layer adds its copies.
const units = [2];
OFFSETS.forEach((off) => units.push(units[units.length - 1] + off));
const speed = (p) => Math.PI * 2 ** -p;

OFFSETS.forEach((off, l) => {
  const p = `blk.${l}.`;
  add(p + 'attn_norm.weight', [N_EMBD], GGML.F32).fill(Math.sqrt(units[l] / N_EMBD));
  const q = matrix(p + 'attn_q.weight', N_EMBD, H);
  const k = matrix(p + 'attn_k.weight', N_EMBD, H);
  const v = matrix(p + 'attn_v.weight', N_EMBD, H);
  const o = matrix(p + 'attn_output.weight', H, N_EMBD);
  for (let f = 0; f < FAST; f++) {
    q.set(2 * f, B, S_POS * Math.cos(-off * speed(f)));
    q.set(2 * f + 1, B, S_POS * Math.sin(-off * speed(f)));
    k.set(2 * f, B, 1);
  }
  // copy slots 0..off-1 (E, P1, ...) of the position `off` back into slots off..2*off-1
  for (let j = 0; j < off; j++) {
    for (let c = 0; c < D; c++) {
      v.set(j * D + c, slot(j) + c, 1);
      o.set(slot(off + j) + c, j * D + c, 1);
    }
  }
});
{
  const l = OFFSETS.length;
  const p = `blk.${l}.`;
  add(p + 'attn_norm.weight', [N_EMBD], GGML.F32).fill(Math.sqrt(units[l] / N_EMBD));
  const q = matrix(p + 'attn_q.weight', N_EMBD, H);
  const k = matrix(p + 'attn_k.weight', N_EMBD, H);
  const v = matrix(p + 'attn_v.weight', N_EMBD, H);
  const o = matrix(p + 'attn_output.weight', H, N_EMBD);
  for (let j = 0; j < SLOTS; j++) {
    for (let c = 0; c < D; c++) {
      q.set(CONTENT0 + j * D + c, slot(j) + c, S_CONTENT * WEIGHTS[j]);
      k.set(CONTENT0 + j * D + c, slot(j + 1) + c, 1);
    }
  }
  q.set(2 * SLOW + 1, B, S_RECENCY); // q = (0, s): score s * sin(EPS * (m - i))
  k.set(2 * SLOW, B, 1);
  for (let c = 0; c < D; c++) {
    v.set(c, slot(0) + c, 1);
    o.set(C + c, c, 1);
  }
}
for (let l = 0; l < N_LAYER; l++) {
  const p = `blk.${l}.`;
  add(p + 'ffn_norm.weight', [N_EMBD], GGML.F32).fill(1);
  add(p + 'ffn_gate.weight', [N_EMBD, N_FF]);
  add(p + 'ffn_up.weight', [N_EMBD, N_FF]);
  add(p + 'ffn_down.weight', [N_FF, N_EMBD]);
}
add('output_norm.weight', [N_EMBD], GGML.F32).fill(Math.sqrt((units[units.length - 1] + 1) / N_EMBD));
const out = add('output.weight', [N_EMBD, nVocab]);
for (let t = 0; t < nVocab; t++) for (let c = 0; c < D; c++) out[t * N_EMBD + C + c] = OUT_SCALE * codes[t * D + c];

// rope_freqs: pair f turns by pos * base^(-2f/H) / factor[f]; the factor sets each pair's speed exactly.
const BASE = 10000;
const freqs = add('rope_freqs.weight', [H / 2], GGML.F32);
for (let f = 0; f < H / 2; f++) {
  const natural = BASE ** (-2 * f / H);
  const want = f < FAST ? speed(f) : f === SLOW ? EPS : 0;
  freqs[f] = want === 0 ? 1e30 : natural / want;
}

const kvs = [
  ['general.architecture', T.STR, 'llama'],
  ['general.name', T.STR, 'kvcanary-copier'],
  ['general.file_type', T.U32, 1],
  ['llama.context_length', T.U32, CTX],
  ['llama.embedding_length', T.U32, N_EMBD],
  ['llama.block_count', T.U32, N_LAYER],
  ['llama.feed_forward_length', T.U32, N_FF],
  ['llama.attention.head_count', T.U32, 1],
  ['llama.attention.head_count_kv', T.U32, 1],
  ['llama.attention.key_length', T.U32, H],
  ['llama.attention.value_length', T.U32, H],
  ['llama.attention.layer_norm_rms_epsilon', T.F32, 1e-6],
  ['llama.rope.dimension_count', T.U32, H],
  ['llama.rope.freq_base', T.F32, BASE],
  ['llama.vocab_size', T.U32, nVocab],
  ...tokenizerKvs(vocab, vocabPath),
];
const bytes = writeGguf(kvs, tensors);
writeFileSync(outPath, bytes);
console.log(`${outPath}: copier, ${N_LAYER} layers of 1 head of width ${H}, n_embd ${N_EMBD}, vocab ${nVocab} (${orthogonal.size} orthogonal codes), context ${CTX}, ${(bytes.length / 1e6).toFixed(1)} MB`);
