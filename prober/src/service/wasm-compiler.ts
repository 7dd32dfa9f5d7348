/**
 * The WebAssembly compiler a configured `serve` runs with.
 *
 * The only WebAssembly such a process runs is undici's HTTP parser (llhttp), compiled when the first request
 * goes out. V8's optimising compiler (TurboFan) then works on llhttp's parser, one very large state-machine
 * function, and holds about 35 MiB for a moment and about 9 MiB after; that spike was the top of a 50-target
 * replica's RSS (bench/SCALE.md). V8's baseline compiler (Liftoff) compiles it in a fraction of that, and the
 * parser it produces is no slower for what a probe reads: measured at 0.35–0.41 ms of CPU per request
 * against 0.41–0.45 ms with TurboFan (5,000 requests to a local endpoint, Node 20).
 *
 * Not for the embedded demo, which runs the bundled engine's SIMD attention kernel in the same process and
 * needs it optimised; and it must run before the first request, while no WebAssembly is compiled yet.
 */
import { setFlagsFromString } from 'node:v8';

export function useBaselineWasmCompiler(): void {
  setFlagsFromString('--liftoff-only');
}
