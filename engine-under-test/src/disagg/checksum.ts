/**
 * A cheap checksum of KV slots (FNV-1a over the float bits of K and V) for `transfer-integrity`: computed
 * when a batch is posted, checked when it lands, so a batch whose source changed in between is dropped.
 */
import { D_HEAD, FLOATS_PER_SLOT, type SlotSource } from '../kv-memory.js';

const bitsCache = new WeakMap<Float32Array, Int32Array>();

function bitsOf(data: Float32Array): Int32Array {
  let bits = bitsCache.get(data);
  if (bits === undefined) {
    bits = new Int32Array(data.buffer, data.byteOffset, data.length);
    bitsCache.set(data, bits);
  }
  return bits;
}

/** Checksum of positions [from, to) mapped through `pages` (position i lives in pages[floor(i / P)]). */
export function slotsChecksum(src: SlotSource, pages: Int32Array, from: number, to: number): number {
  const P = src.pageSize;
  const bits = bitsOf(src.data);
  const pageFloats = P * FLOATS_PER_SLOT;
  let h = 0x811c9dc5 | 0;
  for (let pos = from; pos < to; pos++) {
    const page = pages[Math.floor(pos / P)] as number;
    const slot = pos % P;
    const k = page * pageFloats + slot * D_HEAD;
    const v = k + P * D_HEAD;
    for (let d = 0; d < D_HEAD; d++) {
      h = Math.imul(h ^ (bits[k + d] as number), 16777619);
      h = Math.imul(h ^ (bits[v + d] as number), 16777619);
    }
  }
  return h >>> 0;
}
