// `npm run build`: compiles prober/src and engine-under-test/src into dist/ (what bin/kvcanary.js runs
// when it is at least as new as every source file), copies the engine's worker entry (plain JavaScript,
// which tsc does not emit), and stamps the build last, so a build cut short is never taken as fresh.
// `node scripts/build.mjs --out DIR` builds the same into DIR instead (a test lays out the image's /app/dist
// from it without touching the checkout's dist/).
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { BUILD_STAMP, DIST } from '../bin/compiled-build.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const outArg = process.argv.indexOf('--out');
if (outArg !== -1 && process.argv[outArg + 1] === undefined) {
  process.stderr.write('build: --out needs a folder\n');
  process.exit(64);
}
const dist = outArg === -1 ? DIST : pathToFileURL(path.resolve(process.argv[outArg + 1]) + path.sep);
const stamp = outArg === -1 ? BUILD_STAMP : new URL('BUILD', dist);
rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', fileURLToPath(dist)], { cwd: root, stdio: 'inherit' });
if (r.status !== 0) {
  process.stderr.write(`build: tsc failed (exit ${r.status ?? r.signal}); ${fileURLToPath(dist)} left without a stamp\n`);
  process.exit(1);
}
const workerEntry = 'engine-under-test/src/disagg/worker-entry.js';
mkdirSync(new URL(path.posix.dirname(workerEntry) + '/', dist), { recursive: true });
copyFileSync(new URL(`../${workerEntry}`, import.meta.url), new URL(workerEntry, dist));
writeFileSync(stamp, `${new Date().toISOString()}\n`);
process.stderr.write(`build: ${fileURLToPath(dist)} ready\n`);
