/**
 * One `serve` replica measured once against N fast fake endpoints (the same measurement as a row of
 * `npm run bench:scale`, bench/scale-serve.ts), under a Node runtime of your choosing: to compare runtime
 * settings (V8 flags, NODE_OPTIONS, malloc tunables) or a store or index bound before changing the image.
 *
 *   npx tsx bench/serve-once.ts [--targets 50] [--scenarios all|a,b] [--runtime image|node-defaults|JSON]
 *
 * --runtime: `image` (deploy/Dockerfile's ENV and ENTRYPOINT flags, the default), `node-defaults` (none), or
 * JSON `{"env": {...}, "nodeArgs": [...]}` (env replaces the image's, e.g. to set KVCANARY_RECENT_MARKERS).
 * Builds nothing: run `npm run build` first (serve takes dist/ only when fresh). Prints one JSON line.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { parseArgs } from 'node:util';
import { createChildTracker } from './child.js';
import { measureAgainstFakes } from './scale-serve.js';
import { imageRuntime, type ImageRuntime } from '../deploy/image-runtime.js';

const { values } = parseArgs({
  options: { targets: { type: 'string', default: '50' }, scenarios: { type: 'string', default: 'all' }, runtime: { type: 'string', default: 'image' } },
  strict: true,
});
const targets = Number(values.targets);
if (!Number.isInteger(targets) || targets < 1) throw new Error(`serve-once: --targets must be a whole number >= 1, got ${values.targets}`);

function runtimeOf(arg: string): ImageRuntime | undefined {
  if (arg === 'image') return imageRuntime();
  if (arg === 'node-defaults') return undefined;
  const bad = new Error(`serve-once: --runtime is image, node-defaults or JSON {"env": {NAME: "value"}, "nodeArgs": ["--flag"]}, got ${arg}`);
  let r: Partial<ImageRuntime>;
  try { r = JSON.parse(arg) as Partial<ImageRuntime>; } catch { throw bad; }
  const env = r?.env ?? {};
  const nodeArgs = r?.nodeArgs ?? [];
  if (typeof r !== 'object' || r === null || typeof env !== 'object' || Object.values(env).some((v) => typeof v !== 'string')
    || !Array.isArray(nodeArgs) || nodeArgs.some((a) => typeof a !== 'string')) throw bad;
  return { env, nodeArgs };
}
const runtime = runtimeOf(values.runtime);

const children = createChildTracker();
process.once('SIGINT', () => { children.killAll(); process.exit(130); });
const dir = mkdtempSync(join(tmpdir(), 'kvcanary-serve-once-'));
try {
  const scenarios = values.scenarios === 'all' ? undefined : values.scenarios.split(',');
  const out = await measureAgainstFakes(children, { targets, concurrency: 16, dir, runtime, ...(scenarios === undefined ? {} : { scenarios }) });
  process.stdout.write(`${JSON.stringify({ scenarios: values.scenarios, runtime: values.runtime, ...out })}\n`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
