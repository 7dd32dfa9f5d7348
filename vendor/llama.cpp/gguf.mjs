// GGUF v3 reading (the key/value section) and writing, for the model scripts beside this file. No dependencies.
import { readFileSync } from 'node:fs';

export const T = { U8: 0, I8: 1, U16: 2, I16: 3, U32: 4, I32: 5, F32: 6, BOOL: 7, STR: 8, ARR: 9, U64: 10, I64: 11, F64: 12 };
/** ggml tensor types used here. */
export const GGML = { F32: 0, F16: 1 };

/** The key/value section of a GGUF file, as a Map key -> { t, et?, v }. */
export function readGgufKv(path) {
  const buf = readFileSync(path);
  let o = 0;
  const u32 = () => { const v = buf.readUInt32LE(o); o += 4; return v; };
  const u64 = () => { const v = Number(buf.readBigUInt64LE(o)); o += 8; return v; };
  const str = () => { const n = u64(); const s = buf.toString('utf8', o, o + n); o += n; return s; };
  const scalar = (t) => {
    switch (t) {
      case T.U8: return buf.readUInt8(o++);
      case T.I8: return buf.readInt8(o++);
      case T.U16: { const v = buf.readUInt16LE(o); o += 2; return v; }
      case T.I16: { const v = buf.readInt16LE(o); o += 2; return v; }
      case T.U32: return u32();
      case T.I32: { const v = buf.readInt32LE(o); o += 4; return v; }
      case T.F32: { const v = buf.readFloatLE(o); o += 4; return v; }
      case T.BOOL: return buf.readUInt8(o++) !== 0;
      case T.STR: return str();
      case T.U64: return u64();
      case T.I64: { const v = Number(buf.readBigInt64LE(o)); o += 8; return v; }
      case T.F64: { const v = buf.readDoubleLE(o); o += 8; return v; }
      default: throw new Error(`unknown GGUF type ${t}`);
    }
  };
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error(`${path}: not a GGUF file`);
  o = 4;
  const version = u32();
  if (version < 2) throw new Error(`${path}: GGUF version ${version} is not supported`);
  u64(); // tensors
  const nKv = u64();
  const kv = new Map();
  for (let i = 0; i < nKv; i++) {
    const key = str();
    const t = u32();
    if (t === T.ARR) {
      const et = u32();
      const n = u64();
      const a = new Array(n);
      for (let j = 0; j < n; j++) a[j] = scalar(et);
      kv.set(key, { t, et, v: a });
    } else kv.set(key, { t, v: scalar(t) });
  }
  return kv;
}

/** IEEE half from a float (round to nearest even), as a uint16. */
export function toHalf(f) {
  const b = new DataView(new ArrayBuffer(4));
  b.setFloat32(0, f);
  const x = b.getUint32(0);
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) throw new Error(`${f} does not fit in a half`);
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
  return sign | h;
}

/**
 * Writes a GGUF v3 file: `kvs` as [key, type, value, elementType?], `tensors` as { name, dims, data:
 * Float32Array, type: GGML.F32 | GGML.F16 }. Returns the bytes.
 */
export function writeGguf(kvs, tensors) {
  const ALIGN = 32;
  const parts = [];
  let len = 0;
  const push = (b) => { parts.push(b); len += b.length; };
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); push(b); };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); push(b); };
  const str = (s) => { const b = Buffer.from(s, 'utf8'); u64(b.length); push(b); };
  const value = (t, v) => {
    switch (t) {
      case T.U32: return u32(v);
      case T.I32: { const b = Buffer.alloc(4); b.writeInt32LE(v); return push(b); }
      case T.F32: { const b = Buffer.alloc(4); b.writeFloatLE(v); return push(b); }
      case T.BOOL: return push(Buffer.from([v ? 1 : 0]));
      case T.STR: return str(v);
      default: throw new Error(`writer: type ${t} not needed here`);
    }
  };
  const pad = () => { const n = (ALIGN - (len % ALIGN)) % ALIGN; if (n) push(Buffer.alloc(n)); };
  const bytesOf = (t) => {
    if ((t.type ?? GGML.F32) === GGML.F32) return Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    const b = Buffer.alloc(t.data.length * 2);
    for (let i = 0; i < t.data.length; i++) b.writeUInt16LE(t.data[i] === 0 ? 0 : toHalf(t.data[i]), i * 2);
    return b;
  };
  push(Buffer.from('GGUF', 'latin1'));
  u32(3);
  u64(tensors.length);
  u64(kvs.length);
  for (const [k, t, v, et] of kvs) {
    str(k);
    u32(t);
    if (t === T.ARR) { u32(et); u64(v.length); for (const x of v) value(et, x); } else value(t, v);
  }
  const blobs = tensors.map(bytesOf);
  let offset = 0;
  tensors.forEach((t, i) => {
    str(t.name);
    u32(t.dims.length);
    for (const d of t.dims) u64(d);
    u32(t.type ?? GGML.F32);
    u64(offset);
    offset += blobs[i].length;
    offset += (ALIGN - (offset % ALIGN)) % ALIGN;
  });
  pad();
  for (const b of blobs) { push(b); pad(); }
  return Buffer.concat(parts, len);
}

/** The tokenizer keys of a vocab GGUF, ready for writeGguf. */
export function tokenizerKvs(vocab, vocabPath) {
  const need = (k) => { const e = vocab.get(k); if (!e) throw new Error(`${vocabPath} has no ${k}`); return e; };
  return [
    ['tokenizer.ggml.model', T.STR, need('tokenizer.ggml.model').v],
    ['tokenizer.ggml.pre', T.STR, vocab.get('tokenizer.ggml.pre')?.v ?? 'default'],
    ['tokenizer.ggml.tokens', T.ARR, need('tokenizer.ggml.tokens').v, T.STR],
    ['tokenizer.ggml.scores', T.ARR, need('tokenizer.ggml.scores').v, T.F32],
    ['tokenizer.ggml.token_type', T.ARR, need('tokenizer.ggml.token_type').v, T.I32],
    ['tokenizer.ggml.bos_token_id', T.U32, need('tokenizer.ggml.bos_token_id').v],
    ['tokenizer.ggml.eos_token_id', T.U32, need('tokenizer.ggml.eos_token_id').v],
    ['tokenizer.ggml.unknown_token_id', T.U32, vocab.get('tokenizer.ggml.unknown_token_id')?.v ?? 0],
    ['tokenizer.ggml.add_bos_token', T.BOOL, true],
    ['tokenizer.ggml.add_eos_token', T.BOOL, false],
    ['tokenizer.chat_template', T.STR,
      "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"],
  ];
}
