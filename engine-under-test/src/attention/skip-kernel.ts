/**
 * The arithmetic-free attention mode (`--attention skip`): for measuring what a run costs an endpoint at
 * full scale on a machine too slow, or too shared, to attend over a million positions per generated token.
 * Everything around the kernel is unchanged — admission, page tables, prefill writing every K and V, the
 * transfer, the ground-truth scan of the pages a read covers, the per-step decode budget, every counter —
 * only the softmax over the positions is not computed. The output is the value at the last attended
 * position (the sequence's own latest token), so generation still yields one token per step, as many as
 * requested, but copies nothing from elsewhere in the context: a run in this mode measures cost, never
 * detection.
 *
 * Time is kept: at creation the real kernel is timed over up to 65,536 positions (best of three), and each
 * read then sleeps (Atomics.wait: the thread blocks without using a core) as long as the arithmetic would
 * have taken. Decode runs at the real kernel's pace, so what depends on it — how many tokens a long
 * generation reaches before it is aborted, where an abort timed from a time to first token lands — is what
 * it would be with the arithmetic, on an idle core.
 */
import { D_HEAD, FLOATS_PER_SLOT, type KvMemory } from '../kv-memory.js';
import type { AttentionKernel } from './kernel.js';

/** Nanoseconds per attended position of `real`, best of three reads over up to 65,536 positions. */
export function timeKernel(memory: KvMemory, real: AttentionKernel): number {
  const pages = Math.min(memory.numPages, 4096);
  const table = Int32Array.from({ length: pages }, (_, i) => i);
  const positions = pages * memory.pageSize;
  const q = new Float32Array(D_HEAD).fill(0.125);
  const out = new Float32Array(D_HEAD);
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    const t0 = process.hrtime.bigint();
    real.attend(table, positions, q, 20, out);
    best = Math.min(best, Number(process.hrtime.bigint() - t0));
  }
  return best / positions;
}

export function createSkipKernel(memory: KvMemory, nsPerPosition: number): AttentionKernel {
  const P = memory.pageSize;
  const pageFloats = P * FLOATS_PER_SLOT;
  const vRegion = P * D_HEAD;
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  // Sleeps shorter than a millisecond are owed and paid together.
  let owedNs = 0;

  function attend(pages: Int32Array, numPositions: number, _q: Float32Array, _beta: number, out: Float32Array): void {
    const last = numPositions - 1;
    const page = pages[Math.floor(last / P)] as number;
    const v = page * pageFloats + vRegion + (last % P) * D_HEAD;
    const data = memory.data;
    for (let d = 0; d < D_HEAD; d++) out[d] = data[v + d] as number;
    owedNs += numPositions * nsPerPosition;
    if (owedNs >= 1e6) {
      const t0 = process.hrtime.bigint();
      Atomics.wait(sleeper, 0, 0, owedNs / 1e6);
      owedNs -= Number(process.hrtime.bigint() - t0);
    }
  }

  return { name: 'skip', attend };
}
