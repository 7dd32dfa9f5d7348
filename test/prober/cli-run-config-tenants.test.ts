/**
 * `kvcanary run --config FILE --target URL`, the URL a configured target's: the run probes as that target's
 * configured identities, as `serve` would (its api key, its tenants' keys and cache_salts, its headers), not
 * as synthetic salt identities of an anonymous caller. Flags given on the command line win. A configured
 * secret the run cannot use (an unset variable, a missing key file) exits 64 naming it, before anything is
 * sent. Before the fix the endpoint saw no Authorization header at all: the config only named the run.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { echoNoiseServer, type FakeServer } from '../helpers/fake-endpoints.js';

const KEY_A = 'key-alice-0123456789abcdef';
const KEY_B = 'key-bob-0123456789abcdef';
const KEY_CLI = 'key-cli-0123456789abcdef';
let server: FakeServer;
let seen: Array<{ auth: string | undefined; team: string | undefined; salt: unknown }> = [];
/** Authorization of GET requests (introspection: /v1/models, /metrics, ...). */
let gets: Array<string | undefined> = [];

beforeAll(async () => {
  server = await echoNoiseServer();
  server.server.on('request', (req) => {
    if (req.method === 'GET') gets.push(req.headers.authorization);
    if (req.method !== 'POST' || !req.url?.includes('/completions')) return;
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      let salt: unknown;
      try {
        salt = (JSON.parse(body) as { cache_salt?: unknown }).cache_salt;
      } catch { /* not JSON */ }
      seen.push({ auth: req.headers.authorization, team: req.headers['x-team'] as string | undefined, salt });
    });
  });
});
afterAll(async () => {
  await server.close();
});
beforeEach(() => {
  seen = [];
  gets = [];
});

function setup(tenants = '      alice: { api_key_env: KVC_CT_A }\n      bob: { api_key_env: KVC_CT_B, cache_salt: bob-salt-91c2 }\n'): { home: string; config: string } {
  const home = mkdtempSync(path.join(tmpdir(), 'kvc-cfg-tenants-'));
  const config = path.join(home, 'kvcanary.yaml');
  writeFileSync(config, `targets:\n  - name: other\n    base_url: http://127.0.0.1:1\n    api_key_env: KVC_CT_SURELY_UNSET\n  - name: edge\n    base_url: ${server.url}/v1\n    headers: { X-Team: blue-team-7 }\n    tenants:\n${tenants}`);
  return { home, config };
}
const run = (home: string, args: string[], env: Record<string, string> = {}, scenario = 'prefix-isolation') =>
  runCli(['run', '--target', server.url, '--scenario', scenario, '--deadline', '40s', '-q', ...args], { env: { KVCANARY_HOME: home, KVC_CT_A: KEY_A, KVC_CT_B: KEY_B, ...env }, timeoutMs: 90_000 });

describe('kvcanary run --config: the configured target\'s tenants', { timeout: 120_000 }, () => {
  it('sends as the config target\'s tenants: their keys, bob\'s cache_salt, the target\'s headers', async () => {
    const { home, config } = setup();
    const r = await run(home, ['--config', config]);
    expect([0, 1, 2], r.stderr).toContain(r.code);
    const auths = new Set(seen.map((s) => s.auth));
    expect(auths).toEqual(new Set([`Bearer ${KEY_A}`, `Bearer ${KEY_B}`]));
    expect(seen.every((s) => s.team === 'blue-team-7')).toBe(true);
    expect(seen.filter((s) => s.auth === `Bearer ${KEY_B}`).every((s) => s.salt === 'bob-salt-91c2')).toBe(true);
    expect(seen.filter((s) => s.auth === `Bearer ${KEY_A}`).every((s) => s.salt === undefined)).toBe(true);
    expect(r.stderr).not.toContain(KEY_A);
  });

  it('--tenant flags win over the config\'s tenants', async () => {
    const { home, config } = setup();
    const r = await run(home, ['--config', config, '--tenant', 'x=KVC_CT_CLI', '--tenant-salt', 'y=cli-salt-1234'], { KVC_CT_CLI: KEY_CLI });
    expect([0, 1, 2], r.stderr).toContain(r.code);
    expect(new Set(seen.map((s) => s.auth))).toEqual(new Set([`Bearer ${KEY_CLI}`, undefined]));
  });

  it('a configured tenant key that is not set: exit 64 naming the variable and the field, nothing sent', async () => {
    const { home, config } = setup();
    const r = await run(home, ['--config', config], { KVC_CT_B: '' });
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/edge/);
    expect(r.stderr).toMatch(/tenants\.bob\.api_key_env/);
    expect(r.stderr).toMatch(/KVC_CT_B is not set/);
    expect(seen).toEqual([]);
  });

  it('a configured key file that is missing: exit 64 naming the field, nothing sent', async () => {
    const { home, config } = setup('      alice: { api_key_file: ./no-such.key }\n      bob: { api_key_env: KVC_CT_B }\n');
    const r = await run(home, ['--config', config]);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/tenants\.alice\.api_key_file/);
    expect(seen).toEqual([]);
  });

  it('another config target\'s unset key does not matter (only the probed target\'s secrets are needed)', async () => {
    const { home, config } = setup();
    const r = await run(home, ['--config', config], {}, 'capacity-audit');
    expect(r.code, r.stderr).not.toBe(64);
    // Introspection is sent as the first tenant, alice.
    expect(new Set(gets)).toEqual(new Set([`Bearer ${KEY_A}`]));
  });
});
