/**
 * The second security review's defects that live in one module each, reproduced at that module's API (the
 * CLI-level ones are in security-review-2-cli.test.ts). Every test here failed before its fix.
 */
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MARKER_PREFIX } from '../../prober/src/probe/markers.js';
import { createMarkerRegistry } from '../../prober/src/probe/marker-registry.js';
import { createRedactor } from '../../prober/src/probe/redactor.js';
import { createScanner } from '../../prober/src/probe/scanner.js';
import { forTerminal, oneLine } from '../../prober/src/terminal-text.js';
import { matchSilence, parseSilence } from '../../prober/src/service/silences.js';
import { parseFileSd, DiscoveryError } from '../../prober/src/service/discovery/sources.js';
import { createDiscovery } from '../../prober/src/service/discovery/manager.js';
import { parseConfig, ConfigError, type DiscoveryEntry } from '../../prober/src/service/config.js';
import { toJunit } from '../../prober/src/commands/run-output.js';
import { FINDING_KINDS, type Finding } from '../../prober/src/probe/findings.js';
import type { ProbeRun } from '../../prober/src/probe/result.js';
import pino from 'pino';

const KEY = 'sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c';
const NOW = Date.parse('2026-06-01T00:00:00Z');
const dir = mkdtempSync(path.join(tmpdir(), 'kvc-review2-'));
const finding = (kind: Finding['kind'] = 'cross-request-leak'): Finding =>
  ({ kind, severity: FINDING_KINDS[kind].severity, scenario: 'overlimit-handoff', evidence: {}, chance: 0 }) as Finding;

describe('defect 4: silence target patterns match in linear time', () => {
  it('*a*a*a*a*a*a*a*a*a*a*a*a*b against 40 a\'s answers at once (a backtracking regex took 44 s)', () => {
    const s = { id: '1', target: '*a*a*a*a*a*a*a*a*a*a*a*a*b', kind: '*', reason: 'r', expiresAt: '2026-07-01T00:00:00Z', createdAt: '', createdBy: 'ops' };
    const started = performance.now();
    expect(matchSilence([s], 'a'.repeat(40), finding(), NOW)).toBeUndefined();
    expect(matchSilence([s], `${'a'.repeat(39)}b`, finding(), NOW)).toBe(s);
    // Not a timing claim: a backtracking matcher does not return within the test's timeout at all.
    expect(performance.now() - started).toBeLessThan(2000);
  }, 4000);

  it('globs keep their meaning: * is any run (across /), everything else literal', () => {
    const at = (target: string, name: string): boolean =>
      matchSilence([{ id: '1', target, kind: '*', reason: 'r', expiresAt: '2026-07-01T00:00:00Z', createdAt: '', createdBy: 'o' }], name, finding(), NOW) !== undefined;
    expect(at('glm/*', 'glm/10.0.0.1:8000')).toBe(true);
    expect(at('glm/*', 'glmx/10.0.0.1:8000')).toBe(false);
    expect(at('*10.0.0.1:8000', 'glm/10.0.0.1:8000')).toBe(true);
    expect(at('*10.0.0.1:8000', '10.0.0.1:8000')).toBe(true);
    expect(at('a.b', 'axb')).toBe(false);
    expect(at('*', 'anything')).toBe(true);
    expect(at('a*b*c', 'abc')).toBe(true);
    expect(at('a*b*c', 'acb')).toBe(false);
  });
});

