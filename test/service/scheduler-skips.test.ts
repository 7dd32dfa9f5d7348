/**
 * Skips reach the store, so `kvcanary report` can list them after the fact: a budget skip with what the cycle
 * needed against what was left, an overlap, and the scenarios a shutdown cancelled, by name.
 */
import { Writable } from 'node:stream';
import { Registry } from 'prom-client';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { parseConfig } from '../../prober/src/service/config.js';
import { createLogger } from '../../prober/src/service/logger.js';
import { createMetrics } from '../../prober/src/service/metrics.js';
import type { ProbeFn } from '../../prober/src/probe/probe-fn.js';
import { createScheduler } from '../../prober/src/service/scheduler.js';
import { openStore, type Store } from '../../prober/src/service/store.js';

const T0 = Date.parse('2026-03-01T00:00:00Z');
const M = 60_000;

let store: Store;
beforeEach(() => {
  vi.useFakeTimers({ now: T0 });
  store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
});
afterEach(() => {
  store.close();
  vi.useRealTimers();
});

/** A probe whose scenarios each cost `tokens` and take `ms` of (fake) time, or never end when `ms` is Infinity. */
function probe(tokens: number, ms: number): ProbeFn {
  return async (req) => {
    if (!Number.isFinite(ms)) await new Promise(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, ms));
    const name = req.scenarios[0]!;
    return {
      runId: req.runId, target: req.target.name, baseUrl: req.target.baseUrl, model: 'm', startedAt: new Date().toISOString(),
      finishedAt: new Date().toISOString(), outcome: 'pass', capacity: {}, up: true,
      scenarios: [{ name, outcome: 'pass', findings: [], requests: [], notes: [], tokens: { sent: tokens, billed: tokens }, durationMs: ms }],
    };
  };
}

function scheduler(yaml: string, p: ProbeFn) {
  const logger = createLogger({ level: 'error', destination: new Writable({ write(_c, _e, cb) { cb(); } }) });
  const config = parseConfig(yaml, { knownScenarios: ['overlimit-handoff', 'abort-race', 'capacity-audit'], env: {} });
  return createScheduler({ config, probe: p, store, metrics: createMetrics(new Registry()), logger, random: () => 0, abortGraceMs: 1000 });
}

describe('scheduler: skips are stored', () => {
  it('a budget skip with needed and available tokens; an overlap behind a probe that ignores its abort', async () => {
    const budget = scheduler(`
schedule: { interval: 10m, timeout: 1m, jitter: 0s, scenarios: every_cycle }
budget: { tokens_per_hour: 1000 }
scenarios: [overlimit-handoff]
targets: [{ name: prod, base_url: "http://h" }]`, probe(650, 1000));
    budget.start();
    await vi.advanceTimersByTimeAsync(25 * M);
    await budget.stop();
    const [skip] = store.skipSummary({ target: 'prod' });
    expect(skip).toMatchObject({ reason: 'budget', count: 2, firstAt: new Date(T0 + 10 * M).toISOString() });
    expect(skip!.latest).toEqual({ target: 'prod', reason: 'budget', at: new Date(T0 + 20 * M).toISOString(), neededTokens: 650, availableTokens: 350 });

    const hung = scheduler(`
schedule: { interval: 5m, timeout: 1m, jitter: 0s, scenarios: every_cycle }
scenarios: [abort-race]
targets: [{ name: stuck, base_url: "http://s" }]`, probe(0, Infinity));
    hung.start();
    await vi.advanceTimersByTimeAsync(11 * M);
    const stopping = hung.stop();
    await vi.runOnlyPendingTimersAsync();
    await stopping;
    expect(store.skipSummary({ target: 'stuck' }).map((s) => [s.reason, s.count])).toEqual([['overlap', 2]]);
  });

  it('a shutdown names each queued scenario it cancelled', async () => {
    const s = scheduler(`
schedule: { interval: 5m, timeout: 2m, jitter: 0s, scenarios: every_cycle }
concurrency: { global: 4, per_target: 1 }
scenarios: [overlimit-handoff, abort-race, capacity-audit]
targets: [{ name: prod, base_url: "http://h" }]`, probe(0, 30_000));
    s.start();
    await vi.advanceTimersByTimeAsync(1000);
    const stopping = s.stop();
    await vi.advanceTimersByTimeAsync(30_000);
    await stopping;
    const [shutdown] = store.skipSummary();
    expect(shutdown).toMatchObject({ target: 'prod', reason: 'shutdown', count: 2 });
    expect(['abort-race', 'capacity-audit']).toContain(shutdown!.latest.scenario);
  });
});
