/**
 * The decode attention kernel in WebAssembly SIMD, emitted at start-up by `wasm-assembler.ts`.
 *
 * Why not plain JavaScript: a scalar JS loop does a multiply and an add per float it reads, and measures
 * at well under half the speed of a plain streaming read of the same bytes; f32x4 lanes bring the kernel
 * to the memory-bandwidth regime a real paged-attention kernel lives in (see `npm run bench:engine`).
 *
 * Data flow per call: the caller copies the page table and q into its scratch area (inside the same
 * memory), the kernel walks the pages and leaves the unnormalised output in the scratch area and returns
 * the softmax denominator. Per page:
 *   1. scores s_j = beta * (q . k_j) for its n slots (16 f32x4 products, summed as a tree for ILP);
 *   2. if the page's max exceeds the running max m: scale o and l by exp(m - max), m = max;
 *   3. w_j = exp(s_j - m), 4 at a time (slots past n are padded with -inf, so their weight is exactly 0);
 *   4. o += sum_j w_j v_j, one 4-float column of o at a time across the page's slots (4 slots per step;
 *      a page always has a multiple of 4 slots, so the padded slots exist and contribute 0).
 * exp is a vectorised Cephes-style expf: range reduction by ln 2, degree-7 polynomial, exponent bits.
 */
import { Code, ValType, encodeModule } from './wasm-assembler.js';
import { D_HEAD, FLOATS_PER_SLOT, type KvMemory } from '../kv-memory.js';
import type { AttentionKernel } from './kernel.js';

const { i32, f32, v128 } = ValType;

let simdSupport: boolean | undefined;

/** Whether this runtime validates a module using the SIMD instructions the kernel needs. */
export function wasmSimdSupported(): boolean {
  if (simdSupport === undefined) {
    try {
      simdSupport = WebAssembly.validate(buildModule(1, false));
    } catch {
      simdSupport = false;
    }
  }
  return simdSupport;
}

function emitExp4(): Code {
  const c = new Code(1);
  const x = 0;
  const mask = c.local(v128);
  const n = c.local(v128);
  const r = c.local(v128);
  c.local_get(x).f32x4_const(-87).f32x4_lt().local_set(mask);
  c.local_get(x).f32x4_const(-87).f32x4_max().f32x4_const(88).f32x4_min().local_set(x);
  c.local_get(x).f32x4_const(Math.LOG2E).f32x4_mul().f32x4_nearest().local_set(n);
  c.local_get(x).local_get(n).f32x4_const(0.693359375).f32x4_mul().f32x4_sub();
  c.local_get(n).f32x4_const(-2.12194440e-4).f32x4_mul().f32x4_sub().local_set(r);
  // Horner: 1 + r(1 + r(1/2 + r(1/6 + ... + r/7!)))
  const coefficients = [1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2, 1, 1];
  c.f32x4_const(coefficients[0] as number);
  for (const k of coefficients.slice(1)) c.local_get(r).f32x4_mul().f32x4_const(k).f32x4_add();
  c.local_get(n).i32x4_trunc_sat_f32x4_s().i32x4_const(127).i32x4_add().i32_const(23).i32x4_shl();
  c.f32x4_mul();
  c.local_get(mask).v128_andnot();
  return c;
}

const EXP4 = 0;
/** One cache line. */
const TOUCH_STRIDE = 64;

