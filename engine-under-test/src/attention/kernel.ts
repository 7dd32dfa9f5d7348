/**
 * Attention kernels: softmax(beta * q.k_i) over the first `numPositions` positions named by a page table,
 * output sum_i a_i v_i. One pass over the pages with an online softmax (running max and denominator,
 * rescaled when a page raises the max), so memory is read once, as a real paged-attention decode kernel
 * does. Two implementations with the same contract: a WebAssembly SIMD kernel (the engine's default, it
 * needs the pool to be a WebAssembly.Memory) and a plain JavaScript one (the reference the tests hold the
 * SIMD kernel to, and the fallback for a memory attached through a bare SharedArrayBuffer).
 */
import type { KvMemory } from '../kv-memory.js';
import { createJsKernel } from './js-kernel.js';
import { createWasmKernel, wasmSimdSupported } from './wasm-kernel.js';
import { createSkipKernel, timeKernel } from './skip-kernel.js';

export interface AttentionKernel {
  readonly name: KernelName;
  /**
   * Attends `q` (64 floats) over positions [0, numPositions) of the page table `pages` and writes the
   * normalised output (64 floats) into `out`. `numPositions` must be >= 1 and `pages` must name
   * ceil(numPositions / pageSize) pages.
   */
  attend(pages: Int32Array, numPositions: number, q: Float32Array, beta: number, out: Float32Array): void;
}

export type KernelPreference = 'auto' | 'wasm-simd' | 'js';
/** `full` computes attention; `skip` keeps everything around it and skips the arithmetic (skip-kernel.ts). */
export type AttentionMode = 'full' | 'skip';
export const ATTENTION_MODES: readonly AttentionMode[] = ['full', 'skip'];
export type KernelName = 'wasm-simd' | 'js' | 'skip';

export function createAttentionKernel(memory: KvMemory, prefer: KernelPreference = 'auto', mode: AttentionMode = 'full'): AttentionKernel {
  if (mode === 'skip') return createSkipKernel(memory, timeKernel(memory, createAttentionKernel(memory, prefer)));
  if (prefer === 'js') return createJsKernel(memory);
  if (memory.wasmMemory !== undefined && wasmSimdSupported()) return createWasmKernel(memory);
  if (prefer === 'wasm-simd') {
    throw new Error('the wasm-simd attention kernel needs a KvMemory backed by a WebAssembly.Memory and SIMD support');
  }
  return createJsKernel(memory);
}
