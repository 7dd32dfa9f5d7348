/**
 * The CLI as an operator meets it when things go wrong: usage and config problems exit 64 with one line
 * naming the flag or field (never a value that could be a key), nothing prints a stack unless asked, a run
 * against a dead or hanging endpoint ends by itself, and target-supplied text cannot drive the terminal.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { failingServer, listen, type FakeServer } from '../helpers/fake-endpoints.js';
import { runCli } from '../helpers/cli.js';

const KEY = 'sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c';
const dir = mkdtempSync(path.join(tmpdir(), 'kvc-harden-'));
const file = (name: string, text: string): string => {
  const p = path.join(dir, name);
  writeFileSync(p, text);
  return p;
};

function expectUsage(r: { code: number | null; stderr: string; stdout: string }, names: RegExp): void {
  expect(r.code).toBe(64);
  expect(r.stderr).toMatch(names);
  expect(r.stderr).not.toMatch(/\n\s+at .+:\d+:\d+/);  // no stack frames
}

describe('usage and config problems exit 64 naming the flag, never a stack', () => {
  it.each([
    [['run', '--target', 'http://127.0.0.1:1', '--timeout', '2d'], /--timeout/],
    [['run', '--target', 'http://127.0.0.1:1', '--deadline', '0s'], /--deadline/],
    [['run', '--target', 'http://127.0.0.1:1', '--header', 'Content-Type: x'], /--header Content-Type/],
    [['run', '--target', 'http://127.0.0.1:1', '--header', 'X-A: a\r\nX-B: b'], /--header X-A: .*CR, LF/],
    [['run', '--target', 'http://127.0.0.1:1', '--header', 'Authorization: Bearer x', '--api-key-env', 'KVC_T_KEY'], /--header Authorization/],
    [['serve', '--listen', '127.0.0.1:99999'], /--listen/],
    [['report', '--since', '99999999999d', '--store', '/nonexistent'], /--since/],
  ])('%j', async (args, names) => {
    expectUsage(await runCli(args, { env: { KVC_T_KEY: KEY } }), names);
  });

  it('never echoes a value that could be a key (--api-key-env, --tenant, a stray positional)', async () => {
    for (const args of [
      ['run', '--target', 'http://127.0.0.1:1', '--api-key-env', KEY],
      ['run', '--target', 'http://127.0.0.1:1', '--tenant', `acme=${KEY}`],
      ['run', '--target', 'http://127.0.0.1:1', KEY],
      ['run', '--target', 'http://127.0.0.1:1', '--timeout', KEY],
    ]) {
      const r = await runCli(args);
      expectUsage(r, /--api-key-env|--tenant acme|not shown|--timeout/);
      expect(r.stderr).not.toContain(KEY);
      expect(r.stderr).not.toContain(KEY.slice(0, 16));
    }
  });

  it('says what was wrong with a harmless value', async () => {
    const r = await runCli(['run', '--target', 'http://127.0.0.1:1', '--timeout', 'soon']);
    expectUsage(r, /--timeout: expected a duration .*"soon"/);
  });

  it('check-config: a YAML alias bomb is a config error, not a crash', async () => {
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 8; i++) bomb.push(`${'bcdefghij'[i]}: &${'bcdefghij'[i]} [${Array(9).fill(`*${'abcdefghij'[i]}`).join(', ')}]`);
    bomb.push('targets: [{ name: t, base_url: "http://127.0.0.1:1" }]');
    expectUsage(await runCli(['check-config', file('bomb.yaml', bomb.join('\n'))]), /alias/i);
  });

  it('check-config: a cycle timeout the client would refuse (> 24h) fails validation', async () => {
    const r = await runCli(['check-config', file('long.yaml', 'schedule: { interval: 2d, timeout: 25h }\ntargets: [{ name: t, base_url: "http://127.0.0.1:1" }]\n')]);
    expectUsage(r, /schedule\.timeout: expected a duration of at most 1d/);
  });

  it('check-config: a file over the size cap is refused before it is parsed; so are too many targets', async () => {
    const big = 'targets:\n' + Array.from({ length: 30_000 }, (_, i) => `  - { name: t${i}, base_url: "http://127.0.0.1:1" }`).join('\n');
    expectUsage(await runCli(['check-config', file('big.yaml', big)]), /at most 1048576 are accepted/);
    const many = 'targets:\n' + Array.from({ length: 1001 }, (_, i) => `  - { name: t${i}, base_url: "http://127.0.0.1:1" }`).join('\n');
    expectUsage(await runCli(['check-config', file('many.yaml', many)]), /targets: expected at most 1000 targets/);
  });

  it('check-config: a key pasted into a config field is not echoed; a target deadline is bounded by the cycle timeout', async () => {
    const r = await runCli(['check-config', file('pasted.yaml', `targets: [{ name: t, base_url: "${KEY}", model: 7 }]\n`)]);
    expectUsage(r, /targets\[0\]\.base_url/);
    expect(r.stderr).not.toContain(KEY.slice(0, 16));
    const ok = await runCli(['check-config', file('deadline.yaml', 'schedule: { interval: 10m, timeout: 2m }\ntargets: [{ name: t, base_url: "http://127.0.0.1:1", deadline: 5m }]\n')]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('deadline 2m');
  });

  it('check-config needs no secret values: the variable is named, not set', async () => {
    const r = await runCli(['check-config', file('named.yaml', 'targets: [{ name: t, base_url: "http://127.0.0.1:1", api_key_env: KVC_SURELY_UNSET_VAR }]\n')]);
    expect(r.code).toBe(0);
  });

  it('serve: an address in use is exit 64 with one line naming --listen', async () => {
    const busy = await listen(() => {});
    try {
      const port = new URL(busy.url).port;
      const r = await runCli(['serve', '--config', file('busy.yaml', `listen: 127.0.0.1:${port}\nstore: { path: ${path.join(dir, 'busy.sqlite')} }\ntargets: [{ name: t, base_url: "http://127.0.0.1:1" }]\n`)]);
      expectUsage(r, /--listen\/listen: address .* already in use/);
    } finally {
      await busy.close();
    }
  });
});

describe('serve: an unusable store or a non-local address is a usage problem', () => {
  it.each([
    [`store: { path: ${path.join(file('plain-file', 'x'), 'x.sqlite')} }\n`, /cannot open evidence store/],
    ['listen: 192.0.2.1:0\n', /--listen\/listen: address 192\.0\.2\.1 is not local/],
  ])('%s', async (line, message) => {
    const cfg = file(`bad-${Math.random().toString(36).slice(2)}.yaml`, `${line}${line.startsWith('store') ? '' : `store: { path: ${path.join(dir, 'nl.sqlite')} }\n`}targets: [{ name: t, base_url: "http://127.0.0.1:1" }]\n`);
    expectUsage(await runCli(['serve', '--config', cfg]), message);
  });
});

describe('--version and --debug', () => {
  it('--version prints the version', async () => {
    const r = await runCli(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^kvcanary \d+\.\d+\.\d+/);
  });
});

describe('a run ends by itself', () => {
  const servers: FakeServer[] = [];
  afterAll(async () => { await Promise.all(servers.map((s) => s.close())); });

  it('a dead endpoint (lists a model, hangs every completion): inconclusive "unreachable" after a few failures, one line with -q', async () => {
    const s = await listen((req, res) => {
      if (req.url === '/v1/models') { res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: [{ id: 'm', max_model_len: 4096 }] })); return; }
      if (req.method === 'POST') return;  // hang
      res.writeHead(404).end();
    });
    servers.push(s);
    const r = await runCli(['run', '--target', s.url, '--timeout', '1s', '-q', '--json'], { timeoutMs: 60_000 });
    expect(r.code).toBe(2);
    const doc = JSON.parse(r.stdout) as { scenarios: Array<{ name: string; outcome: string; reason?: string }> };
    // Nothing passes. The configuration audit sends no completion: with no pool exposed it is not-applicable.
    expect(doc.scenarios.filter((x) => x.outcome !== 'inconclusive').map((x) => `${x.name}=${x.outcome}`)).toEqual(['capacity-audit=not-applicable']);
    // Everything from the scenario that hit the dead endpoint on is cut as unreachable (a configuration audit
    // that sends nothing may come first).
    expect(doc.scenarios.filter((x) => x.reason === 'unreachable').length).toBeGreaterThanOrEqual(doc.scenarios.length - 1);
    // One line on stderr, with the reason: not a table of empty rows.
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/INCONCLUSIVE \(unreachable\)/);
    // Far fewer requests than the scenarios would otherwise send (each waiting out its timeout).
    expect(s.requests).toBeLessThan(15);
  });

  it('a 100 MB response is cut at the response limit and counted; a flood of them ends the run as unreachable', async () => {
    const s = await failingServer('huge-body');
    servers.push(s);
    const r = await runCli(['run', '--target', s.url, '--json', '-q', '--timeout', '20s'], { timeoutMs: 60_000 });
    expect(r.code).toBe(2);
    const doc = JSON.parse(r.stdout) as { scenarios: Array<{ reason?: string; notes: string[] }> };
    expect(doc.scenarios.some((x) => x.reason === 'unreachable' && x.notes.some((n) => /too-large/.test(n)))).toBe(true);
  });

  it('--deadline: a target that streams junk forever is cut, the run inconclusive "deadline"', async () => {
    const s = await listen((req, res) => {
      if (req.url === '/v1/models') { res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: [{ id: 'm', max_model_len: 4096 }] })); return; }
      if (req.method !== 'POST') { res.writeHead(404).end(); return; }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const t = setInterval(() => res.write('data: {"choices":[{"text":"zz"}]}\n\n'), 20);
      res.on('close', () => clearInterval(t));
    });
    servers.push(s);
    const r = await runCli(['run', '--target', s.url, '--deadline', '3s', '--json', '-q'], { timeoutMs: 60_000 });
    expect(r.code).toBe(2);
    const doc = JSON.parse(r.stdout) as { outcome: string; scenarios: Array<{ outcome: string; reason?: string }> };
    expect(doc.outcome).toBe('inconclusive');
    expect(doc.scenarios.some((x) => x.reason === 'deadline')).toBe(true);
    expect(r.stderr).toMatch(/deadline/);
  });
});

describe('secrets and the terminal', () => {
  const servers: FakeServer[] = [];
  afterAll(async () => { await Promise.all(servers.map((s) => s.close())); });

  it('a key echoed split across SSE deltas, and a header value, reach neither --json evidence nor stderr; control characters from the target never reach the terminal', async () => {
    const HEADER = 'hdr-secret-9d8c7b6a5f4e3d2c1b0a';
    const MODEL = 'evil\u001b]0;pwned\u0007\u001b[31mred\rmodel';
    const context = 8192;
    const seen: string[] = [] as string[];
    const s = await listen((req, res, raw) => {
      const json = (status: number, value: unknown): void => { res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value)); };
      if (req.url === '/v1/models') return json(200, { data: [{ id: MODEL, max_model_len: context }] });
      if (req.method !== 'POST') { res.writeHead(404).end(); return; }
      const b = JSON.parse(raw) as { prompt?: string; stream?: boolean; max_tokens?: number };
      const prompt = typeof b.prompt === 'string' ? b.prompt : '';
      const n = Math.ceil(prompt.length / 4) + 1;
      if (req.url === '/tokenize') return json(200, { count: n, max_model_len: context, tokens: [] });
      const maxTokens = b.max_tokens ?? 16;
      if (n + maxTokens > context) {
        return json(400, { error: { message: `This model's maximum context length is ${context} tokens. However, you requested ${n + maxTokens} tokens (${n} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`, type: 'BadRequestError', code: 400 } });
      }
      // A leaky cache: answers with a marker another request planted, then echoes the caller's credentials.
      const own: string[] = prompt.match(/kvcanary-[a-z2-7]{26}/g) ?? [];
      const other = seen.find((m) => !own.includes(m));
      seen.push(...own);
      const key = String(req.headers['authorization'] ?? '').replace(/^Bearer /, '');
      const hdr = String(req.headers['ocp-apim-subscription-key'] ?? '');
      const text = `${other ?? ''} ${key} ${hdr} tail`;
      const usage = { prompt_tokens: n, completion_tokens: maxTokens };
      if (b.stream !== true) return json(200, { choices: [{ text, finish_reason: 'length' }], usage });
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      // 7 characters per delta: every key is split across several SSE events.
      for (let i = 0; i < text.length; i += 7) res.write(`data: ${JSON.stringify({ choices: [{ text: text.slice(i, i + 7) }] })}\n\n`);
      res.end(`data: ${JSON.stringify({ choices: [{ text: '', finish_reason: 'length' }], usage })}\n\ndata: [DONE]\n\n`);
    });
    servers.push(s);
    const r = await runCli(['run', '--target', s.url, '--api-key-env', 'KVC_T_KEY', '--header', `Ocp-Apim-Subscription-Key: ${HEADER}`,
      '--scenario', 'overlimit-handoff', '--json', '--timeout', '5s', '--deadline', '60s'], { env: { KVC_T_KEY: KEY }, timeoutMs: 90_000 });
    const doc = JSON.parse(r.stdout) as { findings: Array<{ evidence: { excerpt?: string } }> };
    // The leak was found, and its evidence is where the echoed credentials would have been.
    expect(doc.findings.length).toBeGreaterThan(0);
    expect(doc.findings.some((f) => (f.evidence.excerpt ?? '').includes('[redacted]'))).toBe(true);
    const all = r.stdout + r.stderr;
    for (const secret of [KEY, HEADER]) {
      expect(all).not.toContain(secret);
      for (let i = 0; i + 12 <= secret.length; i += 4) expect(all).not.toContain(secret.slice(i, i + 12));
    }
    // eslint-disable-next-line no-control-regex
    expect(r.stderr).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f]/);
    expect(r.stderr).toContain('evil]0;pwned');
  });
});
