/**
 * Token selection from logits: greedy at temperature 0 (ties go to the lowest id, so it is deterministic),
 * otherwise softmax(logits / T) restricted to the top-p nucleus, drawn from a per-request seeded stream.
 */
import { mulberry32 } from './hash.js';

export interface SamplingParams {
  /** 0 = greedy. */
  temperature: number;
  /** Nucleus mass in (0, 1]. */
  topP: number;
  seed: number;
}

export type Sampler = (logits: Float32Array) => number;

export function createSampler(params: SamplingParams): Sampler {
  const { temperature, topP } = params;
  if (temperature === 0) return argmax;
  const random = mulberry32(params.seed);
  let probs: Float64Array | undefined;
  let order: number[] | undefined;
  return (logits) => {
    const n = logits.length;
    probs ??= new Float64Array(n);
    let max = -Infinity;
    for (let i = 0; i < n; i++) if ((logits[i] as number) > max) max = logits[i] as number;
    let total = 0;
    for (let i = 0; i < n; i++) {
      const p = Math.exp(((logits[i] as number) - max) / temperature);
      probs[i] = p;
      total += p;
    }
    if (topP < 1) {
      order ??= Array.from({ length: n }, (_, i) => i);
      const p = probs;
      order.sort((a, b) => (p[b] as number) - (p[a] as number) || a - b);
      let kept = 0;
      let k = 0;
      while (k < n && kept < topP * total) kept += p[order[k++] as number] as number;
      for (let j = k; j < n; j++) p[order[j] as number] = 0;
      total = kept;
    }
    let r = random() * total;
    for (let i = 0; i < n; i++) {
      r -= probs[i] as number;
      if (r < 0) return i;
    }
    // Rounding left r >= 0: return the last token with mass.
    for (let i = n - 1; i >= 0; i--) if ((probs[i] as number) > 0) return i;
    return 0;
  };
}

function argmax(logits: Float32Array): number {
  let best = 0;
  let max = logits[0] as number;
  for (let i = 1; i < logits.length; i++) {
    if ((logits[i] as number) > max) {
      max = logits[i] as number;
      best = i;
    }
  }
  return best;
}
