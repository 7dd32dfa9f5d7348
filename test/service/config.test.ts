import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, configSecrets, formatDuration, loadConfig, parseConfig, parseDuration, type ParseConfigOptions } from '../../prober/src/service/config.js';

const KNOWN = ['overlimit-handoff', 'abort-race', 'capacity-audit', 'prefix-isolation'];
const ENV = { PROD_KEY: 'sk-prod-0123456789abcdef', KEY_A: 'key-a-value-123456', KEY_B: 'key-b-value-654321' };
/** DEFAULT_SCENARIO_INTERVALS for the scenarios in KNOWN. */
const DEFAULT_TIERS = { 'overlimit-handoff': 21_600_000, 'abort-race': 3_600_000, 'prefix-isolation': 3_600_000 };
const opts: ParseConfigOptions = { env: ENV, knownScenarios: KNOWN, defaultScenarios: KNOWN.slice(0, 3), baseDir: '/srv/kvc' };

function issuesOf(text: string, o: ParseConfigOptions = opts): { path: string; message: string }[] {
  try {
    parseConfig(text, o);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).issues;
  }
  throw new Error('expected a ConfigError');
}

const FULL = `
listen: 0.0.0.0:9500
store: { path: data/kvc.sqlite, retention: 3d }
log: { level: debug }
schedule: { interval: 5m, timeout: 2m, jitter: 30s }
budget: { tokens_per_hour: 1000000 }
concurrency: { global: 6, per_target: 1 }
scenarios: [overlimit-handoff, capacity-audit]
targets:
  - name: prod-glm
    base_url: https://glm.internal:8000/v1
    model: glm-5.3
    api_key_env: PROD_KEY
    headers: { X-Org: abc, X-Api-Key: hdr-secret-value-42 }
    tenants: { a: { api_key_env: KEY_A }, b: { api_key_env: KEY_B, cache_salt: s2 } }
    schedule: { interval: 10m }
    budget: { tokens_per_hour: 500000 }
    scenarios: [abort-race]
  - name: staging
    base_url: http://10.0.0.5:30000
`;

