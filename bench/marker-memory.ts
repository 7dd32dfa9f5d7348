/**
 * `npm run bench:marker-memory [-- --compare] [-- --markers N] [-- --per-request N] [-- --runs N] [-- --json FILE]`
 *
 * Memory a marker costs in the marker registry: a fresh child process (`node --expose-gc`, so nothing else
 * this process did is counted) plants N markers (default 50,000, the default bound of the fragment index),
 * `--per-request` to a planting request (default 20), into a registry bounded at N, and reports the heap it
 * retains: process.memoryUsage() heapUsed + arrayBuffers after full collections, with the registry, minus the
 * same before it was made (modules loaded, cipher warmed). Bytes per marker = that delta / N. With
 * `--compare` the frozen copy of the registry before the key-table memory cut
 * (bench/baseline/marker-registry-v1.ts) is measured the same way, side by side, with the ratio. Each
 * figure is the median of `--runs` children (default 3).
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const VARIANTS = {
  baseline: { file: './baseline/marker-registry-v1.js', label: 'baseline (v1: every window, lo lanes, queue)' },
  current: { file: '../prober/src/probe/marker-registry.js', label: 'current (sparse keys, refs only)' },
} as const;
type Variant = keyof typeof VARIANTS;

interface Measurement {
  variant: Variant;
  markers: number;
  perRequest: number;
  /** heapUsed + arrayBuffers retained by the registry. */
  bytes: number;
  /** Of which typed-array backing stores (arrayBuffers). */
  arrayBufferBytes: number;
  bytesPerMarker: number;
  size: number;
  windowCount: number;
}

const args = process.argv.slice(2);
const option = (name: string): string | undefined => {
  const at = args.indexOf(name);
  if (at < 0) return undefined;
  const value = args[at + 1];
  if (value === undefined || value.startsWith('--')) fail(`${name} needs a value`);
  return value;
};

if (args[0] === '--child') await child(args[1] as Variant, Number(args[2]), Number(args[3]));
else parent();

function fail(message: string): never {
  process.stderr.write(`bench:marker-memory: ${message}\n`);
  process.exit(64);
}

function positiveInt(name: string, fallback: number): number {
  const raw = option(name);
  const n = raw === undefined ? fallback : Number(raw);
  if (!Number.isInteger(n) || n < 1) fail(`${name}: expected a positive integer, got ${raw}`);
  return n;
}

function parent(): void {
  const markers = positiveInt('--markers', 50_000);
  const perRequest = positiveInt('--per-request', 20);
  const runs = positiveInt('--runs', 3);
  const jsonFile = option('--json');
  const variants: Variant[] = args.includes('--compare') ? ['baseline', 'current'] : ['current'];
  const results: Measurement[] = [];
  for (const variant of variants) {
    const samples: Measurement[] = [];
    for (let r = 0; r < runs; r++) samples.push(runChild(variant, markers, perRequest));
    samples.sort((a, b) => a.bytes - b.bytes);
    results.push(samples[Math.floor(samples.length / 2)]!);
  }
  const lines = [
    `marker registry memory: ${markers.toLocaleString('en-US')} live markers, ${perRequest} per planting request, median of ${runs} child processes; node ${process.version}`,
    ...results.map(
      (m) =>
        `${VARIANTS[m.variant].label.padEnd(46)} ${m.bytesPerMarker.toFixed(0).padStart(5)} B/marker  ${(m.bytes / 1e6).toFixed(1).padStart(5)} MB total` +
        `  (${(m.arrayBufferBytes / 1e6).toFixed(1)} MB typed arrays; ${m.windowCount.toLocaleString('en-US')} windows)`,
    ),
  ];
  if (results.length === 2) lines.push(`current / baseline: ${(results[1]!.bytes / results[0]!.bytes).toFixed(3)} (${(results[0]!.bytes / results[1]!.bytes).toFixed(2)}x less)`);
  process.stdout.write(lines.join('\n') + '\n');
  if (jsonFile !== undefined) writeFileSync(jsonFile, JSON.stringify({ node: process.version, markers, perRequest, runs, results }, null, 2) + '\n');
}

function runChild(variant: Variant, markers: number, perRequest: number): Measurement {
  const self = fileURLToPath(import.meta.url);
  const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', self, '--child', variant, String(markers), String(perRequest)], {
    encoding: 'utf8',
    cwd: fileURLToPath(new URL('..', import.meta.url)),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (r.status !== 0) fail(`child for ${variant} exited with ${r.status ?? r.signal}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Measurement;
}

async function child(variant: Variant, markers: number, perRequest: number): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) fail('the child needs --expose-gc');
  const { createMarkerRegistry } = (await import(VARIANTS[variant].file)) as typeof import('../prober/src/probe/marker-registry.js');
  const heap = (): { total: number; arrayBuffers: number } => {
    for (let i = 0; i < 3; i++) gc();
    const m = process.memoryUsage();
    return { total: m.heapUsed + m.arrayBuffers, arrayBuffers: m.arrayBuffers };
  };
  // Warm up: a throwaway registry loads the cipher and compiles plant's path, so neither is counted.
  const warm = createMarkerRegistry({ maxRecentMarkers: 100 });
  for (let i = 0; i < 200; i++) warm.plant({ runId: 'warm', requestId: `w${i}`, role: 'planter', tenant: 'bench' });
  const before = heap();
  const registry = createMarkerRegistry({ maxRecentMarkers: markers });
  const plantedAt = new Date('2026-01-01T00:00:00Z');
  for (let i = 0; i < markers; i++) {
    registry.plant({ runId: 'bench-run', requestId: `bench-request-${Math.floor(i / perRequest)}`, role: 'planter', tenant: 'bench', plantedAt });
  }
  const after = heap();
  if (registry.size !== markers) fail(`${variant}: ${registry.size} live markers, expected ${markers}`);
  const bytes = after.total - before.total;
  const m: Measurement = {
    variant,
    markers,
    perRequest,
    bytes,
    arrayBufferBytes: after.arrayBuffers - before.arrayBuffers,
    bytesPerMarker: bytes / markers,
    size: registry.size,
    windowCount: registry.windowCount,
  };
  process.stdout.write(JSON.stringify(m) + '\n');
}
