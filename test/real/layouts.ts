/** The llama-server slot layouts and faults the real-server tests and `npm run bench:real` run. */

export const LAYOUTS: Array<{ name: string; args: string[] }> = [
  { name: '-np 1', args: ['-c', '4096', '-np', '1'] },
  { name: '-np 2', args: ['-c', '4096', '-np', '2'] },
  { name: '-np 4 --kv-unified', args: ['-c', '4096', '-np', '4', '--kv-unified'] },
  { name: '-np 2 --cache-ram 0', args: ['-c', '4096', '-np', '2', '--cache-ram', '0'] },
];

/**
 * One compute thread: on a 2-core machine shared with the prober (and, in CI, other work), llama.cpp's
 * default thread pool spin-waits at every barrier and slows to a crawl (6 short completions: 54 s with
 * `-t 2` under load, 4 s with `-t 1`). Threads change nothing the prober judges (slots, cache, limits).
 */
export const THREADS = ['-t', '1', '-tb', '1'];

export interface FaultCase {
  /** As listed in vendor/llama.cpp/faults/README.md and named in KVCANARY_LLAMA_FAULTS. */
  name: string;
  /** The llama-server flags it needs (the README line's). */
  args: string[];
  /**
   * Measured with the random-weight model: whether a default run still fails (behaviour alone, no copying),
   * and on which scenario:kind. Undefined until measured: the test then reports the outcome without judging it.
   */
  randomWeights?: { caught: boolean; by: string[] };
}

// randomWeights, measured 2026-12-04 (`npx vitest run --config vitest.real.config.ts test/real/llama-copier.test.ts
// -t random-weight`, load average ~10): no fault is caught by behaviour alone. The first two exit 2
// (inconclusive), unified-idle-clear-visible exits 0 — every fault fired, and the leaked KV reached a model
// that does not copy, so nothing of another request showed in the text: detection rests on copying.
export const FAULTS: FaultCase[] = [
  { name: 'slot-reuse-overlong-prefix', args: ['-c', '4096', '-np', '1'], randomWeights: { caught: false, by: [] } },
  { name: 'prompt-cache-restore-unchecked', args: ['-c', '4096', '-np', '1'], randomWeights: { caught: false, by: [] } },
  { name: 'unified-idle-clear-visible', args: ['-c', '4096', '-np', '4', '--kv-unified'], randomWeights: { caught: false, by: [] } },
];
