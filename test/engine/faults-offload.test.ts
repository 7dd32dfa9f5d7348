/**
 * Fault `offload-release-race`: the host-offload tier writes a finished request's prompt pages back to host
 * memory and loads them again on a prefix hit, and releases the pages when a copy is issued rather than when
 * it is done. A write-back then reads pages another request already owns and stores that request's KV under
 * the first request's prefix; the next request with that prefix loads it and continues the other request's
 * text. With `deferred-release` or `transfer-integrity` that fraction is 0 over 1000 cycles.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { runRaceCycles } from '../../engine-under-test/bench/race-cycles.js';
import { resolveEngineConfig, type EngineOptions } from '../../engine-under-test/src/config.js';
import { createDisaggregatedEngine } from '../../engine-under-test/src/disagg/router.js';
import type { Engine } from '../../engine-under-test/src/engine.js';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';
import { httpRaceUntilLeak } from './faults-race-helpers.js';

const BUSY: EngineOptions = {
  preset: 'disaggregated',
  scale: 64,
  decodePoolTokens: 4096,
  transferLatencyMs: 1,
  transferBatchTokens: 256,
  faults: ['offload-release-race'],
};

const engines: Engine[] = [];
const servers: RunningEngine[] = [];
afterEach(async () => {
  await Promise.all([...engines.splice(0).map((e) => e.close()), ...servers.splice(0).map((s) => s.close())]);
});
async function engine(options: EngineOptions): Promise<Engine> {
  const e = await createDisaggregatedEngine(resolveEngineConfig(options));
  engines.push(e);
  return e;
}

async function settled(e: Engine): Promise<void> {
  for (let i = 0; i < 400; i++) {
    const p = e.stats().pools;
    if (p !== undefined && p.decode.freePages === p.decode.numPages && p.prefill.freePages === p.prefill.numPages) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error('pools never came back whole');
}

describe('fault offload-release-race', () => {
  it('shows an HTTP client another request’s text, loaded from a host copy that raced a page release', async () => {
    const e = await startEngine({ ...BUSY, log: () => {} });
    servers.push(e);
    // A race: each cycle leaks with some probability, lower through HTTP on a busy host than in-process.
    const leak = await httpRaceUntilLeak(e.url, { lanes: 6, maxCycles: 1200, planterTokens: 600, readerTokens: 200, abortWithinMs: 10 });
    expect(leak).toBeDefined();
    const reader = Number(/^cmpl-(\d+)$/.exec(leak!.readerId)?.[1]);
    const log = (await (await fetch(`${e.url}/debug/exposures`)).json()) as { exposures: { reader: number }[] };
    expect(log.exposures.some((x) => x.reader === reader)).toBe(true);
    expect(e.engine.stats().hostOffload?.hitPages).toBeGreaterThan(0);
  }, 150_000);

  it('leaks in a measurable fraction of cycles, and not at all when the tier fences its copies', async () => {
    const faulty = await engine(BUSY);
    const bare = await runRaceCycles(faulty, { cycles: 300 });
    expect(bare.fraction).toBeGreaterThan(0.05);
    expect(bare.foreignPageReads).toBeGreaterThan(0);
    // The tier as it should be (no fault): copies fenced against release; clean, and it serves prefixes.
    const fenced = await engine({ ...BUSY, faults: [], hostOffload: true });
    const clean = await runRaceCycles(fenced, { cycles: 200 });
    expect(clean).toMatchObject({ leakCycles: 0, foreignPageReads: 0 });
    expect(fenced.stats().hostOffload?.hitPages).toBeGreaterThan(0);
    for (const e of [faulty, fenced]) {
      await settled(e);
      expect(e.checkInvariants()).toEqual([]);
    }
    console.info(
      `offload-release-race, busy 4,096-token decode pool, 6 clients: leak in ${bare.leakCycles}/${bare.cycles} cycles ` +
        `(${(100 * bare.fraction).toFixed(0)}%, ${bare.msPerCycle.toFixed(1)} ms per cycle); fenced tier ${clean.leakCycles}/${clean.cycles}`,
    );
  }, 30_000);
});
