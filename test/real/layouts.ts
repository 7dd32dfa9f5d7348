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
   * Measured with the random-weight model: whether a default run fails by behaviour alone (no copying) —
   * `never`, or `sometimes`/`always` by the scenario:kinds in `by`, the only findings above info it may raise.
   * Undefined until measured: the test then reports the outcome without judging it.
   */
  randomWeights?: { caught: 'never' | 'sometimes' | 'always'; by: string[] };
}

// randomWeights, measured with `npx vitest run --config vitest.real.config.ts test/real/llama-copier.test.ts
// -t random-weight` (2026-12-04, load average ~10) and in CI runs since. The leaked KV reaches a model that
// does not copy, so no marker of another request shows in any text: detection of the leak itself rests on
// copying. Two faults change what llama.cpp reports as cached, and prefix-collision's collider (a prompt
// whose only shared prefix is a token or so) then sees more cached tokens than it shares with anything:
// `prefix-cache-collision`, a true behavioural detection, seen on prompt-cache-restore-unchecked in a CI run
// (2026-12-05: the slot restored a 2,165-token prompt as the first 556 of the collider). Whether a run sees
// it depends on which prompt the slot or the host cache last held, so `sometimes`.
// unified-idle-clear-visible keeps the cached-token count honest: exit 0.
const COLLIDER = 'prefix-collision:prefix-cache-collision';
export const FAULTS: FaultCase[] = [
  { name: 'slot-reuse-overlong-prefix', args: ['-c', '4096', '-np', '1'], randomWeights: { caught: 'sometimes', by: [COLLIDER] } },
  { name: 'prompt-cache-restore-unchecked', args: ['-c', '4096', '-np', '1'], randomWeights: { caught: 'sometimes', by: [COLLIDER] } },
  { name: 'unified-idle-clear-visible', args: ['-c', '4096', '-np', '4', '--kv-unified'], randomWeights: { caught: 'never', by: [] } },
];