describe('parseConfig', () => {
  it('turns the documented shape into typed values, merging per-target overrides key by key', () => {
    const c = parseConfig(FULL, opts);
    expect(c.listen).toEqual({ host: '0.0.0.0', port: 9500 });
    expect(c.store).toEqual({ path: '/srv/kvc/data/kvc.sqlite', retentionMs: 3 * 86_400_000 });
    expect(c.log.level).toBe('debug');
    expect(c.concurrency).toEqual({ global: 6, perTarget: 1 });
    const [prod, staging] = c.targets;
    expect(prod).toEqual({
      name: 'prod-glm', baseUrl: 'https://glm.internal:8000/v1', model: 'glm-5.3', apiKeyEnv: 'PROD_KEY',
      headers: { 'X-Org': 'abc', 'X-Api-Key': 'hdr-secret-value-42' },
      tenants: [{ name: 'a', apiKeyEnv: 'KEY_A' }, { name: 'b', apiKeyEnv: 'KEY_B', cacheSalt: 's2' }],
      // Only the interval was overridden: timeout and jitter come from the top level.
      schedule: { intervalMs: 600_000, timeoutMs: 120_000, jitterMs: 30_000, scenarioIntervalsMs: DEFAULT_TIERS },
      budget: { tokensPerHour: 500_000 },
      scenarios: ['abort-race'],
    });
    expect(staging).toEqual({
      name: 'staging', baseUrl: 'http://10.0.0.5:30000', headers: {}, tenants: [],
      schedule: { intervalMs: 300_000, timeoutMs: 120_000, jitterMs: 30_000, scenarioIntervalsMs: DEFAULT_TIERS },
      budget: { tokensPerHour: 1_000_000 },
      scenarios: ['overlimit-handoff', 'capacity-audit'],
    });
  });

  it('takes probe tuning at the top level and per target, merged key by key', () => {
    const c = parseConfig(`
probe: { planter_tokens: 8192, timing_pairs: 24, chat: false }
targets:
  - { name: a, base_url: http://127.0.0.1:1, probe: { timing_pairs: 30, interleave_waves: [2, 16], sweep: [0.5, 1] } }
  - { name: b, base_url: http://127.0.0.1:2 }
`, opts);
    expect(c.targets[0]!.tuning).toEqual({ planterTokens: 8192, timingPairs: 30, chat: false, interleaveWaves: [2, 16], sweep: [0.5, 1] });
    expect(c.targets[1]!.tuning).toEqual({ planterTokens: 8192, timingPairs: 24, chat: false });
    expect(parseConfig('targets: [{ name: a, base_url: http://127.0.0.1:1 }]', opts).targets[0]!.tuning).toBeUndefined();
  });

  it('names each bad probe key and value', () => {
    const issues = issuesOf(`
probe: { timing_alpha: 2, planter_token: 5 }
targets:
  - { name: a, base_url: http://127.0.0.1:1, probe: { abort_ballast: yes, interleave_waves: [0], prefix_tokens: 4, sweep: [] } }
`);
    const byPath = Object.fromEntries(issues.map((i) => [i.path, i.message]));
    expect(byPath['probe.timing_alpha']).toMatch(/strictly between 0 and 1, got `2`/);
    expect(byPath['probe.planter_token']).toMatch(/unknown key \(did you mean `planter_tokens`\?\)/);
    expect(byPath['targets[0].probe.abort_ballast']).toMatch(/true or false/);
    expect(byPath['targets[0].probe.interleave_waves']).toMatch(/integers >= 1/);
    expect(byPath['targets[0].probe.prefix_tokens']).toMatch(/integer >= 16, got `4`/);
    expect(byPath['targets[0].probe.sweep']).toMatch(/fractions/);
  });

  it('fills documented defaults', () => {
    const c = parseConfig('targets: [{ name: t, base_url: "http://127.0.0.1:1" }]', opts);
    expect(c.listen).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(c.store).toEqual({ path: '/srv/kvc/kvcanary.sqlite', retentionMs: 7 * 86_400_000 });
    // The default cost tiers of the known scenarios (DEFAULT_SCENARIO_INTERVALS): serve's schedule unless the config says otherwise.
    expect(c.schedule).toEqual({ intervalMs: 300_000, timeoutMs: 120_000, jitterMs: 30_000, scenarioIntervalsMs: DEFAULT_TIERS });
    // tokens_per_hour: auto — sized by serve from the tiers and the endpoint's advertised sizes (scenario-cost.ts).
    expect(c.budget).toEqual({ tokensPerHour: 1_000_000_000_000, derived: true });
    expect(c.concurrency).toEqual({ global: 4, perTarget: 2 });
    expect(c.scenarios).toEqual(['overlimit-handoff', 'abort-race', 'capacity-audit']);
    expect(c.targets[0]?.scenarios).toEqual(c.scenarios);
  });

  it('budget.tokens_per_hour: auto is the default, an integer sets it, anything else is refused naming the field', () => {
    const auto = parseConfig('budget: { tokens_per_hour: auto }\ntargets: [{ name: t, base_url: "http://127.0.0.1:1", budget: { tokens_per_hour: 700 } }]', opts);
    expect(auto.budget).toEqual({ tokensPerHour: 1_000_000_000_000, derived: true });
    expect(auto.targets[0]!.budget).toEqual({ tokensPerHour: 700 });
    expect(() => parseConfig('budget: { tokens_per_hour: lots }\ntargets: [{ name: t, base_url: "http://127.0.0.1:1" }]', opts)).toThrow(/budget\.tokens_per_hour: expected auto or an integer >= 1, got "lots" \(string\)/);
  });

  it('accepts IPv6 listen addresses and port 0', () => {
    const c = parseConfig('listen: "[::1]:0"\ntargets: [{ name: t, base_url: "http://h" }]', opts);
    expect(c.listen).toEqual({ host: '::1', port: 0 });
  });

  it('collects every problem, each naming the field path, what was expected and what was found', () => {
    const issues = issuesOf(`
schedule: { interval: 5m, timeout: 2 minutes }
concurrency: { global: 0 }
targets:
  - name: a
    base_ur: http://x
  - name: b
    base_url: ftp://x
    schedule: { interval: 1m, timeout: 90s }
  - name: a
    base_url: http://y
    scenarios: [overlimit-handof]
`);
    const byPath = new Map(issues.map((i) => [i.path, i.message]));
    expect(byPath.get('schedule.timeout')).toMatch(/expected a duration like 500ms, 30s, 5m.*got "2 minutes" \(string\)/);
    expect(byPath.get('concurrency.global')).toMatch(/expected an integer >= 1, got `0` \(number\)/);
    expect(byPath.get('targets[0].base_ur')).toMatch(/unknown key \(did you mean `base_url`\?\)/);
    expect(byPath.get('targets[0].base_url')).toBe('required');
    expect(byPath.get('targets[1].base_url')).toMatch(/http or https/);
    expect(byPath.get('targets[1].schedule.timeout')).toMatch(/below the interval \(1m\), got 1m30s/);
    expect(byPath.get('targets[2].name')).toMatch(/duplicate target name "a" \(first used by targets\[0\]\)/);
    expect(byPath.get('targets[2].scenarios[0]')).toMatch(/unknown scenario "overlimit-handof" \(did you mean `overlimit-handoff`\?\)/);
    expect(issues.length).toBeGreaterThanOrEqual(8);
  });

  it('checks timeout and jitter against the interval after merging, naming inherited values', () => {
    const issues = issuesOf(`
schedule: { timeout: 2m, jitter: 30s }
targets:
  - { name: t, base_url: "http://h", schedule: { interval: 1m } }
  - { name: u, base_url: "http://h", schedule: { interval: 10s, timeout: 5s } }
`);
    expect(issues).toEqual([
      { path: 'targets[0].schedule.timeout', message: 'expected a timeout below the interval (1m), got 2m (inherited)' },
      { path: 'targets[1].schedule.jitter', message: 'expected a jitter below the interval (10s), got 30s (inherited)' },
    ]);
  });

  it('bounds durations: a timer cannot wait 30 days', () => {
    expect(issuesOf('schedule: { interval: 30d }\ntargets: [{ name: t, base_url: "http://h" }]')).toEqual([
      { path: 'schedule.interval', message: 'expected a duration of at most 7d, got "30d" (string)' },
    ]);
    expect(issuesOf('schedule: { interval: 500ms }\ntargets: [{ name: t, base_url: "http://h" }]')[0]?.message).toMatch(/at least 1s/);
  });

  it('rejects unknown top-level keys with a suggestion', () => {
    expect(issuesOf('target: []\n')).toEqual(expect.arrayContaining([
      { path: 'target', message: expect.stringMatching(/unknown key \(did you mean `targets`\?\)/) as unknown as string },
      { path: 'targets', message: expect.stringMatching(/required/) as unknown as string },
    ]));
  });

  it('requires api_key_env to name a set variable, and never prints a value that may be a key', () => {
    const leaked = 'sk-live-THIS-IS-THE-KEY-ITSELF-0000';
    const issues = issuesOf(`
targets:
  - { name: a, base_url: "http://h", api_key_env: MISSING_KEY }
  - { name: b, base_url: "http://h", api_key_env: "${leaked}" }
  - { name: c, base_url: "http://h", tenants: { x: { api_key_env: ALSO_MISSING } } }
  - { name: d, base_url: "http://user:${leaked}@h" }
`);
    expect(issues.find((i) => i.path === 'targets[0].api_key_env')?.message).toBe('environment variable MISSING_KEY is not set');
    expect(issues.find((i) => i.path === 'targets[1].api_key_env')?.message).toMatch(/NAME of an environment variable.*not shown/);
    expect(issues.find((i) => i.path === 'targets[2].tenants.x.api_key_env')?.message).toBe('environment variable ALSO_MISSING is not set');
    expect(issues.find((i) => i.path === 'targets[3].base_url')?.message).toMatch(/must not carry credentials/);
    let message = '';
    try { parseConfig(`targets: [{ name: b, base_url: "http://user:${leaked}@h", api_key_env: "${leaked}" }]`, opts); } catch (err) { message = (err as Error).message; }
    expect(message).toMatch(/targets\[0\]\.api_key_env/);
    expect(message).not.toContain('THIS-IS-THE-KEY');
  });

  it('refuses a literal Authorization header and never echoes header values', () => {
    const issues = issuesOf('targets: [{ name: t, base_url: "http://h", headers: { Authorization: "Bearer sk-123456789", X-Bad: [1] } }]');
    expect(issues.find((i) => i.path === 'targets[0].headers.Authorization')?.message).toMatch(/api_key_env/);
    expect(JSON.stringify(issues)).not.toContain('sk-123456789');
  });

  it('reports YAML syntax errors as KVC_CONFIG_SYNTAX with the line', () => {
    try {
      parseConfig('targets:\n  - name: a\n   base_url: x\n', opts);
      throw new Error('no error');
    } catch (err) {
      expect((err as ConfigError).code).toBe('KVC_CONFIG_SYNTAX');
      expect((err as ConfigError).issues[0]?.message).toMatch(/line 3/);
    }
    expect(() => parseConfig('a: 1\na: 2\n', opts)).toThrow(/DUPLICATE_KEY|unique/i);
  });

  it('rejects an empty file and an empty target list', () => {
    expect(issuesOf('')).toEqual([{ path: '', message: expect.stringMatching(/empty/) as unknown as string }]);
    expect(issuesOf('targets: []').map((i) => i.path)).toEqual(['targets']);
  });
});