describe('defect 10: ack --expires and --reason', () => {
  const ack = (expires: string, reason = 'known, TICKET-1'): ReturnType<typeof parseSilence> =>
    parseSilence({ target: 'x', kind: '*', expires, reason }, 'ack', { now: NOW, knownScenarios: [], durationOf: (s) => (/^\d+(ms|d|h|m|s)$/.test(s) ? Number.parseInt(s, 10) * ({ ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5 } as Record<string, number>)[s.replace(/^\d+/, '')]! : undefined), id: '', createdBy: 'ops' });

  it.each([
    ['2020-01-01', /future/],
    ['0d', /at least 1m/],
    ['1ms', /at least 1m/],
    ['2026-02-30', /real calendar date/],
    ['2026-06-10T12:00:00', /zone/],
    ['2026-06-10T25:00:00Z', /real time of day/],
  ])('%s is refused', (expires, why) => {
    const r = ack(expires);
    expect(r.silence).toBeUndefined();
    expect(r.issues.map((i) => i.message).join('\n')).toMatch(why);
  });

  it('a real date, a zoned time and a duration are taken as written', () => {
    expect(ack('2026-06-10').silence?.expiresAt).toBe('2026-06-10T00:00:00.000Z');
    expect(ack('2026-06-10T12:00:00+02:00').silence?.expiresAt).toBe('2026-06-10T10:00:00.000Z');
    expect(ack('7d').silence?.expiresAt).toBe('2026-06-08T00:00:00.000Z');
  });

  it('a reason with CR/LF (a forged "FAKE: PASS" line) or a bidi override is refused', () => {
    for (const reason of ['ok\nFAKE: PASS', 'ok\r\nFAKE: PASS', 'ok \u202eSSAP', 'ok\u0085next']) {
      const r = ack('7d', reason);
      expect(r.silence).toBeUndefined();
      expect(r.issues[0]!.path).toBe('ack.reason');
    }
  });

  it('an unknown --kind or a bad --expires holding a key is described, never echoed', () => {
    const r = parseSilence({ target: 'x', kind: KEY, expires: KEY, reason: 'r' }, 'ack', { now: NOW, knownScenarios: [], durationOf: () => undefined, id: '', createdBy: 'o' });
    const text = r.issues.map((i) => `${i.path}: ${i.message}`).join('\n');
    expect(text).toMatch(/kind/);
    expect(text).toMatch(/expires/);
    expect(text).not.toContain(KEY.slice(0, 16));
  });
});

describe('defect 6: redaction', () => {
  it('a key echoed with \\x01 every 5 characters is redacted, and so printed nowhere once controls are stripped', () => {
    const woven = KEY.match(/.{1,5}/g)!.join('\u0001');
    const redactor = createRedactor([KEY]);
    for (const text of [`error: ${woven} is not valid`, `a\u200b${KEY.match(/.{1,3}/g)!.join('\u200b')}`]) {
      const out = redactor.text(text);
      expect(forTerminal(out)).not.toContain(KEY.slice(0, 12));
      expect(oneLine(out).replace(/[\u200b]/g, '')).not.toMatch(/4f9a8b7c6d5e/);
      expect(out).toContain('[redacted]');
    }
  });

  it('no piece of a key survives at an excerpt\'s edge: the region is scrubbed before the excerpt is cut', () => {
    const registry = createMarkerRegistry({ now: () => new Date('2026-05-01T12:00:00Z') });
    const planter = registry.plant({ runId: 'run-1', requestId: 'planter-1', role: 'planter', tenant: 'a' });
    const body = planter.marker.slice(MARKER_PREFIX.length);
    // The key ends 1..11 characters inside the excerpt's left edge (60 characters of context).
    for (let inside = 1; inside <= 11; inside++) {
      // 60 characters of context before the body, which follows the `kvcanary-` prefix.
      const filler = ' '.repeat(60 - inside - MARKER_PREFIX.length);
      const text = `xx ${KEY}${filler}${MARKER_PREFIX}${body} and then the rest of the answer, long enough to close it.`;
      const session = createScanner(registry).open({ requestId: 'reader-1', tenant: 'b', role: 'reader', runId: 'run-1', secrets: [KEY] });
      session.push(text);
      const [m] = session.end();
      expect(m, `inside=${inside}`).toBeDefined();
      const edge = KEY.slice(-inside);
      expect(m!.excerpt.startsWith(edge), `inside=${inside}: ${m!.excerpt}`).toBe(false);
      expect(m!.excerpt).toContain(body);
    }
  });
});

