/**
 * bin/kvcanary.js runs the compiled build (dist/) only when it is at least as new as every source file:
 * an edited or freshly pulled checkout must never run stale code, and an install that ships dist/ without
 * sources (the Docker image) runs dist/. Checked on a copy of the launcher's build lookup in a scratch tree.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const LOOKUP = new URL('../../bin/compiled-build.js', import.meta.url);
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A scratch install: bin/compiled-build.js, optionally sources and a stamped build, with given mtimes (s). */
async function install(opts: { sourceAt?: number; builtAt?: number; newFileAt?: number }): Promise<string | undefined> {
  const root = mkdtempSync(join(tmpdir(), 'kvc-launcher-'));
  dirs.push(root);
  mkdirSync(join(root, 'bin'));
  copyFileSync(LOOKUP, join(root, 'bin', 'compiled-build.js'));
  if (opts.sourceAt !== undefined) {
    for (const dir of ['prober/src/service', 'engine-under-test/src']) {
      mkdirSync(join(root, dir), { recursive: true });
      const file = join(root, dir, 'a.ts');
      writeFileSync(file, 'export {};\n');
      utimesSync(file, opts.sourceAt, opts.sourceAt);
      utimesSync(join(root, dir), opts.sourceAt, opts.sourceAt);
    }
    utimesSync(join(root, 'prober/src'), opts.sourceAt, opts.sourceAt);
  }
  if (opts.newFileAt !== undefined) {
    writeFileSync(join(root, 'prober/src/service/new.ts'), 'export {};\n');
    utimesSync(join(root, 'prober/src/service/new.ts'), opts.newFileAt, opts.newFileAt);
  }
  if (opts.builtAt !== undefined) {
    mkdirSync(join(root, 'dist/prober/src'), { recursive: true });
    writeFileSync(join(root, 'dist/BUILD'), 'stamp\n');
    utimesSync(join(root, 'dist/BUILD'), opts.builtAt, opts.builtAt);
  }
  const mod = (await import(pathToFileURL(join(root, 'bin', 'compiled-build.js')).href)) as { compiledCli(): string | undefined };
  return mod.compiledCli();
}

describe('the launcher picks the compiled build', () => {
  it('when the build is newer than every source file', async () => {
    const cli = await install({ sourceAt: 1_000, builtAt: 2_000 });
    expect(cli).toMatch(/\/dist\/prober\/src\/cli\.js$/);
  });

  it('when there are no sources beside it (the Docker image ships dist/ only)', async () => {
    expect(await install({ builtAt: 2_000 })).toMatch(/\/dist\/prober\/src\/cli\.js$/);
  });

  it('not when a source file is newer than the build (edited or pulled since): the sources run under tsx', async () => {
    expect(await install({ sourceAt: 3_000, builtAt: 2_000 })).toBeUndefined();
    expect(await install({ sourceAt: 1_000, builtAt: 2_000, newFileAt: 3_000 })).toBeUndefined();
  });

  it('not when there is no stamped build (never built, or a build cut short)', async () => {
    expect(await install({ sourceAt: 1_000 })).toBeUndefined();
  });
});
