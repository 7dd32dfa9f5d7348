/**
 * The Node options the container image runs with (deploy/Dockerfile's `ENV NODE_OPTIONS`), parsed once for
 * what must agree with them: the scale bench measures `serve` with them (bench/scale.ts), and the deploy
 * test checks the heap they allow fits the StatefulSet's memory limit.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const DOCKERFILE = fileURLToPath(new URL('Dockerfile', import.meta.url));

export class ImageNodeOptionsError extends Error {
  readonly code = 'KVC_IMAGE_NODE_OPTIONS';
}

/** NODE_OPTIONS as the final stage of the Dockerfile sets it. */
export function imageNodeOptions(dockerfile = readFileSync(DOCKERFILE, 'utf8')): string {
  const finalStage = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
  const m = /NODE_OPTIONS="([^"]*)"/.exec(finalStage);
  if (m === null) throw new ImageNodeOptionsError('deploy/Dockerfile: the final stage sets no NODE_OPTIONS="..."');
  return m[1]!;
}

/** A V8 size flag's value in MiB (`--max-old-space-size=256` → 256), or undefined when not set. */
export function sizeFlagMiB(nodeOptions: string, flag: '--max-old-space-size' | '--max-semi-space-size'): number | undefined {
  const m = new RegExp(`(?:^|\\s)${flag}=(\\d+)(?:\\s|$)`).exec(nodeOptions);
  return m === null ? undefined : Number(m[1]);
}
