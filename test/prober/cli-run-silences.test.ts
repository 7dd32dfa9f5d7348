/**
 * `kvcanary run` honours silences as `serve` does: those in its --config and those acknowledged (`kvcanary ack`)
 * in the store it writes to. A silenced finding is still listed — in --json, the summary and JUnit, marked
 * acknowledged with the silence's reason and expiry — but no longer makes --fail-on exit 1. The endpoint is
 * the bundled engine with the incident's capacities and every defense on: its KV pool is below its context
 * (pool-below-context, a warning) and it rejects every over-limit prompt (overlimit-rejection passes).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { XMLParser } from 'fast-xml-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/index.js';
import { openStore } from '../../prober/src/service/store.js';
import { runCli } from '../helpers/cli.js';

let engine: RunningEngine;
const dir = mkdtempSync(path.join(tmpdir(), 'kvc-run-silences-'));
let n = 0;

beforeAll(async () => {
  engine = await startEngine({ preset: 'hardened', scale: 128, port: 0, log: () => {} });
});
afterAll(async () => {
  await engine.close();
});

interface RunJson {
  outcome: string;
  scenarios: { name: string; outcome: string; findings: number; acknowledged?: number; notes: string[] }[];
  findings: { kind: string; severity: string; acknowledged?: { silence?: string; reason?: string; expiresAt?: string; text: string } }[];
}

/** One run in a home of its own (its own run store), with a JUnit file; the JSON document parsed. */
async function run(extra: string[], home = mkdtempSync(path.join(dir, 'home-'))) {
  const junit = path.join(dir, `junit-${n++}.xml`);
  const r = await runCli(['run', '--target', engine.url, '--scenario', 'capacity-audit', '--scenario', 'overlimit-rejection', '--json', '--junit', junit, ...extra],
    { env: { KVCANARY_HOME: home, KVC_RUN_EDGE_KEY: 'sk-edge-test-0123456789' }, timeoutMs: 60_000 });
  const xml = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '' }).parse(readFileSync(junit, 'utf8')) as {
    testsuites: { failures: string; testsuite: { testcase: { name: string; failure?: unknown; 'system-out'?: string }[] } };
  };
  return { ...r, json: JSON.parse(r.stdout) as RunJson, junit: xml.testsuites, home };
}

const inDays = (d: number): string => new Date(Date.now() + d * 86_400_000).toISOString();

function configFile(silences: string, baseUrl = `${engine.url}/v1/`): string {
  const p = path.join(dir, `cfg-${n++}.yaml`);
  writeFileSync(p, `targets: [{ name: edge, base_url: "${baseUrl}", api_key_env: KVC_RUN_EDGE_KEY }]\nsilences:\n${silences}\n`);
  return p;
}

describe('kvcanary run applies silences', () => {
  it('without one, the warning fails the run (exit 1): the finding the silences below acknowledge', async () => {
    const r = await run([]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.json.findings).toEqual([expect.objectContaining({ kind: 'pool-below-context', severity: 'warning' })]);
    expect(r.json.findings[0]).not.toHaveProperty('acknowledged');
    expect(r.junit.failures).toBe('1');
  });

  it('a --config silence on the config\'s target at that URL: listed as acknowledged everywhere, never exit 1 even with --fail-on info', async () => {
    const expires = inDays(7);
    const cfg = configFile(`  - { target: edge, kind: pool-below-context, expires: "${expires}", reason: "resize in TICKET-1" }`);
    const r = await run(['--config', cfg]);
    // Cheap checks alone establish no isolation (the overall rule): partial, exit 2 — never 1 for the acknowledged finding.
    expect(r.code, r.stderr).toBe(2);
    expect(r.json.outcome).toBe('partial');
    expect(r.json.findings).toEqual([expect.objectContaining({
      kind: 'pool-below-context',
      acknowledged: expect.objectContaining({ silence: 'config[0]', reason: 'resize in TICKET-1', expiresAt: expires }),
    })]);
    expect(r.json.scenarios.find((s) => s.name === 'capacity-audit')).toMatchObject({ outcome: 'pass', findings: 1, acknowledged: 1 });
    // The summary on stderr still names the finding, and says who silenced it until when and why.
    expect(r.stderr).toContain('finding pool-below-context ×1 [warning] (1 acknowledged)');
    expect(r.stderr).toContain(`ACKNOWLEDGED ×1: silence config[0] (config) until ${expires}: resize in TICKET-1`);
    expect(r.junit.failures).toBe('0');
    const audit = r.junit.testsuite.testcase.find((c) => c.name === 'capacity-audit')!;
    expect(audit).not.toHaveProperty('failure');
    expect(audit['system-out']).toContain(`acknowledged pool-below-context [warning]: silence config[0] (config) until ${expires}: resize in TICKET-1`);
    // The run's store records the finding, acknowledged.
    const store = openStore({ path: path.join(r.home, 'runs.sqlite'), retentionMs: 86_400_000, readonly: true });
    expect(store.findings().map((f) => [f.kind, f.acknowledged])).toEqual([['pool-below-context', expect.stringContaining('resize in TICKET-1')]]);
    store.close();
    expect((await run(['--config', cfg, '--fail-on', 'info'])).code).toBe(2);
  });

  it('a silence acknowledged in the run\'s store (kvcanary ack --target HOST:PORT, the endpoint) applies to later runs', async () => {
    const home = mkdtempSync(path.join(dir, 'home-'));
    const storePath = path.join(home, 'runs.sqlite');
    expect((await run([], home)).code).toBe(1);
    const ack = await runCli(['ack', '--store', storePath, '--target', new URL(engine.url).host, '--kind', 'pool-below-context', '--expires', '2h', '--reason', 'known on the CI box']);
    expect(ack.code, ack.stderr).toBe(0);
    const r = await run([], home);
    expect(r.code, r.stderr).toBe(2);
    expect(r.json.findings[0]!.acknowledged).toMatchObject({ reason: 'known on the CI box', silence: '1' });
    expect(Date.parse(r.json.findings[0]!.acknowledged!.expiresAt!)).toBeGreaterThan(Date.now());
  });

  it('a silence of another target, or one expired, does not apply', async () => {
    const other = configFile(`  - { target: edge, kind: pool-below-context, expires: "${inDays(7)}", reason: "another endpoint" }`, 'http://127.0.0.1:1/v1');
    const expired = configFile(`  - { target: "*", kind: "*", expires: "${inDays(-1)}", reason: "was known" }`);
    for (const cfg of [other, expired]) {
      const r = await run(['--config', cfg]);
      expect(r.code, r.stderr).toBe(1);
      expect(r.json.findings[0]).not.toHaveProperty('acknowledged');
    }
  });
});
