// Where the compiled CLI is (dist/, `npm run build`), and whether it may be run: only when its stamp is at
// least as new as every source file, so an edited or freshly pulled checkout never runs stale code.
// An install without sources (the Docker image ships dist/ only) has nothing to compare and runs dist/.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = new URL('../', import.meta.url);
export const DIST = new URL('dist/', ROOT);
export const BUILD_STAMP = new URL('BUILD', DIST);
const SOURCES = ['prober/src/', 'engine-under-test/src/'];

/** The compiled CLI module's URL, or undefined when there is no build or a source file is newer than it. */
export function compiledCli() {
  let builtAt;
  try {
    builtAt = statSync(BUILD_STAMP).mtimeMs;
  } catch {
    return undefined;
  }
  for (const dir of SOURCES) if (newestIn(fileURLToPath(new URL(dir, ROOT))) > builtAt) return undefined;
  return new URL('prober/src/cli.js', DIST).href;
}

/** The newest modification time under a folder, the folders' own included (they change when a file is added or removed). */
function newestIn(dir) {
  let newest;
  let entries;
  try {
    newest = statSync(dir).mtimeMs;
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    const path = join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestIn(path) : statSync(path).mtimeMs);
  }
  return newest;
}
