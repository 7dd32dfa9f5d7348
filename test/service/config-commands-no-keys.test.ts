/**
 * `ack --config` and `report --config` read a serve config only for its store path (and report for its target
 * names): they run where the keys are not, on an on-call laptop or in CI. Neither needs an api_key_env variable
 * set nor an api_key_file present.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../prober/src/service/store.js';
import { runCli } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-nokeys-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('ack --config and report --config need no API keys', () => {
  it('add a silence to, and report from, the store a config names with its keys unset and its key file absent', async () => {
    const cfg = path.join(dir, 'kvcanary.yaml');
    writeFileSync(cfg, [
      'store: { path: "./shard-{shard}.sqlite" }',
      'targets:',
      '  - { name: prod-a, base_url: "http://127.0.0.1:9/", api_key_env: KVC_SURELY_UNSET_KEY, tenants: { a: { api_key_env: KVC_UNSET_A }, b: { api_key_file: /run/secrets/absent-key } } }',
      '  - { name: prod-b, base_url: "http://127.0.0.1:9/", api_key_file: ./absent-key-file }',
    ].join('\n') + '\n');
    for (const i of [0, 1]) openStore({ path: path.join(dir, `shard-${i}.sqlite`), retentionMs: 86_400_000 }).close();
    const env = { KVC_SURELY_UNSET_KEY: '', KVC_UNSET_A: '' };
    const ack = await runCli(['ack', '--config', cfg, '--target', 'prod-*', '--kind', 'pool-below-context', '--expires', '2h', '--reason', 'resize in TICKET-9'], { env });
    expect(ack.stderr).toBe('');
    expect(ack.code).toBe(0);
    expect(ack.stdout.split('\n').filter((l) => l.includes(': silence ')).length).toBe(2);
    const report = await runCli(['report', '--config', cfg, '--json', '--target', 'prod-b'], { env });
    expect(report.code, report.stderr).toBe(0);
    const doc = JSON.parse(report.stdout) as { silences: { target: string; reason: string }[] };
    expect(doc.silences.map((s) => s.reason)).toContain('resize in TICKET-9');
    // serve, which sends requests, still refuses the same config.
    const check = await runCli(['serve', '--config', cfg, '--listen', '127.0.0.1:0'], { env, timeoutMs: 30_000 });
    expect(check.code).toBe(64);
    expect(check.stderr).toMatch(/KVC_SURELY_UNSET_KEY is not set/);
  }, 120_000);
});
