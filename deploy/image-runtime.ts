/**
 * How the container image runs Node (deploy/Dockerfile's final stage): its `ENV` (NODE_OPTIONS, glibc's
 * malloc tunables) and the Node flags of its `ENTRYPOINT` (V8 flags NODE_OPTIONS does not accept), parsed
 * for what must agree with them: the scale bench measures `serve` the way the image runs it (bench/scale.ts),
 * and the deploy test checks the heap they allow fits the StatefulSet's memory limit.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const DOCKERFILE = fileURLToPath(new URL('Dockerfile', import.meta.url));

export class ImageRuntimeError extends Error {
  readonly code = 'KVC_IMAGE_RUNTIME';
}

export interface ImageRuntime {
  /** Every variable the final stage's `ENV` instructions set. */
  env: Record<string, string>;
  /** The flags between `node` and `bin/kvcanary.js` in its `ENTRYPOINT`. */
  nodeArgs: string[];
}

function finalStage(dockerfile: string): string {
  return dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
}

/** The final stage's instructions, comments dropped and continuation lines joined. */
function instructions(stage: string): string[] {
  return stage.split('\n').filter((l) => !/^\s*#/.test(l)).join('\n').replace(/\\\n\s*/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l !== '');
}

export function imageRuntime(dockerfile = readFileSync(DOCKERFILE, 'utf8')): ImageRuntime {
  const env: Record<string, string> = {};
  let entrypoint: string[] | undefined;
  for (const line of instructions(finalStage(dockerfile))) {
    const env1 = /^ENV\s+(.*)$/.exec(line);
    if (env1 !== null) {
      for (const m of env1[1]!.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)/g)) env[m[1]!] = m[2]!.replace(/^"(.*)"$/, '$1');
      continue;
    }
    const ep = /^ENTRYPOINT\s+(\[.*\])$/.exec(line);
    if (ep !== null) entrypoint = JSON.parse(ep[1]!) as string[];
  }
  if (entrypoint === undefined) throw new ImageRuntimeError('deploy/Dockerfile: the final stage has no ENTRYPOINT ["node", ..., "bin/kvcanary.js"]');
  const script = entrypoint.indexOf('bin/kvcanary.js');
  if (entrypoint[0] !== 'node' || script < 1) throw new ImageRuntimeError(`deploy/Dockerfile: ENTRYPOINT should run node ... bin/kvcanary.js, got ${JSON.stringify(entrypoint)}`);
  return { env, nodeArgs: entrypoint.slice(1, script) };
}

/** NODE_OPTIONS as the final stage of the Dockerfile sets it. */
export function imageNodeOptions(dockerfile?: string): string {
  const options = imageRuntime(dockerfile).env.NODE_OPTIONS;
  if (options === undefined) throw new ImageRuntimeError('deploy/Dockerfile: the final stage sets no NODE_OPTIONS="..."');
  return options;
}

/** A V8 size flag's value in MiB (`--max-old-space-size=256` → 256), or undefined when not set. */
export function sizeFlagMiB(nodeOptions: string, flag: '--max-old-space-size' | '--max-semi-space-size'): number | undefined {
  const m = new RegExp(`(?:^|\\s)${flag}=(\\d+)(?:\\s|$)`).exec(nodeOptions);
  return m === null ? undefined : Number(m[1]);
}

/** One line for reports: the ENTRYPOINT's node flags and the ENV that changes how Node runs (not NODE_ENV). */
export function describeRuntime(rt: ImageRuntime): string {
  const env = Object.entries(rt.env).filter(([k]) => k !== 'NODE_ENV').map(([k, v]) => `${k}=${/\s/.test(v) ? `"${v}"` : v}`);
  return [`node ${[...rt.nodeArgs, 'bin/kvcanary.js'].join(' ')}`, ...env].join(', ');
}
