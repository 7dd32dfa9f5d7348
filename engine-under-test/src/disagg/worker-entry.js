// Entry of the prefill and decode worker threads. Copied as it is into dist/ by `npm run build`, where the
// compiled worker modules sit beside it. In the sources Node 20 runs no TypeScript, and a worker does not
// inherit the loader its parent was started with (tsx under bin/kvcanary.js, vite under vitest), so the
// worker registers tsx itself before importing its TypeScript module.
import { existsSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';

const compiled = existsSync(new URL('./prefill-worker.js', import.meta.url));
if (!compiled) (await import('tsx/esm/api')).register();
const file = `./${workerData.role === 'prefill' ? 'prefill' : 'decode'}-worker.${compiled ? 'js' : 'ts'}`;
const module = await import(file);
module.runWorker(workerData, parentPort);
