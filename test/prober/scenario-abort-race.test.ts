/**
 * abort-race against an endpoint whose streamed answers end with an error event after their text (llama.cpp's
 * chat parser does this to a generation cut mid-character at max_tokens): a reader that streamed its text
 * decoded over its pages and went through the scanner, so its window counts. One that streamed less than a
 * marker fragment before the error could not have shown a leak: it does not.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe } from '../../prober/src/probe/probe.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import type { ScenarioResult as ScenarioRun } from '../../prober/src/probe/result.js';
import type { TargetConfig } from '../../prober/src/service/config.js';
import { echoNoiseServer, type FakeServer } from '../helpers/fake-endpoints.js';

const target = (url: string): TargetConfig => ({
  name: 'parser-errors', baseUrl: url, headers: {}, tenants: [], scenarios: [],
  schedule: { intervalMs: 60_000, timeoutMs: 30_000, jitterMs: 0 }, budget: { tokensPerHour: 1e12 },
});

async function abortRaceAgainst(url: string): Promise<ScenarioRun> {
  const registry = createMarkerRegistry();
  const run = await runProbe(
    { registry, scanner: createScanner(registry) },
    { target: target(url), scenarios: ['abort-race'], runId: 'parser-errors', signal: new AbortController().signal, tokenBudget: 1e12 },
  );
  return run.scenarios[0]!;
}

describe('abort-race readers', () => {
  let server: FakeServer;
  let cut: FakeServer;
  beforeAll(async () => {
    server = await echoNoiseServer({ context: 4096, seed: 3, prefillMsPerToken: 0.05, errorAfterText: true });
    cut = await echoNoiseServer({ context: 4096, seed: 3, prefillMsPerToken: 0.05, errorAfterChars: 4 });
  });
  afterAll(async () => {
    await server.close();
    await cut.close();
  });

  it('a reader whose stream ends in an error after its text counts as read: the run reaches its windows and passes', async () => {
    const s = await abortRaceAgainst(server.url);
    const notes = s.notes.join('\n');
    const readers = s.requests.filter((r) => r.role === 'reader');
    expect(readers.length).toBeGreaterThan(0);
    expect(readers.every((r) => r.transport === 'http-5xx'), notes).toBe(true);
    expect(notes).toMatch(/planter time to first token \d+ ms/);
    expect(notes).toMatch(/(\d+)\/\1 readers decoded/);
    expect(s.findings).toEqual([]);
    expect(s.outcome, notes).toBe('pass');
  });

  it("a reader whose stream breaks off with an error before a marker fragment's length does not count: never a pass", async () => {
    const s = await abortRaceAgainst(cut.url);
    const notes = s.notes.join('\n');
    expect(notes).toMatch(/ 0\/\d+ readers decoded/);
    expect(s.outcome, notes).toBe('inconclusive');
    expect(s.reason).toBe('power');
  });
});
