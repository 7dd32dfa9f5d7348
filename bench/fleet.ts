/**
 * Child process of the overhead section: a few bundled engines on 127.0.0.1, in their own process so the
 * prober's CPU and memory can be read apart from theirs.
 *
 *   node --import tsx bench/fleet.ts --scale 128 --preset incident --preset remediated
 *
 * A preset this engine build lacks is replaced by `single` (said in the output). Prints one JSON line,
 * {"engines":[{"preset","url","standIn"}]}, then serves until SIGTERM or SIGINT.
 */
import { parseArgs } from 'node:util';
import { EngineConfigError } from '../engine-under-test/src/config.js';
import { startEngine, type RunningEngine } from '../engine-under-test/src/start.js';

const { values } = parseArgs({ options: { scale: { type: 'string', default: '128' }, preset: { type: 'string', multiple: true, default: ['single'] } }, strict: true });
const scale = Number(values.scale);
const engines: Array<{ preset: string; url: string; standIn: boolean }> = [];
const running: RunningEngine[] = [];
for (const preset of values.preset) {
  let e: RunningEngine;
  let standIn = false;
  try {
    e = await startEngine({ preset, scale, log: () => {} });
  } catch (err) {
    if (!(err instanceof EngineConfigError)) throw err;
    e = await startEngine({ preset: 'single', scale, log: () => {} });
    standIn = true;
  }
  running.push(e);
  engines.push({ preset: standIn ? 'single' : preset, url: e.url, standIn });
}
process.stdout.write(JSON.stringify({ engines }) + '\n');
const stop = (): void => {
  void Promise.all(running.map((e) => e.close())).then(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
