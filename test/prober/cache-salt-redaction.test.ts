/**
 * A tenant's cache_salt is its separation in a shared prefix cache: it is scrubbed like an API key wherever
 * keys are (the run's store, --json, logs), under the same minimum-length rule, so a short salt never mangles
 * ordinary text. The CLI test failed before salts joined the redactor's secrets: an endpoint that echoes the
 * request body in its 400 errors put the salt verbatim into the store's request rows.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRedactor, targetSecrets } from '../../prober/src/probe/redactor.js';
import { configSecrets, parseConfig } from '../../prober/src/service/config.js';
import { runCli } from '../helpers/cli.js';
import { listen, type FakeServer } from '../helpers/fake-endpoints.js';

const SALT_A = 'alice-salt-7f3a';
const SALT_B = 'bob-salt-91c2';

describe('cache salts are secrets', () => {
  it('targetSecrets and configSecrets include every tenant\'s cache_salt', () => {
    const target = { baseUrl: 'http://h:1', headers: {}, tenants: [{ cacheSalt: SALT_A }, { cacheSalt: SALT_B }] };
    expect(targetSecrets(target, {})).toEqual(expect.arrayContaining([SALT_A, SALT_B]));
    const config = parseConfig(`targets: [{ name: t, base_url: "http://h:1", tenants: { a: { cache_salt: ${SALT_A} }, b: { cache_salt: ${SALT_B} } } }]\n`, { knownScenarios: ['capacity-audit'], requireSecrets: false });
    expect(configSecrets(config, {})).toEqual(expect.arrayContaining([SALT_A, SALT_B]));
    expect(createRedactor(targetSecrets(target, {})).text(`{"cache_salt":"${SALT_A}"}`)).toBe('{"cache_salt":"[redacted]"}');
  });

  it('a salt shorter than the keys\' minimum (4 characters) is not scrubbed: "ab" would mangle ordinary text', () => {
    const r = createRedactor(targetSecrets({ baseUrl: 'http://h:1', headers: {}, tenants: [{ cacheSalt: 'ab' }] }, {}));
    expect(r.text('tenants alice and bob: abandon ship')).toBe('tenants alice and bob: abandon ship');
  });
});

describe('kvcanary run: an endpoint echoing the request body (with its cache_salt) in errors', () => {
  let server: FakeServer;
  beforeAll(async () => {
    server = await listen((req, res, body) => {
      res.setHeader('content-type', 'application/json');
      if (req.url === '/v1/models') {
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model', max_model_len: 4096 }] }));
        return;
      }
      res.statusCode = 400;
      res.end(JSON.stringify({ error: { message: `bad request: ${body.slice(0, 2000)}`, type: 'BadRequestError' } }));
    });
  });
  afterAll(async () => {
    await server.close();
  });

  it('the salts reach neither stdout, stderr nor the store', async () => {
    const home = mkdtempSync(path.join(tmpdir(), 'kvc-salt-home-'));
    const r = await runCli(['run', '--target', server.url, '--json', '--tenant-salt', `alice=${SALT_A}`, '--tenant-salt', `bob=${SALT_B}`,
      '--scenario', 'prefix-isolation', '--deadline', '60s'], { env: { KVCANARY_HOME: home }, timeoutMs: 90_000 });
    expect(r.code, r.stderr).toBe(2);
    const store = readFileSync(path.join(home, 'runs.sqlite')).toString('latin1');
    // The echoed bodies were stored (redacted), so the check is not vacuous.
    expect(store).toContain('bad request:');
    for (const salt of [SALT_A, SALT_B]) {
      expect(r.stdout + r.stderr).not.toContain(salt);
      expect(store.includes(salt), `${salt} in the store`).toBe(false);
    }
  }, 120_000);
});
