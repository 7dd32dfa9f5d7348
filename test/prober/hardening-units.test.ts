/** The hardening building blocks on their own: error boundary, redactor, terminal text, Host check, --since. */
import { describe, expect, it } from 'vitest';
import { report } from '../../prober/src/cli-errors.js';
import { createRedactor, isSecretHeader, targetSecrets } from '../../prober/src/probe/redactor.js';
import { createHostCheck } from '../../prober/src/service/host-check.js';
import { parseSince, SinceError } from '../../prober/src/since.js';
import { forTerminal, oneLine } from '../../prober/src/terminal-text.js';
import { couldBeKey, describeValue } from '../../prober/src/shown-value.js';
import { ConfigError } from '../../prober/src/service/config.js';
import { UsageError } from '../../prober/src/commands/usage.js';

describe('the CLI error boundary', () => {
  const run = (err: unknown, debug = false): { code: number; text: string } => {
    let text = '';
    const code = report({ command: 'run', debug, write: (t) => { text += t; } }, err);
    return { code, text };
  };

  it('usage and config problems: 64 and the message', () => {
    expect(run(new UsageError('--timeout: bad'))).toEqual({ code: 64, text: 'kvcanary run: --timeout: bad\n' });
    expect(run(new ConfigError('KVC_CONFIG_INVALID', [{ path: 'targets[0].name', message: 'required' }])).code).toBe(64);
    expect(run(Object.assign(new Error('listen EADDRINUSE'), { code: 'EADDRINUSE', syscall: 'listen', address: '127.0.0.1', port: 9464 })).text)
      .toMatch(/--listen\/listen: address 127.0.0.1:9464 is already in use/);
  });

  it('anything else: 70 and one line; the stack only with --debug', () => {
    const err = new TypeError('cannot read properties of undefined');
    const quiet = run(err);
    expect(quiet.code).toBe(70);
    expect(quiet.text.trim().split('\n')).toHaveLength(1);
    expect(quiet.text).toMatch(/internal error: TypeError: cannot read/);
    const loud = run(err, true);
    expect(loud.text).toMatch(/\n\s+at /);
  });

  it('never prints a bearer credential from an error message', () => {
    expect(run(new Error('upstream said: Authorization: Bearer abcdefghijklmnop1234')).text).not.toContain('abcdefghijklmnop1234');
  });
});

describe('the redactor', () => {
  it('catches a key in assembled text, whole or cut at an edge, and in nested values', () => {
    const key = 'sk-9f8e7d6c5b4a39281706f5e4';
    const r = createRedactor([key]);
    expect(r.text(`x ${key} y`)).toBe('x [redacted] y');
    expect(r.text(`...${key.slice(5)}`)).not.toContain(key.slice(5, 20));
    const deep = r.deep({ a: [{ b: `echo ${key}` }], [key]: 1 });
    expect(JSON.stringify(deep)).not.toContain(key);
  });

  it('every header value is secret unless on the allow-list; URL credentials too', () => {
    expect(isSecretHeader('Ocp-Apim-Subscription-Key')).toBe(true);
    expect(isSecretHeader('X-Auth')).toBe(true);
    expect(isSecretHeader('X-Anything-New')).toBe(true);
    expect(isSecretHeader('User-Agent')).toBe(false);
    const secrets = targetSecrets({ baseUrl: 'https://bob:hunter2pass@h', headers: { 'X-Auth': 'auth-value-1', Accept: 'application/json' }, apiKeyEnv: 'K', tenants: [{ apiKeyEnv: 'T' }] }, { K: 'key-one', T: 'key-two' });
    expect(secrets.sort()).toEqual(['auth-value-1', 'bob', 'hunter2pass', 'key-one', 'key-two']);
  });
});

describe('terminal text', () => {
  it('strips escape sequences, BEL, CR and C1 controls; keeps newlines only where allowed', () => {
    const hostile = 'a\u001b]0;title\u0007b\u001b[31mc\rd\u009be\u202ef\ng';
    expect(forTerminal(hostile)).toBe('a]0;titleb[31mcdef\ng');
    expect(oneLine(hostile)).toBe('a]0;titleb[31mc def g');
  });
});

describe('values in error messages', () => {
  it('describes anything that could be a key instead of echoing it', () => {
    for (const k of ['sk-abc123', 'ghp_0123456789abcdefghij', 'AbCdEf0123456789AbCdEf0123', 'https://u:p@host']) {
      expect(couldBeKey(k)).toBe(true);
      expect(describeValue(k)).not.toContain(k);
    }
    expect(describeValue('soon')).toBe('"soon" (string)');
  });
});

describe('the status server Host check', () => {
  it('answers its listen address, localhost and allowed names only', () => {
    const ok = createHostCheck({ listenHost: '127.0.0.1', allowedHosts: ['canary.internal'] });
    for (const h of ['127.0.0.1:9464', 'localhost:9464', 'LOCALHOST', '[::1]:9464', 'canary.internal:443', 'canary.internal']) expect(ok(h)).toBe(true);
    for (const h of ['evil.example:9464', 'attacker.com', '127.0.0.1.nip.io:9464', '', undefined, 'a b', '10.1.2.3:9464']) expect(ok(h)).toBe(false);
    // Bound to every address (a Kubernetes pod): Prometheus scrapes by the pod's IP; names still need listing.
    const pod = createHostCheck({ listenHost: '0.0.0.0' });
    for (const h of ['10.1.2.3:9464', '[fd00::5]:9464', 'localhost:9464']) expect(pod(h)).toBe(true);
    for (const h of ['evil.example:9464', '10.1.2.3.nip.io']) expect(pod(h)).toBe(false);
  });
});

describe('--since', () => {
  const now = Date.parse('2026-12-03T12:00:00Z');
  it('takes a duration or a date/time, and refuses what would overflow', () => {
    expect(parseSince('1h', now)).toBe(now - 3_600_000);
    expect(parseSince('2026-12-01', now)).toBe(Date.parse('2026-12-01'));
    expect(parseSince('2026-12-01T09:30Z', now)).toBe(Date.parse('2026-12-01T09:30Z'));
    expect(() => parseSince('99999999999d', now)).toThrow(SinceError);
    expect(() => parseSince('yesterday', now)).toThrow(/date\/time/);
  });
});

describe('/api ?since= out of range', () => {
  it('is a 400 naming the parameter, not a 500', async () => {
    const { startServiceServer } = await import('../../prober/src/service/server.js');
    const { openStore } = await import('../../prober/src/service/store.js');
    const { Registry } = await import('prom-client');
    const store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
    const server = await startServiceServer({ host: '127.0.0.1', port: 0, registry: new Registry(), store });
    try {
      for (const path of ['api/runs?since=99999999999d', 'api/findings?since=99999999999d', 'api/runs?since=nonsense']) {
        const res = await fetch(`${server.url}${path}`);
        expect(res.status, path).toBe(400);
        expect(((await res.json()) as { error: string }).error).toMatch(/^since: /);
      }
      expect((await fetch(`${server.url}api/runs?since=2026-01-01`)).status).toBe(200);
    } finally {
      await server.close();
      store.close();
    }
  });
});
