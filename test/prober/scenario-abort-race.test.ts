/**
 * abort-race against an endpoint whose streamed answers end with an error event after their text (llama.cpp's
 * chat parser does this to a generation cut mid-character at max_tokens): a reader that streamed its text
 * decoded over its pages and went through the scanner, so its window counts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { runProbe } from '../../prober/src/probe/probe.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import type { TargetConfig } from '../../prober/src/service/config.js';
import { echoNoiseServer, type FakeServer } from '../helpers/fake-endpoints.js';

describe('abort-race readers', () => {
  let server: FakeServer;
  beforeAll(async () => {
    server = await echoNoiseServer({ context: 4096, seed: 3, prefillMsPerToken: 0.05, errorAfterText: true });
  });
  afterAll(() => server.close());

  it('a reader whose stream ends in an error after its text counts as read: the run reaches its windows and passes', async () => {
    const registry = createMarkerRegistry();
    const target: TargetConfig = {
      name: 'parser-errors', baseUrl: server.url, headers: {}, tenants: [], scenarios: [],
      schedule: { intervalMs: 60_000, timeoutMs: 30_000, jitterMs: 0 }, budget: { tokensPerHour: 1e12 },
    };
    const run = await runProbe(
      { registry, scanner: createScanner(registry) },
      { target, scenarios: ['abort-race'], runId: 'parser-errors', signal: new AbortController().signal, tokenBudget: 1e12 },
    );
    const s = run.scenarios[0]!;
    const notes = s.notes.join('\n');
    const readers = s.requests.filter((r) => r.role === 'reader');
    expect(readers.length).toBeGreaterThan(0);
    expect(readers.every((r) => r.transport === 'http-5xx'), notes).toBe(true);
    expect(notes).toMatch(/planter time to first token \d+ ms/);
    expect(notes).toMatch(/(\d+)\/\1 readers decoded/);
    expect(s.findings).toEqual([]);
    expect(s.outcome, notes).toBe('pass');
  });
});
