import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';
import { echoNoiseServer, failingServer, listen, type FakeServer } from '../helpers/fake-endpoints.js';
import { runCli } from '../helpers/cli.js';

describe('kvcanary run: usage', () => {
  it.each([
    [['run'], /--target URL is required/],
    [['run', '--target', 'not a url'], /--target/],
    [['run', '--target', 'http://127.0.0.1:1', '--scenario', 'nope'], /unknown scenario ['"]nope['"]/],
    [['run', '--target', 'http://127.0.0.1:1', '--bogus'], /bogus/],
    [['run', '--target', 'http://127.0.0.1:1', '--timeout', 'soon'], /--timeout/],
    [['run', '--target', 'http://127.0.0.1:1', '--api-key-env', 'KVCANARY_TEST_UNSET_VAR'], /KVCANARY_TEST_UNSET_VAR is not set/],
    [['run', '--target', 'http://127.0.0.1:1', '--tenant', 'a'], /NAME=ENV_VAR/],
    [['nonsense'], /unknown command 'nonsense'/],
  ])('%j exits 64 naming the problem', async (args, message) => {
    const r = await runCli(args);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
  });
});

describe('kvcanary run: a well-behaved endpoint', () => {
  let server: FakeServer;
  beforeAll(async () => {
    // Prefill time grows with the prompt, as on a real server: a powered timing test can rule a cache out.
    server = await echoNoiseServer({ prefillMsPerToken: 0.02 });
  });
  afterAll(() => server.close());

  it('prints one JSON document, no findings, and never exit 1', async () => {
    const r = await runCli(['run', '--target', `${server.url}/v1/`, '--json', '--api-key-env', 'KVC_TEST_KEY'], { env: { KVC_TEST_KEY: 'sk-test-secret-123456' } });
    const doc = JSON.parse(r.stdout) as { outcome: string; findings: unknown[]; scenarios: Array<{ name: string; outcome: string }>; model: string };
    expect(doc.findings).toEqual([]);
    expect(doc.model).toBe('echo');
    // The default is every registered scenario, in registry order (the registry grows; this pins the default).
    expect(doc.scenarios.map((s) => s.name)).toEqual([...SCENARIO_NAMES]);
    // No pool is exposed (overlimit-handoff judges that risk by behaviour) and there is no prefix cache (no
    // cached_tokens, and the escalated same-tenant timing control shows no reuse): those are not applicable,
    // and the behavioural scenarios pass, so the run passes.
    const outcome = (name: string): string | undefined => doc.scenarios.find((s) => s.name === name)?.outcome;
    expect(outcome('capacity-audit')).toBe('not-applicable');
    expect(outcome('overlimit-handoff')).toBe('pass');
    for (const name of ['prefix-isolation', 'prefix-collision', 'prefix-churn']) expect(outcome(name), name).toBe('not-applicable');
    expect(doc.outcome).toBe('pass');
    expect(r.code).toBe(0);
    expect(r.stdout + r.stderr).not.toContain('sk-test-secret-123456');
  });
});

describe('kvcanary run: endpoints that fail are inconclusive, never a pass', () => {
  const servers: FakeServer[] = [];
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
  });

  it('connection refused', async () => {
    const s = await listen(() => {});
    const url = s.url;
    await s.close();
    const r = await runCli(['run', '--target', url, '--json', '-q']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout).outcome).toBe('inconclusive');
  });

  it.each(['5xx', 'reset', 'hang', 'garbage-sse', 'huge-body'] as const)('%s', async (mode) => {
    const s = await failingServer(mode);
    servers.push(s);
    const r = await runCli(['run', '--target', s.url, '--json', '-q', '--timeout', '2s', '--scenario', 'overlimit-handoff', '--scenario', 'abort-race', '--rounds', '1']);
    expect(r.code).toBe(2);
    const doc = JSON.parse(r.stdout) as { outcome: string; findings: unknown[] };
    expect(doc.outcome).toBe('inconclusive');
    expect(doc.findings).toEqual([]);
  });
});
