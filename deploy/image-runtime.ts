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

/** How the final stage lays out and starts the image (test/e2e/confined-serve.test.ts builds the same). */
export interface ImageLayout extends ImageRuntime {
  /** `WORKDIR`. */
  workdir: string;
  /** `USER`. */
  user: string;
  /** The script `ENTRYPOINT` runs, relative to the workdir (`bin/kvcanary.js`). */
  script: string;
  /** `COPY` instructions: sources (repository paths, or the build stage's paths with `fromBuild`) to a destination. */
  copies: Array<{ sources: string[]; dest: string; fromBuild: boolean }>;
  /** `VOLUME` paths. */
  volumes: string[];
}

function finalStage(dockerfile: string): string {
  return dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
}

/** The final stage's instructions, comments dropped and continuation lines joined. */
function instructions(stage: string): string[] {
  return stage.split('\n').filter((l) => !/^\s*#/.test(l)).join('\n').replace(/\\\n\s*/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l !== '');
}

export function imageRuntime(dockerfile?: string): ImageRuntime {
  const { env, nodeArgs } = imageLayout(dockerfile);
  return { env, nodeArgs };
}

export function imageLayout(dockerfile = readFileSync(DOCKERFILE, 'utf8')): ImageLayout {
  const env: Record<string, string> = {};
  const layout: Omit<ImageLayout, 'env' | 'nodeArgs' | 'script'> = { workdir: '/', user: 'root', copies: [], volumes: [] };
  let entrypoint: string[] | undefined;
  for (const line of instructions(finalStage(dockerfile))) {
    const [, op, rest = ''] = /^(\w+)\s*(.*)$/.exec(line) ?? [];
    if (op === 'ENV') {
      for (const m of rest.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)/g)) env[m[1]!] = m[2]!.replace(/^"(.*)"$/, '$1');
    } else if (op === 'ENTRYPOINT' && rest.startsWith('[')) {
      entrypoint = JSON.parse(rest) as string[];
    } else if (op === 'WORKDIR') {
      layout.workdir = rest;
    } else if (op === 'USER') {
      layout.user = rest;
    } else if (op === 'VOLUME') {
      layout.volumes.push(...(rest.startsWith('[') ? JSON.parse(rest) as string[] : rest.split(/\s+/)));
    } else if (op === 'COPY') {
      const words = rest.split(/\s+/);
      const fromBuild = words[0] === '--from=build';
      const paths = words.filter((w) => !w.startsWith('--'));
      layout.copies.push({ sources: paths.slice(0, -1), dest: paths[paths.length - 1]!, fromBuild });
    }
  }
  if (entrypoint === undefined) throw new ImageRuntimeError('deploy/Dockerfile: the final stage has no ENTRYPOINT ["node", ..., "bin/kvcanary.js"]');
  const script = entrypoint.indexOf('bin/kvcanary.js');
  if (entrypoint[0] !== 'node' || script < 1) throw new ImageRuntimeError(`deploy/Dockerfile: ENTRYPOINT should run node ... bin/kvcanary.js, got ${JSON.stringify(entrypoint)}`);
  return { env, nodeArgs: entrypoint.slice(1, script), script: entrypoint[script]!, ...layout };
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

/** One line for reports: the ENTRYPOINT's node flags and the ENV that changes how Node runs (not NODE_ENV, not kvcanary's own). */
export function describeRuntime(rt: ImageRuntime): string {
  const env = Object.entries(rt.env).filter(([k]) => k !== 'NODE_ENV' && !k.startsWith('KVCANARY_')).map(([k, v]) => `${k}=${/\s/.test(v) ? `"${v}"` : v}`);
  return [`node ${[...rt.nodeArgs, 'bin/kvcanary.js'].join(' ')}`, ...env].join(', ');
}
