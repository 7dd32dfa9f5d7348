/**
 * Fault `late-write`: an abort frees decode's pages at once while transfer batches are still landing, and
 * a batch that lands after the pages were reallocated writes into another request's pages. A client that
 * aborts requests mid-transfer and sends new ones sees another request's text in a measurable fraction of
 * cycles; with `deferred-release` or `transfer-integrity` that fraction is 0 over 1000 cycles.
 *
 * The cycles run on a deliberately busy decode pool (4,096 tokens shared by six concurrent clients): with a
 * FIFO free list a freed page is reused soon only when few older pages are free, as on a busy endpoint.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { runRaceCycles } from '../../engine-under-test/bench/race-cycles.js';
import { resolveEngineConfig, type EngineOptions } from '../../engine-under-test/src/config.js';
import { createDisaggregatedEngine } from '../../engine-under-test/src/disagg/router.js';
import type { Engine } from '../../engine-under-test/src/engine.js';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';
import { httpRaceUntilLeak } from './faults-race-helpers.js';

const BUSY: EngineOptions = { preset: 'disaggregated', scale: 64, decodePoolTokens: 4096, transferLatencyMs: 1, transferBatchTokens: 128, faults: ['late-write'] };

const engines: Engine[] = [];
const servers: RunningEngine[] = [];
afterEach(async () => {
  await Promise.all([...engines.splice(0).map((e) => e.close()), ...servers.splice(0).map((s) => s.close())]);
});
async function engine(defenses: string[] = []): Promise<Engine> {
  const e = await createDisaggregatedEngine(resolveEngineConfig({ ...BUSY, defenses }));
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

describe('fault late-write', () => {
  it('shows an HTTP client another request’s text, read through attention over a page a late batch overwrote', async () => {
    const e = await startEngine({ ...BUSY, log: () => {} });
    servers.push(e);
    const leak = await httpRaceUntilLeak(e.url, { lanes: 6, maxCycles: 300, planterTokens: 600, readerTokens: 200, abortWithinMs: 10 });
    expect(leak).toBeDefined();
    const reader = Number(/^cmpl-(\d+)$/.exec(leak!.readerId)?.[1]);
    const log = (await (await fetch(`${e.url}/debug/exposures`)).json()) as { exposures: { reader: number }[] };
    expect(log.exposures.some((x) => x.reader === reader)).toBe(true);
    expect(e.engine.stats().transfer?.lateBatchesLanded).toBeGreaterThan(0);
  });

  it('leaks in a measurable fraction of cycles', async () => {
    const faulty = await engine();
    const bare = await runRaceCycles(faulty, { cycles: 300 });
    expect(bare.fraction).toBeGreaterThan(0.05);
    expect(bare.foreignPageReads).toBeGreaterThan(0);
    expect(faulty.stats().transfer?.lateBatchesLanded).toBeGreaterThan(0);
    await settled(faulty);
    expect(faulty.checkInvariants()).toEqual([]);
    console.info(
      `late-write, busy 4,096-token decode pool, 6 clients: leak in ${bare.leakCycles}/${bare.cycles} cycles ` +
        `(${(100 * bare.fraction).toFixed(0)}%, ${bare.msPerCycle.toFixed(1)} ms per cycle)`,
    );
  }, 30_000);
});
