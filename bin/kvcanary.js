#!/usr/bin/env node
// Launcher. Runs the compiled JavaScript in dist/ when there is a fresh build (`npm run build`; the Docker
// image is built so): tsx's loader runs in a thread with a V8 heap of its own and keeps transformed
// sources and source maps, about 30 MiB of RSS per process, a quarter of a small `serve` replica
// (bench/SCALE.md). Without a build, or with a source file newer than it, Node 20 runs no TypeScript, so
// tsx's loader is registered and the sources run as they are.
import { compiledCli } from './compiled-build.js';

const compiled = compiledCli();
let cli;
if (compiled !== undefined) {
  cli = await import(compiled);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  cli = await import('../prober/src/cli.ts');
}
process.exitCode = await cli.main(process.argv.slice(2));
