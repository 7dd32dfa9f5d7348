/**
 * The arithmetic-free attention mode (`--attention skip`): for measuring what a run costs an endpoint at
 * full scale on a machine too slow to attend over a million positions per generated token. Everything
 * around the kernel is unchanged — admission, page tables, prefill writing every K and V, the transfer,
 * the ground-truth scan of the pages a read covers, the per-step decode budget, every counter — only the
 * softmax over the positions is not computed. The output is the value at the last attended position (the
 * sequence's own latest token), so generation still yields one token per step, as many as requested, but
 * copies nothing from elsewhere in the context: a run in this mode measures cost, never detection.
 */
import { D_HEAD, FLOATS_PER_SLOT, type KvMemory } from '../kv-memory.js';
import type { AttentionKernel } from './kernel.js';

export function createSkipKernel(memory: KvMemory): AttentionKernel {
  const P = memory.pageSize;
  const pageFloats = P * FLOATS_PER_SLOT;
  const vRegion = P * D_HEAD;

  function attend(pages: Int32Array, numPositions: number, _q: Float32Array, _beta: number, out: Float32Array): void {
    const last = numPositions - 1;
    const page = pages[Math.floor(last / P)] as number;
    const v = page * pageFloats + vRegion + (last % P) * D_HEAD;
    const data = memory.data;
    for (let d = 0; d < D_HEAD; d++) out[d] = data[v + d] as number;
  }

  return { name: 'skip', attend };
}
