// `npm run build`: compiles prober/src and engine-under-test/src into dist/ (what bin/kvcanary.js runs
// when it is at least as new as every source file), copies the engine's worker entry (plain JavaScript,
// which tsc does not emit), and stamps the build last, so a build cut short is never taken as fresh.
import { spawnSync } from 'node:child_process';
import { copyFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { BUILD_STAMP, DIST } from '../bin/compiled-build.js';

const root = fileURLToPath(new URL('..', import.meta.url));
rmSync(DIST, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const r = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });
if (r.status !== 0) {
  process.stderr.write(`build: tsc failed (exit ${r.status ?? r.signal}); dist/ left without a stamp\n`);
  process.exit(1);
}
const workerEntry = 'engine-under-test/src/disagg/worker-entry.js';
copyFileSync(new URL(`../${workerEntry}`, import.meta.url), new URL(workerEntry, DIST));
writeFileSync(BUILD_STAMP, `${new Date().toISOString()}\n`);
process.stderr.write(`build: dist/ ready (${fileURLToPath(DIST)})\n`);