function emitAttend(): Code {
  // params
  const PT = 0, NPAGES = 1, LASTN = 2, PAGESIZE = 3, DATA = 4, PAGEBYTES = 5, VBYTES = 6, BETA = 7, Q = 8, O = 9, S = 10;
  const c = new Code(11);
  const q = Array.from({ length: D_HEAD / 4 }, () => c.local(v128));
  const pi = c.local(i32);
  const base = c.local(i32);
  const n = c.local(i32);
  const kp = c.local(i32);
  const sp = c.local(i32);
  const send = c.local(i32);
  const vp = c.local(i32);
  const acc = c.local(v128);
  const lacc = c.local(v128);
  const mv = c.local(v128);
  const s = c.local(f32);
  const pm = c.local(f32);
  const m = c.local(f32);
  const l = c.local(f32);
  const f = c.local(f32);
  const touch = c.local(f32);

  const chunks = D_HEAD / 4;
  const slotBytes = D_HEAD * 4;

  for (let k = 0; k < chunks; k++) c.local_get(Q).v128_load(16 * k).local_set(q[k] as number);
  for (let k = 0; k < chunks; k++) c.local_get(O).f32x4_const(0).v128_store(16 * k);
  c.f32_const(-Infinity).local_set(m);
  c.f32_const(0).local_set(l);
  c.i32_const(0).local_set(pi);

  // Sum of products q_k * K[kp + 16k] over k in [lo, hi), as a balanced tree (short dependency chains).
  const dotTree = (lo: number, hi: number): void => {
    if (hi - lo === 1) {
      c.local_get(kp).v128_load(16 * lo).local_get(q[lo] as number).f32x4_mul();
      return;
    }
    const mid = (lo + hi) >> 1;
    dotTree(lo, mid);
    dotTree(mid, hi);
    c.f32x4_add();
  };

  c.block().loop(); // pages
  {
    c.local_get(pi).local_get(NPAGES).i32_ge_u().br_if(1);
    c.local_get(DATA)
      .local_get(PT).local_get(pi).i32_const(4).i32_mul().i32_add().i32_load(0)
      .local_get(PAGEBYTES).i32_mul().i32_add().local_set(base);
    c.local_get(LASTN).local_get(PAGESIZE)
      .local_get(pi).i32_const(1).i32_add().local_get(NPAGES).i32_eq()
      .select().local_set(n);
    // Touch every cache line of the next page before working on this one (wasm has no prefetch
    // instruction). After churn a long sequence's pages are scattered over the pool, the hardware
    // prefetcher stops at page boundaries, and independent loads issued here overlap the next page's
    // misses with this page's arithmetic. Measured: scattered tables go from ~0.6 to ~0.9 of a streaming
    // read; contiguous ones are unaffected. The last page touches itself.
    c.local_get(DATA)
      .local_get(PT)
      .local_get(pi).i32_const(1).i32_add()
      .local_get(NPAGES).i32_const(1).i32_sub()
      .local_get(pi).i32_const(1).i32_add().local_get(NPAGES).i32_lt_u()
      .select()
      .i32_const(4).i32_mul().i32_add().i32_load(0)
      .local_get(PAGEBYTES).i32_mul().i32_add().local_tee(vp)
      .local_get(PAGEBYTES).i32_add().local_set(kp);
    c.block().loop();
    {
      c.local_get(vp).local_get(kp).i32_ge_u().br_if(1);
      c.local_get(touch).local_get(vp).f32_load(0).f32_add().local_set(touch);
      c.local_get(vp).i32_const(TOUCH_STRIDE).i32_add().local_set(vp);
      c.br(0);
    }
    c.end().end();

    // 1. scores
    c.f32_const(-Infinity).local_set(pm);
    c.local_get(base).local_set(kp);
    c.local_get(S).local_set(sp);
    c.local_get(S).local_get(n).i32_const(4).i32_mul().i32_add().local_set(send);
    c.block().loop();
    {
      c.local_get(sp).local_get(send).i32_ge_u().br_if(1);
      dotTree(0, chunks);
      c.local_tee(acc).f32x4_extract_lane(0).local_get(acc).f32x4_extract_lane(1).f32_add();
      c.local_get(acc).f32x4_extract_lane(2).local_get(acc).f32x4_extract_lane(3).f32_add().f32_add();
      c.local_get(BETA).f32_mul().local_set(s);
      c.local_get(sp).local_get(s).f32_store(0);
      c.local_get(pm).local_get(s).f32_max().local_set(pm);
      c.local_get(kp).i32_const(slotBytes).i32_add().local_set(kp);
      c.local_get(sp).i32_const(4).i32_add().local_set(sp);
      c.br(0);
    }
    c.end().end();
    for (let pad = 0; pad < 3; pad++) c.local_get(send).f32_const(-Infinity).f32_store(4 * pad);

    // 2. rescale
    c.local_get(pm).local_get(m).f32_gt().if_();
    {
      c.local_get(m).local_get(pm).f32_sub().f32x4_splat().call(EXP4).f32x4_extract_lane(0).local_set(f);
      c.local_get(l).local_get(f).f32_mul().local_set(l);
      for (let k = 0; k < chunks; k++) {
        c.local_get(O).local_get(O).v128_load(16 * k).local_get(f).f32x4_splat().f32x4_mul().v128_store(16 * k);
      }
      c.local_get(pm).local_set(m);
    }
    c.end();

    // 3. weights
    c.local_get(m).f32x4_splat().local_set(mv);
    c.f32x4_const(0).local_set(lacc);
    c.local_get(S).local_set(sp);
    c.block().loop();
    {
      c.local_get(sp).local_get(send).i32_ge_u().br_if(1);
      c.local_get(sp).local_get(sp).v128_load(0).local_get(mv).f32x4_sub().call(EXP4).local_tee(acc).v128_store(0);
      c.local_get(lacc).local_get(acc).f32x4_add().local_set(lacc);
      c.local_get(sp).i32_const(16).i32_add().local_set(sp);
      c.br(0);
    }
    c.end().end();
    c.local_get(l)
      .local_get(lacc).f32x4_extract_lane(0).local_get(lacc).f32x4_extract_lane(1).f32_add()
      .local_get(lacc).f32x4_extract_lane(2).local_get(lacc).f32x4_extract_lane(3).f32_add().f32_add()
      .f32_add().local_set(l);

    // 4. o += sum_j w_j v_j, column by column
    for (let k = 0; k < chunks; k++) {
      c.local_get(O).v128_load(16 * k).local_set(acc);
      c.local_get(base).local_get(VBYTES).i32_add().i32_const(16 * k).i32_add().local_set(vp);
      c.local_get(S).local_set(sp);
      c.block().loop();
      {
        c.local_get(sp).local_get(send).i32_ge_u().br_if(1);
        c.local_get(acc);
        c.local_get(sp).v128_load32_splat(0).local_get(vp).v128_load(0).f32x4_mul();
        c.local_get(sp).v128_load32_splat(4).local_get(vp).v128_load(slotBytes).f32x4_mul().f32x4_add();
        c.local_get(sp).v128_load32_splat(8).local_get(vp).v128_load(2 * slotBytes).f32x4_mul();
        c.local_get(sp).v128_load32_splat(12).local_get(vp).v128_load(3 * slotBytes).f32x4_mul().f32x4_add();
        c.f32x4_add().f32x4_add().local_set(acc);
        c.local_get(sp).i32_const(16).i32_add().local_set(sp);
        c.local_get(vp).i32_const(4 * slotBytes).i32_add().local_set(vp);
        c.br(0);
      }
      c.end().end();
      c.local_get(O).local_get(acc).v128_store(16 * k);
    }

    c.local_get(pi).i32_const(1).i32_add().local_set(pi);
    c.br(0);
  }
  c.end().end();
  // Keep the touches observable so they are not optimised away (the scores scratch is free now).
  c.local_get(S).local_get(touch).f32_store(0);
  c.local_get(l);
  return c;
}

