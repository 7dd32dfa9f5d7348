/**
 * Reference attention kernel in plain JavaScript (float64 arithmetic). Same algorithm as the SIMD kernel:
 * per page, scores for its slots, rescale when the page raises the running max, then accumulate V.
 */
import { D_HEAD, FLOATS_PER_SLOT, type KvMemory } from '../kv-memory.js';
import type { AttentionKernel } from './kernel.js';

export function createJsKernel(memory: KvMemory): AttentionKernel {
  const P = memory.pageSize;
  const pageFloats = P * FLOATS_PER_SLOT;
  const vRegion = P * D_HEAD;
  const scores = new Float64Array(P);
  const o = new Float64Array(D_HEAD);
  const qd = new Float64Array(D_HEAD);

  function attend(pages: Int32Array, numPositions: number, q: Float32Array, beta: number, out: Float32Array): void {
    const data = memory.data;
    const pageCount = Math.ceil(numPositions / P);
    for (let d = 0; d < D_HEAD; d++) qd[d] = q[d] as number;
    o.fill(0);
    let m = -Infinity;
    let l = 0;
    for (let i = 0; i < pageCount; i++) {
      const base = (pages[i] as number) * pageFloats;
      const n = i === pageCount - 1 ? numPositions - i * P : P;
      let pm = -Infinity;
      for (let j = 0; j < n; j++) {
        const k = base + j * D_HEAD;
        let a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (let d = 0; d < D_HEAD; d += 4) {
          a0 += (data[k + d] as number) * (qd[d] as number);
          a1 += (data[k + d + 1] as number) * (qd[d + 1] as number);
          a2 += (data[k + d + 2] as number) * (qd[d + 2] as number);
          a3 += (data[k + d + 3] as number) * (qd[d + 3] as number);
        }
        const s = (a0 + a1 + (a2 + a3)) * beta;
        scores[j] = s;
        if (s > pm) pm = s;
      }
      if (pm > m) {
        const f = Math.exp(m - pm);
        l *= f;
        for (let d = 0; d < D_HEAD; d++) o[d] = (o[d] as number) * f;
        m = pm;
      }
      const vb = base + vRegion;
      for (let j = 0; j < n; j++) {
        const w = Math.exp((scores[j] as number) - m);
        l += w;
        const v = vb + j * D_HEAD;
        for (let d = 0; d < D_HEAD; d++) o[d] = (o[d] as number) + w * (data[v + d] as number);
      }
    }
    for (let d = 0; d < D_HEAD; d++) out[d] = (o[d] as number) / l;
  }

  return { name: 'js', attend };
}
