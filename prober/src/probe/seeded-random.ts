/**
 * mulberry32: a small seeded generator of uniform numbers in [0, 1). The prober's simulations (the timing
 * test's power), its benchmarks and tests use it so the same seed gives the same draws. (The bundled engine
 * has its own in engine-under-test/src/hash.ts: the prober imports nothing from the engine.)
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}