function buildModule(wasmPages: number, shared: boolean): Uint8Array {
  return encodeModule(
    { module: 'env', name: 'memory', initialPages: wasmPages, maximumPages: wasmPages, shared },
    [
      { params: [v128], results: [v128], code: emitExp4() },
      {
        name: 'attend',
        params: [i32, i32, i32, i32, i32, i32, i32, f32, i32, i32, i32],
        results: [f32],
        code: emitAttend(),
      },
    ],
  );
}

type AttendExport = (
  pt: number, nPages: number, lastN: number, pageSize: number, data: number, pageBytes: number,
  vBytes: number, beta: number, q: number, o: number, s: number,
) => number;

export interface WasmKernel extends AttentionKernel {
  /** exp of 4 floats through the kernel's own exp (exposed for its accuracy test). */
  exp4(x: Float32Array): Float32Array;
}

export function createWasmKernel(memory: KvMemory): WasmKernel {
  const wasmMemory = memory.wasmMemory;
  if (wasmMemory === undefined) throw new Error('the SIMD kernel needs a KvMemory backed by a WebAssembly.Memory');
  const layout = memory.layout;
  const shared = wasmMemory.buffer instanceof SharedArrayBuffer;
  const module = new WebAssembly.Module(buildModule(layout.wasmPages, shared));
  const instance = new WebAssembly.Instance(module, { env: { memory: wasmMemory } });
  const attendWasm = instance.exports['attend'] as AttendExport;

  const area = memory.claimScratchArea();
  const qOff = area + layout.scratch.q;
  const oOff = area + layout.scratch.o;
  const sOff = area + layout.scratch.scores;
  const ptOff = area + layout.scratch.pageTable;
  const buffer = memory.buffer;
  const qView = new Float32Array(buffer, qOff, D_HEAD);
  const oView = new Float32Array(buffer, oOff, D_HEAD);
  const sView = new Float32Array(buffer, sOff, layout.pageSize + 4);
  const ptView = new Int32Array(buffer, ptOff, layout.numPages);
  const P = layout.pageSize;
  const pageBytes = P * FLOATS_PER_SLOT * 4;
  const vBytes = P * D_HEAD * 4;

  function attend(pages: Int32Array, numPositions: number, q: Float32Array, beta: number, out: Float32Array): void {
    const pageCount = Math.ceil(numPositions / P);
    if (numPositions < 1 || pageCount > pages.length || pageCount > layout.numPages) {
      throw new RangeError(`attend: ${numPositions} positions need ${pageCount} pages, the table has ${pages.length}`);
    }
    ptView.set(pages.length === pageCount ? pages : pages.subarray(0, pageCount));
    qView.set(q);
    const l = attendWasm(ptOff, pageCount, numPositions - (pageCount - 1) * P, P, layout.dataOffset, pageBytes, vBytes, beta, qOff, oOff, sOff);
    for (let d = 0; d < D_HEAD; d++) out[d] = (oView[d] as number) / l;
  }

  // v128 values cannot cross into JS, so exp4 is evaluated in place by a tiny module built from the same emitter.
  function exp4(x: Float32Array): Float32Array {
    const helper = new WebAssembly.Instance(
      new WebAssembly.Module(exp4TestModule(layout.wasmPages, shared)),
      { env: { memory: wasmMemory } },
    ).exports['exp4_at'] as (addr: number) => void;
    sView.set(x.subarray(0, 4));
    helper(sOff);
    return Float32Array.from(sView.subarray(0, 4));
  }

  return { name: 'wasm-simd', attend, exp4 };
}

/** A module exporting exp4_at(addr): memory[addr..addr+16) = exp4(memory[addr..addr+16)). Tests only. */
function exp4TestModule(wasmPages: number, shared: boolean): Uint8Array {
  const at = new Code(1);
  at.local_get(0).local_get(0).v128_load(0).call(0).v128_store(0);
  return encodeModule(
    { module: 'env', name: 'memory', initialPages: wasmPages, maximumPages: wasmPages, shared },
    [
      { params: [v128], results: [v128], code: emitExp4() },
      { name: 'exp4_at', params: [i32], results: [], code: at },
    ],
  );
}
