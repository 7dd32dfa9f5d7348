/**
 * Race faults with a rate (`kvcanary engine --fault-rate late-write=0.1`, `faultRates` in the config API):
 * each fires on that fraction of its eligible events, drawn from a generator seeded with `faultSeed` (the
 * same seed, the same draws), and bad input is refused with an error naming what was wrong.
 */
import { describe, expect, it } from 'vitest';
import { parseEngineArgs } from '../../engine-under-test/src/cli.js';
import { EngineConfigError, resolveEngineConfig } from '../../engine-under-test/src/config.js';
import { RACE_FAULTS, faultTrigger } from '../../engine-under-test/src/faults.js';
import { prefixCacheOptions } from '../../engine-under-test/src/prefix-cache.js';

const draws = (fire: () => boolean, n: number): number => Array.from({ length: n }, fire).filter(Boolean).length;

describe('faultTrigger', () => {
  it('off never fires, on and unrated always fires, rated fires on that fraction of events', () => {
    expect(draws(faultTrigger({ faults: [], faultRates: {}, faultSeed: 0 }, 'late-write'), 1000)).toBe(0);
    expect(draws(faultTrigger({ faults: ['late-write'], faultRates: {}, faultSeed: 0 }, 'late-write'), 1000)).toBe(1000);
    for (const rate of [0.05, 0.1, 0.5]) {
      for (const fault of RACE_FAULTS) {
        const fired = draws(faultTrigger({ faults: [fault], faultRates: { [fault]: rate }, faultSeed: 7 }, fault), 20_000);
        // 20,000 Bernoulli draws: 5 standard deviations either side.
        const sd = Math.sqrt(20_000 * rate * (1 - rate));
        expect(Math.abs(fired - 20_000 * rate), `${fault} at ${rate}`).toBeLessThan(5 * sd);
      }
    }
  });

  it('is seeded: the same seed gives the same draws, another seed others, and each fault its own stream', () => {
    const seq = (seed: number, fault: (typeof RACE_FAULTS)[number] = 'late-write'): boolean[] => {
      const fire = faultTrigger({ faults: [fault], faultRates: { [fault]: 0.3 }, faultSeed: seed }, fault);
      return Array.from({ length: 64 }, fire);
    };
    expect(seq(1)).toEqual(seq(1));
    expect(seq(1)).not.toEqual(seq(2));
    expect(seq(1, 'late-write')).not.toEqual(seq(1, 'offload-release-race'));
  });

  it('prompt-cache-restore-race keeps an entry on that fraction of its pages handed out again', () => {
    const o = prefixCacheOptions({ faults: ['prompt-cache-restore-race'], defenses: [], faultRates: { 'prompt-cache-restore-race': 0.25 }, faultSeed: 3 }, 16, 64);
    const kept = draws(o.keepOnReuse, 20_000);
    expect(kept).toBeGreaterThan(4500);
    expect(kept).toBeLessThan(5500);
    expect(draws(prefixCacheOptions({ faults: [], defenses: [], faultRates: {}, faultSeed: 0 }, 16, 64).keepOnReuse, 100)).toBe(0);
  });
});

describe('faultRates in the config API', () => {
  const base = { preset: 'remediated', scale: 64 };
  it('a race fault that is on takes a rate in (0, 1] and a seed', () => {
    const c = resolveEngineConfig({ ...base, faults: ['late-write'], faultRates: { 'late-write': 0.1 }, faultSeed: 42 });
    expect(c.faultRates).toEqual({ 'late-write': 0.1 });
    expect(c.faultSeed).toBe(42);
    expect(resolveEngineConfig(base)).toMatchObject({ faultRates: {}, faultSeed: 0 });
  });

  it.each([
    [{ faults: ['late-write'], faultRates: { 'late-write': 0 } }, /rate of `late-write` to be a number in \(0, 1\], got `0`/],
    [{ faults: ['late-write'], faultRates: { 'late-write': 1.5 } }, /in \(0, 1\], got `1.5`/],
    [{ faults: ['late-write'], faultRates: { 'late-write': '0.1' } }, /in \(0, 1\], got `0.1` \(string\)/],
    [{ faults: ['late-write'], faultRates: { 'late-write': Number.NaN } }, /in \(0, 1\]/],
    [{ faults: ['admission-checks-finished'], faultRates: { 'admission-checks-finished': 0.5 } }, /`admission-checks-finished` has no rate: only race faults/],
    [{ faultRates: { 'no-such-fault': 0.5 } }, /Unknown fault `no-such-fault`.*race faults: late-write, offload-release-race, prompt-cache-restore-race/],
    [{ faultRates: { 'late-write': 0.5 } }, /rate for `late-write` needs the fault on/],
    [{ faults: ['late-write'], faultRates: [0.5] }, /`faultRates` to be an object/],
    [{ faultSeed: -1 }, /`faultSeed` to be an integer in \[0, 4294967295\]/],
  ])('refuses %j', (options, message) => {
    let err: unknown;
    try {
      resolveEngineConfig({ ...base, ...(options as object) });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EngineConfigError);
    expect((err as Error).message).toMatch(message);
  });
});

describe('kvcanary engine --fault-rate', () => {
  it('parses NAME=RATE (repeatable) and --fault-seed', () => {
    expect(
      parseEngineArgs(['--preset', 'remediated', '--fault', 'late-write', '--fault', 'offload-release-race', '--fault-rate', 'late-write=0.1', '--fault-rate', 'offload-release-race=.5', '--fault-seed', '9']),
    ).toMatchObject({ faultRates: { 'late-write': 0.1, 'offload-release-race': 0.5 }, faultSeed: 9 });
    expect(parseEngineArgs(['--fault', 'late-write'])).not.toHaveProperty('faultRates');
  });

  it.each([
    [['--fault', 'late-write', '--fault-rate', 'late-write'], /--fault-rate must be NAME=RATE \(e.g. late-write=0.1\), got 'late-write'/],
    [['--fault', 'late-write', '--fault-rate', 'late-write=0'], /--fault-rate late-write: the rate must be in \(0, 1\], got '0'/],
    [['--fault', 'late-write', '--fault-rate', 'late-write=2'], /must be in \(0, 1\], got '2'/],
    [['--fault', 'late-write', '--fault-rate', 'late-write=-0.1'], /must be NAME=RATE/],
    [['--fault-rate', 'weak-prefix-hash=0.5'], /'weak-prefix-hash' has no rate; only race faults do/],
    [['--fault-rate', 'lat-write=0.5'], /unknown fault 'lat-write'; race faults: late-write/],
    [['--fault-rate', 'late-write=0.5'], /--fault-rate late-write needs the fault on: add --fault late-write/],
    [['--fault', 'late-write', '--fault-rate', 'late-write=0.5', '--fault-rate', 'late-write=0.2'], /--fault-rate late-write given twice/],
    [['--fault-seed', 'x'], /--fault-seed must be an integer in \[0, 4294967295\], got 'x'/],
  ])('refuses %j with a message naming the flag', (args, message) => {
    expect(() => parseEngineArgs(args)).toThrow(message);
  });
});
