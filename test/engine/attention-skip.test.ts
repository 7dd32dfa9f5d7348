/**
 * The engine's arithmetic-free attention mode (`--attention skip`), what bench/full-scale.json is measured
 * with: it must keep every admission, page and accounting decision of the real engine, so a prober run
 * against it sends the same requests and the engine counts the same tokens; only what decode copies differs.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { KvMemory } from '../../engine-under-test/src/kv-memory.js';
import { InductionModel } from '../../engine-under-test/src/model.js';
import { resolveEngineConfig, EngineConfigError } from '../../engine-under-test/src/config.js';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';
import { encodePrompt } from '../../engine-under-test/src/tokenizer.js';
import { engineCounters } from '../../bench/full-scale-run.js';
import { runCli } from '../helpers/cli.js';

let engines: RunningEngine[] = [];
afterEach(async () => {
  await Promise.all(engines.map((e) => e.close()));
  engines = [];
});

describe('attention skip mode', () => {
  it('is off by default, validated by name, and reported as the kernel', async () => {
    expect(resolveEngineConfig({}).attention).toBe('full');
    expect(() => resolveEngineConfig({ attention: 'fast' as never })).toThrow(EngineConfigError);
    const e = await startEngine({ preset: 'remediated', scale: 128, attention: 'skip' });
    engines.push(e);
    expect(e.engine.info().kernel).toBe('skip');
    const r = await runCli(['engine', '--attention', 'fast']);
    expect(r.code).toBe(64);
    expect(r.stderr).toContain("--attention must be one of full, skip, got 'fast'");
  }, 60_000);

  it('still reports every read of another request\'s pages (the ground truth), and copies nothing', () => {
    const memory = KvMemory.create({ numPages: 8, pageSize: 16 });
    const reads: number[][] = [];
    const model = new InductionModel(memory, { attention: 'skip', onForeignRead: (_, r) => reads.push(r.writers) });
    const pages = Int32Array.from([0, 1, 2, 3]);
    const a = encodePrompt('the secret is kvcanary-abcdefgh and the secret is kvcanary-');
    model.writeKv(pages, a, 0, 32, 7);
    model.writeKv(pages, a, 32, a.length, 8);
    const logits = new Float32Array(256);
    model.nextLogits(pages, a, a.length, a.length, 8, logits);
    expect(reads).toEqual([[7]]);
    // The output is the last position's own value: the favoured token is the prompt's last byte, not the copy ('a').
    const best = logits.indexOf(Math.max(...logits));
    expect(best).toBe(a[a.length - 1]);
    expect(model.kernel.name).toBe('skip');
  });

  it('a deterministic scenario sends the same requests and the engine counts the same tokens in both modes', async () => {
    const counts: Record<string, unknown> = {};
    for (const attention of ['full', 'skip'] as const) {
      const e = await startEngine({ preset: 'remediated', scale: 128, attention });
      engines.push(e);
      const r = await runCli(['run', '--target', e.url, '--json', '-q', '--scenario', 'overlimit-handoff', '--scenario', 'overlimit-rejection'], { timeoutMs: 120_000 });
      const doc = JSON.parse(r.stdout) as { scenarios: { name: string; outcome: string; requests: number; tokens: unknown }[] };
      const c = engineCounters(await (await fetch(`${e.url}/metrics`)).text());
      counts[attention] = { scenarios: doc.scenarios.map((s) => ({ name: s.name, outcome: s.outcome, requests: s.requests, tokens: s.tokens })), prefilled: c.prefilled, generated: c.generated, answers: c.answers, rejected: c.rejected };
    }
    expect(counts['skip']).toEqual(counts['full']);
    expect((counts['full'] as { prefilled: number }).prefilled).toBeGreaterThan(0);
  }, 240_000);
});
