/**
 * Fault `offload-release-race` against its defenses: the cycles of engine-faults-offload.test.ts (which
 * leak in a measurable fraction without a defense), 1000 of them with `deferred-release` and 1000 with
 * `transfer-integrity`, and not one may show another request's text or read a foreign page.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { runRaceCycles } from '../../engine-under-test/bench/race-cycles.js';
import { resolveEngineConfig, type EngineOptions } from '../../engine-under-test/src/config.js';
import { createDisaggregatedEngine } from '../../engine-under-test/src/disagg/router.js';
import type { Engine } from '../../engine-under-test/src/engine.js';

const BUSY: EngineOptions = {
  preset: 'disaggregated',
  scale: 64,
  decodePoolTokens: 4096,
  transferLatencyMs: 1,
  transferBatchTokens: 256,
  faults: ['offload-release-race'],
};

const engines: Engine[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.close()));
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

describe('fault offload-release-race, defended', () => {
  it.each([
    ['deferred-release', (e: Engine) => e.stats().pools?.decode.parkedPagesTotal ?? 0],
    ['transfer-integrity', (e: Engine) => e.stats().defended?.staleCopiesDropped ?? 0],
  ] as const)('with %s: 0 of 1000 cycles leak, and the defense demonstrably acted', async (defense, acted) => {
    const e = await engine({ ...BUSY, defenses: [defense] });
    const result = await runRaceCycles(e, { cycles: 1000 });
    expect(result).toMatchObject({ cycles: 1000, leakCycles: 0, foreignPageReads: 0 });
    expect(acted(e)).toBeGreaterThan(0);
    // The uniform counter (kvcanary_engine_defense_blocks_total{defense}) counts the same acts.
    expect(e.stats().defenseBlocks[defense]).toBeGreaterThan(0);
    await settled(e);
    expect(e.checkInvariants()).toEqual([]);
    console.info(`offload-release-race + ${defense}: ${result.leakCycles}/1000 cycles leaked (${result.msPerCycle.toFixed(1)} ms per cycle)`);
  }, 30_000);
});