describe('loadConfig', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'kvc-config-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('resolves the store path against the config file and names the file in errors', async () => {
    const file = path.join(dir, 'serve.yaml');
    writeFileSync(file, 'store: { path: ev.sqlite }\ntargets: [{ name: t, base_url: "http://h" }]\n');
    const c = await loadConfig(file, { knownScenarios: KNOWN, env: {} });
    expect(c.store.path).toBe(path.join(dir, 'ev.sqlite'));

    writeFileSync(file, 'targets: [{ name: "bad name", base_url: "http://h" }]\n');
    const err = await loadConfig(file, { knownScenarios: KNOWN, env: {} }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).code).toBe('KVC_CONFIG_INVALID');
    expect((err as ConfigError).file).toBe(file);
    expect((err as Error).message).toContain(`${file}: 1 problem\n  targets[0].name: expected a name matching`);
  });

  it('reports a missing file as KVC_CONFIG_UNREADABLE', async () => {
    const err = await loadConfig(path.join(dir, 'nope.yaml'), { knownScenarios: KNOWN }).catch((e: unknown) => e);
    expect((err as ConfigError).code).toBe('KVC_CONFIG_UNREADABLE');
    expect((err as ConfigError).issues[0]?.message).toBe('file not found');
  });
});

describe('durations and secrets', () => {
  it('parses and formats durations', () => {
    expect(parseDuration('500ms')).toBe(500);
    expect(parseDuration('30s')).toBe(30_000);
    expect(parseDuration('5m')).toBe(300_000);
    expect(parseDuration('1h30m')).toBe(5_400_000);
    expect(parseDuration('7d')).toBe(604_800_000);
    expect(parseDuration('1.5s')).toBe(1500);
    for (const bad of ['5', '5 minutes', '-1s', 'm', '', '5x']) expect(parseDuration(bad)).toBeUndefined();
    expect(formatDuration(5_400_000)).toBe('1h30m');
    expect(formatDuration(250)).toBe('250ms');
  });

  it('lists every credential value the config refers to, for scrubbing', () => {
    const c = parseConfig(FULL, opts);
    // Every header value counts unless the header is on the short non-secret allow-list (X-Org's 'abc' too).
    // Tenant b's cache_salt 's2' too (listed like a key; like a key, too short to be scrubbed: redact.ts).
    expect(configSecrets(c, ENV).sort()).toEqual([ENV.KEY_A, ENV.KEY_B, ENV.PROD_KEY, 'abc', 'hdr-secret-value-42', 's2'].sort());
  });
});
