// Entry of the prefill and decode worker threads. Node 20 runs no TypeScript, and a worker does not
// inherit the loader its parent was started with (tsx under bin/kvcanary.js, vite under vitest), so each
// worker registers tsx itself before importing its TypeScript module.
import { parentPort, workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
const module = workerData.role === 'prefill' ? await import('./prefill-worker.ts') : await import('./decode-worker.ts');
module.runWorker(workerData, parentPort);