describe('defect 7 and 5: discovered names and the address policy', () => {
  it('file_sd: a host with ESC, BEL or RLO, or a label value with them, is refused (never a target name)', () => {
    for (const t of ['\u001b[31mevil:8000', 'be\u0007ll:8000', 'abc\u202ecba:8000', 'a b:8000']) {
      expect(() => parseFileSd(JSON.stringify([{ targets: [t] }]), 'sd.json')).toThrow(DiscoveryError);
    }
    expect(() => parseFileSd(JSON.stringify([{ targets: ['ok:1'], labels: { zone: 'a\u202eb' } }]), 'sd.json')).toThrow(/control characters/);
    try {
      parseFileSd(JSON.stringify([{ targets: [`\u001b]0;${KEY}\u0007:1`] }]), 'sd.json');
    } catch (err) {
      expect((err as Error).message).not.toContain('\u001b');
      expect((err as Error).message).not.toContain(KEY.slice(0, 16));
    }
    expect(parseFileSd(JSON.stringify([{ targets: ['glm-0.glm.default.svc:8000', '10.0.0.5:8000', '[fd00::5]:8000'] }]))).toHaveLength(3);
  });

  const protectedList = ['169.254.169.254:80', '169.254.10.10:8000', '[fe80::1]:8000', 'metadata.google.internal:80', '0.0.0.0:8000', '[::]:8000', '[fd00:ec2::254]:80', '[::ffff:169.254.169.254]:80', 'sneaky.example:8000', '127.0.0.1:8000'];

  async function discovered(allow?: string[]): Promise<string[]> {
    const file = path.join(dir, `sd-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(file, JSON.stringify([{ targets: protectedList }]));
    const config = parseConfig(`targets:\n  - name: glm\n    discover: { file_sd: ${file}${allow === undefined ? '' : `, allow: [${allow.join(', ')}]`} }\n`, { knownScenarios: ['capacity-audit'] });
    const clock = { now: () => Date.now(), setTimeout: (f: () => void, ms: number) => setTimeout(f, ms), clearTimeout: (t: unknown) => clearTimeout(t as NodeJS.Timeout) };
    // sneaky.example is a name whose DNS answer is the metadata address (a rebinding record).
    const lookup = async (host: string): Promise<string[]> => (host === 'sneaky.example' ? ['169.254.169.254'] : []);
    const d = createDiscovery({ entries: config.discovery as DiscoveryEntry[], logger: pino({ level: 'silent' }), clock: clock as never, onChange: () => {}, lookup } as Parameters<typeof createDiscovery>[0]);
    await d.start();
    d.stop();
    return d.targets().map((t) => t.target.name);
  }

  it('link-local, metadata and unspecified addresses (and names resolving to them) are not probed by default', async () => {
    expect(await discovered()).toEqual(['glm/127.0.0.1:8000']);
  });

  it('discover.allow lets a class through; it is validated', async () => {
    expect((await discovered(['link-local', 'metadata', 'unspecified'])).length).toBe(protectedList.length);
    expect(() => parseConfig('targets:\n  - name: glm\n    discover: { dns: "a.b:1", allow: [everything] }\n', { knownScenarios: ['capacity-audit'] }))
      .toThrow(/discover\.allow: expected a list of address classes/);
  });
});

describe('defect 3: a rejected file_sd file is not parsed again at every refresh', () => {
  it('190,000 entries under the 4 MiB cap: refused without a parse, and the refusal remembered until the file changes', async () => {
    const { createFileSdReader } = await import('../../prober/src/service/discovery/sources.js');
    const file = path.join(dir, 'huge.json');
    const entries = Array.from({ length: 190_000 }, (_, i) => `"h${i % 100}:${(i % 60000) + 1}"`);
    writeFileSync(file, `[{"targets":[${entries.join(',')}]}]`);
    const reader = createFileSdReader();
    for (let i = 0; i < 5; i++) await expect(reader.read(file)).rejects.toThrow(/not parsed/);
    expect(reader.parses()).toBe(0);
    // A file rejected by the parser itself is parsed once, then answered from memory until it changes.
    const bad = path.join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify([{ targets: ['no-port'] }]));
    for (let i = 0; i < 5; i++) await expect(reader.read(bad)).rejects.toThrow(/expected "host:port"/);
    expect(reader.parses()).toBe(1);
    writeFileSync(bad, JSON.stringify([{ targets: ['good:1'] }]));
    expect(await reader.read(bad)).toEqual([{ hostPort: 'good:1', labels: {} }]);
    expect(reader.parses()).toBe(2);
  });
});

describe('leftovers: config field paths never print a key or control characters', () => {
  const problems = (yaml: string): string => {
    try {
      parseConfig(yaml, { knownScenarios: ['capacity-audit'], requireSecrets: false });
    } catch (err) {
      return (err as ConfigError).message;
    }
    throw new Error('expected a config error');
  };

  it.each([
    ['a header name with ESC and a key', `targets: [{ name: t, base_url: "http://h:1", headers: { "X-\u001b[2J${KEY}": v } }]`],
    ['a tenant name with CR/LF', `targets: [{ name: t, base_url: "http://h:1", tenants: { "a\\r\\nFAKE ${KEY}": { cache_salt: s } } }]`],
    ['an unknown top-level key that is a key', `${KEY}: 1\ntargets: [{ name: t, base_url: "http://h:1" }]`],
    ['scenarios[i]', `scenarios: ["${KEY}"]\ntargets: [{ name: t, base_url: "http://h:1" }]`],
    ['discover.dns', `targets: [{ name: t, discover: { dns: "${KEY}" } }]`],
    ['discover.refresh', `targets: [{ name: t, discover: { dns: "a.b:1", refresh: "${KEY}" } }]`],
    ['discover unknown key', `targets: [{ name: t, discover: { dns: "a.b:1", "${KEY}": 1 } }]`],
    ['silences[].kind', `targets: [{ name: t, base_url: "http://h:1" }]\nsilences: [{ target: t, kind: "${KEY}", expires: 2026-12-01, reason: r }]`],
    ['silences[].expires', `targets: [{ name: t, base_url: "http://h:1" }]\nsilences: [{ target: t, kind: "*", expires: "${KEY}", reason: r }]`],
    ['a very long header name', `targets: [{ name: t, base_url: "http://h:1", headers: { "${'X'.repeat(5000)}": v } }]`],
  ])('%s', (_what, yaml) => {
    const text = problems(yaml);
    expect(text).not.toContain(KEY.slice(0, 16));
    expect(text).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/);
    expect(text.length).toBeLessThan(2000);
  });

  it('api_key_file: a path that is a key is not echoed; a file writable by others is refused', () => {
    const wide = path.join(dir, 'wide.key');
    writeFileSync(wide, 'k'.repeat(32), { mode: 0o666 });
    chmodSync(wide, 0o666);
    const run = (file: string): string => {
      try {
        parseConfig(`targets: [{ name: t, base_url: "http://h:1", api_key_file: "${file}" }]`, { knownScenarios: ['capacity-audit'] });
        return 'accepted';
      } catch (err) {
        return (err as Error).message;
      }
    };
    expect(run(wide)).toMatch(/writable by anyone/);
    const missing = run(`/nonexistent/${KEY}`);
    expect(missing).toMatch(/cannot read/);
    expect(missing).not.toContain(KEY.slice(0, 16));
  });
});

describe('leftovers: U+202E and C1 controls never reach JUnit raw', () => {
  it('model, notes and evidence with RLO/C1 come out without them', () => {
    const run: ProbeRun = {
      runId: 'r', target: 't', baseUrl: 'http://h:1', model: 'm\u202eodel\u009b31m', startedAt: '2026-01-01T00:00:00.000Z', finishedAt: '2026-01-01T00:00:01.000Z',
      outcome: 'fail', up: true, capacity: {},
      scenarios: [{ name: 'capacity-audit', outcome: 'fail', findings: [{ ...finding('pool-below-context'), scenario: 'capacity-audit', evidence: { note: 'x\u202ey\u0085' } as never }], requests: [], notes: ['n\u202eote\u009d'], tokens: { sent: 0, billed: 0 }, durationMs: 1 }],
    };
    expect(toJunit(run, 'warning')).not.toMatch(/[\u007f-\u009f\u202a-\u202e\u2066-\u2069]/);
  });
});


describe('defect 9: an emptied api_key_file sends nothing', () => {
  it('no request without its key: the run is inconclusive and says why', async () => {
    const { createServer } = await import('node:http');
    const { runProbe } = await import('../../prober/src/probe/probe.js');
    let requests = 0;
    const server = createServer((_req, res) => { requests++; res.writeHead(200, { 'content-type': 'application/json' }); res.end('{"data":[{"id":"m"}]}'); });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const keyFile = path.join(dir, 'emptied.key');
    writeFileSync(keyFile, '');
    const registry = createMarkerRegistry({ now: () => new Date() });
    try {
      const run = await runProbe({ registry, scanner: createScanner(registry) }, {
        target: { name: 't', baseUrl: `http://127.0.0.1:${port}`, apiKeyFile: keyFile, headers: {}, tenants: [], schedule: { timeoutMs: 5000 } },
        scenarios: ['capacity-audit', 'overlimit-rejection'], runId: 'run-k', signal: new AbortController().signal, tokenBudget: 1e9,
      });
      expect(requests).toBe(0);
      expect(run.outcome).toBe('inconclusive');
      expect(run.scenarios[0]!.notes[0]).toMatch(/api_key_file.*nothing was sent/);
    } finally {
      server.close();
    }
  });
});
