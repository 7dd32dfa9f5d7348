#!/usr/bin/env node
// Launcher: Node 20 runs no TypeScript, so register tsx's loader and hand over to the CLI.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../prober/src/cli.ts');
process.exitCode = await main(process.argv.slice(2));
