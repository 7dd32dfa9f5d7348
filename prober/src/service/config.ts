/**
 * The `kvcanary serve` config file: YAML in, a validated and typed ServiceConfig out.
 *
 * Validation happens once, here, at the boundary; everything downstream trusts the types. Every problem is
 * collected (not just the first) and names the field path, what was expected and what was found. Values
 * that may be secrets (api_key_env, header values, URLs with credentials) are never echoed back.
 *
 * Reference (every key optional unless marked required; defaults shown):
 *
 *   listen: 127.0.0.1:9464          # HOST:PORT of /metrics, /healthz, the status page and /api; port 0 picks one
 *   store:
 *     path: ./kvcanary.sqlite       # evidence database, relative to the config file; created with mode 0600
 *     retention: 7d                 # requests and markers older than this are pruned; runs and findings are kept
 *   log:
 *     level: info                   # fatal | error | warn | info | debug | trace | silent
 *   schedule:                       # default for every target
 *     interval: 5m                  # time between the starts of two probe cycles of one target
 *     timeout: 2m                   # a cycle still running after this is aborted and recorded inconclusive; < interval
 *     jitter: 30s                   # random extra delay in [0, jitter) before each cycle (and the first); < interval
 *     scenarios:                    # cost tiers: a scenario given an interval (>= interval) runs once per it, the
 *       overlimit-rejection: 15m    # others every cycle. Default: DEFAULT_SCENARIO_INTERVALS (scenario-schedule.ts);
 *       overlimit-handoff: 1h       # a key given here overrides its default (a target's, the top level's).
 *       prefix-churn: every_cycle   # `every_cycle` drops one scenario's tier; `scenarios: every_cycle` drops them all
 *   budget:
 *     tokens_per_hour: auto         # per target, over a sliding hour (auto: from the tiers and the endpoint's sizes)
 *   concurrency:
 *     global: 4                     # scenario runs in flight across all targets
 *     per_target: 2                 # scenario runs of one cycle in flight at once against one target
 *   scenarios: [...]                # default scenario list for every target (default: all known scenarios)
 *   targets:                        # required, at least one
 *     - name: prod-glm              # required; [a-zA-Z0-9_.-]{1,64}, unique; the `target` label value
 *       base_url: https://host:8000 # required; http(s) server root, with or without /v1; no user:password@
 *       model: glm-5.3              # default: discovered from /v1/models
 *       api_key_env: PROD_KEY       # NAME of an environment variable holding the key (must be set), never the key
 *       headers: { X-Org: abc }     # extra request headers; values of auth-looking headers are treated as secrets;
 *                                   # Authorization is refused here (use api_key_env)
 *       tenants:                    # optional identities for tenant-isolation scenarios
 *         a: { api_key_env: KEY_A }
 *         b: { api_key_env: KEY_B, cache_salt: s2 }
 *       schedule: { interval: 10m } # per-target overrides, merged key by key over the defaults above
 *       budget: { tokens_per_hour: 500000 }
 *       scenarios: [capacity-audit]
 *       probe: { planter_tokens: 8192 } # per-target probe tuning, merged key by key over the top-level `probe`
 *   probe:                          # probe tuning (every key optional; defaults suit the endpoint's advertised sizes)
 *     planter_tokens: 4096          # prompt tokens per planter
 *     plant_tokens: 1048576         # planted tokens per overlimit-handoff cycle / churned per prefix-churn round
 *     abort_rounds: 29              # abort-race race windows per cycle (a pass needs 29)
 *     abort_ballast: true           # abort-race fills the exposed pool with ballast so freed pages are reused at once
 *     ballast_hold: prompt          # both ballasts: prompt = half prompt, half generation; generation = a short prompt, a long generation
 *     reader_max_tokens: 48         # generated tokens asked of readers and planters
 *     sweep: [0.5, 0.75, 0.95]      # prompt sizes (fractions of the context limit) when the pool is hidden
 *     chat: false                   # use /v1/chat/completions instead of /v1/completions
 *     prefix_tokens: 512            # prefix-isolation, prefix-collision, prefix-churn: tokens per shared prefix
 *     timing_pairs: 12              # prefix-isolation timing pairs per cycle (24 when cached tokens are not reported)
 *     timing_alpha: 0.001           # prefix-isolation: false-alarm rate of the timing test, per cycle
 *     timing_min_effect: 0.2        # prefix-isolation: smallest median TTFT saving that counts
 *     interleave_waves: [2, 4, 8]   # concurrent-interleave: requests in flight together, one wave each
 *     interleave_ballast: true      # concurrent-interleave holds the exposed pool with ballast so freed pages are reused at once
 *     churn_rounds: 2               # prefix-churn rounds per cycle
 *
 *   allowed_hosts: [canary.internal] # Host names the status server also answers under (besides its listen
 *                                   # address and localhost); any other Host gets 421 (DNS rebinding)
 *   shutdown_grace: 10s             # SIGTERM: in-flight probes get this long, then are aborted and recorded inconclusive
 *   (per target) deadline: 5m       # the cycle ends inconclusive with what it had after this (at most schedule.timeout)
 *
 * Durations: a number and a unit (ms, s, m, h, d), optionally chained: 500ms, 30s, 5m, 1h30m, 7d. Schedule
 * durations are at most 7d (interval at least 1s; timeout at most 24h, the client's request limit); retention
 * at least 1m. A config file is at most 1 MiB and names at most 1000 targets.
 */
import { open } from 'node:fs/promises';
import path from 'node:path';
import { parseDocument } from 'yaml';
import type { ProbeTuning } from '../probe/scenarios/context.js';
import type { ProbeTarget, ProbeTenant } from '../probe/probe-target.js';
import { DEFAULT_SHUTDOWN_GRACE_MS, MAX_CONFIG_BYTES, MAX_REQUEST_TIMEOUT_MS, MAX_RUN_DEADLINE_MS, MAX_SHUTDOWN_GRACE_MS, MAX_TARGETS } from '../bounds.js';
import { describeValue, shownKey, shownPath, shownString } from '../shown-value.js';
import { targetSecrets } from '../probe/redactor.js';
import { parseDiscover, type DiscoverSpec } from './discovery/spec.js';
import { DEFAULT_SCENARIO_INTERVALS, EVERY_CYCLE } from './scenario-schedule.js';
import { parseSilence, type Silence } from './silences.js';
import { parseExternalUrl } from './external-url.js';
import type { KeyFiles } from './key-files.js';
import { accessSync, constants as fsConstants, statSync } from 'node:fs';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
export const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

export interface ScheduleConfig {
  intervalMs: number;
  timeoutMs: number;
  jitterMs: number;
  /**
   * The effective `schedule.scenarios`: the default tiers overridden by the config, key by key (scenario-schedule.ts).
   * Absent when every scenario runs every cycle.
   */
  scenarioIntervalsMs?: Record<string, number>;
}

export interface BudgetConfig {
  /**
   * Tokens sent per sliding hour. With `derived` (the default, `tokens_per_hour: auto`) this is a placeholder
   * (unlimited) until the endpoint's advertised sizes are known; serve then sets the target's limit from its
   * tiers and those sizes (scenario-cost.ts derivedBudget).
   */
  tokensPerHour: number;
  derived?: boolean;
}

/** `budget.tokens_per_hour: auto` (the default): sized by serve from the tiers and the endpoint's advertised sizes. */
/** Until the sizes are known: no limit in practice, yet small enough that shares of it stay exact integers. */
export const UNSIZED_TOKENS_PER_HOUR = 1_000_000_000_000;
export const DERIVED_BUDGET: Readonly<BudgetConfig> = { tokensPerHour: UNSIZED_TOKENS_PER_HOUR, derived: true };

/** A tenant as the config gives it: the probe's ProbeTenant (probe/probe-target.ts). */
export type TenantConfig = ProbeTenant;

/**
 * A target as the config gives it: what the probe needs (ProbeTarget: name, base URL, model, keys, headers,
 * tenants, tuning, deadline) and what only the schedule uses.
 */
export interface TargetConfig extends ProbeTarget {
  /** Low-cardinality label value, unique within the config. */
  name: string;
  schedule: ScheduleConfig;
  budget: BudgetConfig;
  scenarios: string[];
}

export interface ServiceConfig {
  listen: { host: string; port: number };
  store: { path: string; retentionMs: number };
  log: { level: LogLevel };
  schedule: ScheduleConfig;
  budget: BudgetConfig;
  concurrency: { global: number; perTarget: number };
  scenarios: string[];
  targets: TargetConfig[];
  /** `allowed_hosts:` extra Host names the status server answers under (besides its listen address and localhost). */
  allowedHosts?: string[];
  /** `shutdown_grace:` SIGTERM waits this long for in-flight probes, then aborts them. @default 10s */
  shutdownGraceMs?: number;
  /** Target entries with `discover:` instead of `base_url` (discovery/): each address found becomes a target. */
  discovery?: DiscoveryEntry[];
  /** `silences:`: acknowledged findings (silences.ts); `kvcanary ack` adds more in the store. */
  silences?: Silence[];
  /** `external_url:` the status page as on-call reaches it, `{shard}` for the shard index (external-url.ts). */
  externalUrl?: string;
}

/** A `discover:` entry: `template` (baseUrl '') is what every discovered target of it inherits. */
export interface DiscoveryEntry {
  spec: DiscoverSpec;
  template: TargetConfig;
}

export interface ConfigIssue {
  /** Field path, e.g. `targets[1].schedule.timeout` (empty for whole-file problems). */
  path: string;
  message: string;
}

export type ConfigErrorCode = 'KVC_CONFIG_INVALID' | 'KVC_CONFIG_SYNTAX' | 'KVC_CONFIG_UNREADABLE';

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly code: ConfigErrorCode;
  readonly issues: ConfigIssue[];
  /** The file the config came from, when loaded from one. */
  readonly file: string | undefined;

  constructor(code: ConfigErrorCode, issues: ConfigIssue[], opts: { file?: string; cause?: unknown } = {}) {
    const where = opts.file === undefined ? 'config' : opts.file;
    const lines = issues.map((i) => `  ${i.path === '' ? '(file)' : i.path}: ${i.message}`);
    super(`${where}: ${issues.length} problem${issues.length === 1 ? '' : 's'}\n${lines.join('\n')}`,
      opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
    this.issues = issues;
    this.file = opts.file;
  }
}

export interface ParseConfigOptions {
  /** Environment used to check that api_key_env variables are set. @default process.env */
  env?: Record<string, string | undefined>;
  /** Check that every api_key_env variable is set and every api_key_file readable (serve). check-config, report, ack
   *  and run's --config (silences only) need them only named. @default true */
  requireSecrets?: boolean;
  /** Scenario names the prober knows; anything else is rejected. */
  knownScenarios: readonly string[];
  /** Scenarios run when the config names none. @default knownScenarios */
  defaultScenarios?: readonly string[];
  /** Cost tiers where the config gives none; scenarios not in knownScenarios are ignored. @default DEFAULT_SCENARIO_INTERVALS */
  defaultScenarioIntervals?: Readonly<Record<string, string>>;
  /** Relative store paths resolve against this. @default process.cwd() (loadConfig: the file's directory) */
  baseDir?: string;
}

export const DEFAULTS = {
  listen: '127.0.0.1:9464',
  storePath: './kvcanary.sqlite',
  retention: '7d',
  logLevel: 'info' as LogLevel,
  interval: '5m',
  timeout: '2m',
  jitter: '30s',
  concurrencyGlobal: 4,
  concurrencyPerTarget: 2,
} as const;

const NAME_RE = /^[a-zA-Z0-9_.-]{1,64}$/;
const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const HEADER_NAME_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Set by the client itself from the body or api_key_env; a config value would conflict or hold a key. */
const RESERVED_HEADERS = new Set(['authorization', 'host', 'content-length', 'content-type', 'transfer-encoding', 'connection', 'accept-encoding']);

/** Timers cannot wait longer than 2^31-1 ms (about 24.8 days): Node would fire them at once instead. */
const MAX_DURATION_MS = 7 * 86_400_000;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "1h30m" → 5_400_000. Returns undefined for anything that is not a positive-or-zero duration. */
export function parseDuration(text: string): number | undefined {
  const s = text.trim();
  if (!/^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+$/.test(s)) return undefined;
  let total = 0;
  for (const m of s.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)) total += Number(m[1]) * UNIT_MS[m[2]!]!;
  return Number.isFinite(total) ? Math.round(total) : undefined;
}

/** 90_000 → "1m30s". For messages and the status page. */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  if (ms < 1000) return `${ms}ms`;
  let rest = Math.round(ms);
  let out = '';
  for (const [unit, size] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000], ['ms', 1]] as const) {
    const n = Math.floor(rest / size);
    if (n > 0) { out += `${n}${unit}`; rest -= n * size; }
  }
  return out;
}

export async function loadConfig(file: string, opts: ParseConfigOptions): Promise<ServiceConfig> {
  let text: string;
  try {
    text = await readConfigText(file);
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    const reason = code === 'ENOENT' ? 'file not found' : `cannot read (${code ?? 'error'})`;
    throw new ConfigError('KVC_CONFIG_UNREADABLE', [{ path: '', message: reason }], { file, cause: err });
  }
  try {
    return parseConfig(text, { ...opts, baseDir: opts.baseDir ?? path.dirname(path.resolve(file)) });
  } catch (err) {
    if (err instanceof ConfigError) throw new ConfigError(err.code, err.issues, { file });
    throw err;
  }
}

/**
 * The config file's text: a regular file only (a FIFO would hang the read, /dev/zero never end it), opened
 * without blocking, and read up to the size cap whatever its size said (a file may grow while it is read).
 */
async function readConfigText(file: string): Promise<string> {
  const fh = await open(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  try {
    const st = await fh.stat();
    if (!st.isFile()) {
      throw new ConfigError('KVC_CONFIG_UNREADABLE', [{ path: '', message: `not a regular file (${st.isFIFO() ? 'a FIFO' : st.isDirectory() ? 'a folder' : st.isCharacterDevice() || st.isBlockDevice() ? 'a device' : 'a special file'}): give the config file itself` }], { file });
    }
    // A huge file is refused before it is parsed (parsing 10 MB of YAML takes seconds and a gigabyte).
    const tooBig = (size: number): ConfigError => new ConfigError('KVC_CONFIG_INVALID', [{ path: '', message: `the config is ${size} bytes: at most ${MAX_CONFIG_BYTES} are accepted` }], { file });
    if (st.size > MAX_CONFIG_BYTES) throw tooBig(st.size);
    const buf = Buffer.alloc(MAX_CONFIG_BYTES + 1);
    let n = 0;
    while (n < buf.length) {
      const { bytesRead } = await fh.read(buf, n, buf.length - n, n);
      if (bytesRead === 0) break;
      n += bytesRead;
    }
    if (n > MAX_CONFIG_BYTES) throw tooBig(n);
    return buf.subarray(0, n).toString('utf8');
  } finally {
    await fh.close();
  }
}

export function parseConfig(text: string, opts: ParseConfigOptions): ServiceConfig {
  if (text.length > MAX_CONFIG_BYTES) {
    throw new ConfigError('KVC_CONFIG_INVALID', [{ path: '', message: `the config is ${text.length} bytes: at most ${MAX_CONFIG_BYTES} are accepted` }]);
  }
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError('KVC_CONFIG_SYNTAX', doc.errors.map((e) => ({
      path: '',
      message: `YAML ${e.code}: ${e.message.split('\n')[0] ?? ''}`,
    })));
  }
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    // yaml throws a ReferenceError on an alias bomb (too many alias expansions) or an unresolved alias.
    throw new ConfigError('KVC_CONFIG_SYNTAX', [{ path: '', message: `YAML aliases: ${(err as Error).message.split('\n')[0] ?? ''}` }], { cause: err });
  }
  const v = new Validator(opts);
  const config = v.root(raw);
  if (v.issues.length > 0 || config === undefined) {
    throw new ConfigError('KVC_CONFIG_INVALID', v.issues.length > 0 ? v.issues : [{ path: '', message: 'invalid config' }]);
  }
  return config;
}

/**
 * Every credential value the config refers to (API keys from the environment, auth-looking header values):
 * the logger and the store scrub these from anything they write.
 */
export function configSecrets(config: ServiceConfig, env: Record<string, string | undefined> = process.env, keyFiles?: KeyFiles): string[] {
  // Every header value not on the non-secret allow-list counts (redactor.ts), URL credentials, and keys read
  // from api_key_file; discovered targets inherit their entry's keys and headers.
  const templates = [...config.targets, ...(config.discovery ?? []).map((d) => d.template)];
  const fromFiles = keyFiles === undefined ? [] : templates.flatMap((t) => [t.apiKeyFile, ...t.tenants.map((x) => x.apiKeyFile)])
    .flatMap((f) => (f === undefined ? [] : [keyFiles.read(f) ?? '']));
  return [...new Set([...templates.flatMap((t) => targetSecrets(t, env)), ...fromFiles])].filter((v) => v !== '');
}

// ---------------------------------------------------------------------------------------------------------

type Obj = Record<string, unknown>;

/** A value for a message: short harmless strings are shown, anything that could be a key is described. */
function describe(value: unknown): string {
  return describeValue(value);
}

function levenshtein(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0]!;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = prev[j]!;
      prev[j] = Math.min(prev[j]! + 1, prev[j - 1]! + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = tmp;
    }
  }
  return prev[b.length]!;
}

function didYouMean(key: string, allowed: readonly string[]): string {
  const norm = (s: string): string => s.toLowerCase().replace(/-/g, '_');
  let best: string | undefined;
  let bestD = Infinity;
  for (const a of allowed) {
    const d = levenshtein(norm(key), norm(a));
    if (d < bestD) { bestD = d; best = a; }
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(key.length / 3)) ? ` (did you mean \`${best}\`?)` : '';
}

// A field path names the key as the file spells it, unless that key is no plain name (a header or tenant name
// holding ESC, a line break, or a pasted key): then it is described (shown-value.ts), never printed raw.
const join = (base: string, key: string | number): string =>
  typeof key === 'number' ? `${base}[${key}]` : base === '' ? shownKey(key) : `${base}.${shownKey(key)}`;

interface TargetDefaults {
  schedule?: ScheduleConfig;
  budget?: BudgetConfig;
  scenarios?: string[];
  tuning?: ProbeTuning;
}

type TuningKind = { int: number } | { oneOf: readonly string[] } | 'bool' | 'fraction' | 'fractions' | 'ints';

/** The `probe:` keys, the ProbeTuning field each sets, and what it takes. */
const TUNING_KEYS: Readonly<Record<string, { field: keyof ProbeTuning; kind: TuningKind }>> = {
  planter_tokens: { field: 'planterTokens', kind: { int: 1 } },
  plant_tokens: { field: 'plantTokens', kind: { int: 1 } },
  abort_rounds: { field: 'abortRounds', kind: { int: 1 } },
  abort_ballast: { field: 'abortBallast', kind: 'bool' },
  ballast_hold: { field: 'ballastHold', kind: { oneOf: ['prompt', 'generation'] } },
  reader_max_tokens: { field: 'readerMaxTokens', kind: { int: 1 } },
  sweep: { field: 'sweep', kind: 'fractions' },
  chat: { field: 'chat', kind: 'bool' },
  prefix_tokens: { field: 'prefixTokens', kind: { int: 16 } },
  timing_pairs: { field: 'timingPairs', kind: { int: 1 } },
  timing_alpha: { field: 'timingAlpha', kind: 'fraction' },
  timing_min_effect: { field: 'timingMinEffect', kind: 'fraction' },
  interleave_waves: { field: 'interleaveWaves', kind: 'ints' },
  interleave_ballast: { field: 'interleaveBallast', kind: 'bool' },
  churn_rounds: { field: 'churnRounds', kind: { int: 1 } },
};

class Validator {
  readonly issues: ConfigIssue[] = [];
  private readonly env: Record<string, string | undefined>;
  private readonly known: ReadonlySet<string>;

  constructor(private readonly opts: ParseConfigOptions) {
    this.env = opts.env ?? process.env;
    this.known = new Set(opts.knownScenarios);
  }

  private fail(p: string, message: string): undefined {
    this.issues.push({ path: p, message });
    return undefined;
  }

  private object(value: unknown, p: string, allowed: readonly string[]): Obj | undefined {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      return this.fail(p, `expected a mapping with keys ${allowed.join(', ')}, got ${describe(value)}`);
    }
    const obj = value as Obj;
    for (const key of Object.keys(obj)) {
      if (!allowed.includes(key)) this.fail(join(p, key), `unknown key${didYouMean(key, allowed)}; allowed here: ${allowed.join(', ')}`);
    }
    return obj;
  }

  private string(value: unknown, p: string, what = 'a string'): string | undefined {
    if (typeof value !== 'string' || value === '') return this.fail(p, `expected ${what}, got ${describe(value)}`);
    return value;
  }

  private int(value: unknown, p: string, min: number): number | undefined {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
      return this.fail(p, `expected an integer >= ${min}, got ${describe(value)}`);
    }
    return value;
  }

  private duration(value: unknown, p: string, min: number, max = MAX_DURATION_MS): number | undefined {
    const ms = typeof value === 'string' ? parseDuration(value) : undefined;
    if (ms === undefined) return this.fail(p, `expected a duration like 500ms, 30s, 5m, 1h or 7d, got ${describe(value)}`);
    if (ms < min) return this.fail(p, `expected a duration of at least ${formatDuration(min)}, got ${describe(value)}`);
    if (ms > max) return this.fail(p, `expected a duration of at most ${formatDuration(max)}, got ${describe(value)}`);
    return ms;
  }

  private envName(value: unknown, p: string): string | undefined {
    // Never echo the value: a user who pastes the key itself here must not see it printed back into a log.
    if (typeof value !== 'string' || !ENV_NAME_RE.test(value)) {
      return this.fail(p, `expected the NAME of an environment variable (letters, digits, _), got ${typeof value === 'string' ? 'a value that is not a variable name (not shown: it may be a key)' : describe(value)}`);
    }
    const set = this.env[value];
    if (this.opts.requireSecrets !== false && (set === undefined || set === '')) return this.fail(p, `environment variable ${value} is not set`);
    return value;
  }

  /**
   * A key file: its content is never echoed, nor its path when the path could be a key. serve and run need it
   * readable now, a regular file, not writable by group or others (whoever can write it chooses the key sent);
   * check-config, report and ack (requireSecrets: false) only need it named, as with api_key_env.
   */
  private keyFile(value: unknown, p: string): string | undefined {
    if (typeof value !== 'string' || value === '') return this.fail(p, `expected the path of a file holding the API key, got ${describe(value)}`);
    const file = path.resolve(this.opts.baseDir ?? process.cwd(), value);
    if (/[\u0000-\u001f\u007f-\u009f]/.test(value)) return this.fail(p, 'expected a file path without control characters');
    if (this.opts.requireSecrets === false) return file;
    const shown = shownPath(file);
    try {
      accessSync(file, fsConstants.R_OK);
      const st = statSync(file);
      if (!st.isFile()) return this.fail(p, `${shown} is not a regular file`);
      if (st.size === 0) return this.fail(p, `${shown} is empty`);
      if ((st.mode & 0o022) !== 0) return this.fail(p, `${shown} is writable by ${(st.mode & 0o002) !== 0 ? 'anyone' : 'its group'} (mode ${(st.mode & 0o777).toString(8)}): chmod go-w it (0600 or 0640 as a Secret mounts it)`);
    } catch (err) {
      return this.fail(p, `cannot read ${shown} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    return file;
  }

  private scenarios(value: unknown, p: string): string[] | undefined {
    if (!Array.isArray(value) || value.length === 0) return this.fail(p, `expected a non-empty list of scenario names, got ${describe(value)}`);
    const out: string[] = [];
    const seen = new Set<string>();
    value.forEach((s, i) => {
      const ip = join(p, i);
      if (typeof s !== 'string') { this.fail(ip, `expected a scenario name, got ${describe(s)}`); return; }
      if (!this.known.has(s)) {
        this.fail(ip, `unknown scenario ${shownString(s)}${didYouMean(s, [...this.known])}; known: ${[...this.known].join(', ')}`);
        return;
      }
      if (seen.has(s)) { this.fail(ip, `scenario ${JSON.stringify(s)} listed twice`); return; }
      seen.add(s);
      out.push(s);
    });
    return out;
  }

  private listen(value: unknown, p: string): { host: string; port: number } | undefined {
    const s = this.string(value, p, 'HOST:PORT such as 127.0.0.1:9464');
    if (s === undefined) return undefined;
    const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s[\]]+)):(\d{1,5})$/.exec(s);
    const port = m === null ? NaN : Number(m[3]);
    if (m === null || port > 65535) return this.fail(p, `expected HOST:PORT such as 127.0.0.1:9464 or [::1]:0 (port 0-65535), got ${describe(value)}`);
    return { host: m[1] ?? m[2]!, port };
  }

  private schedule(value: unknown, p: string, base: ScheduleConfig | undefined): ScheduleConfig | undefined {
    const o = this.object(value, p, ['interval', 'timeout', 'jitter', 'scenarios']);
    if (o === undefined) return undefined;
    const field = (k: 'interval' | 'timeout' | 'jitter', min: number, dflt: string): number | undefined => {
      if (o[k] === undefined) {
        const inherited = base?.[`${k}Ms`];
        return inherited ?? parseDuration(dflt);
      }
      // The client refuses a request deadline above 24h: a longer cycle timeout would validate, then fail every cycle.
      return this.duration(o[k], join(p, k), min, k === 'timeout' ? MAX_REQUEST_TIMEOUT_MS : undefined);
    };
    const intervalMs = field('interval', 1000, DEFAULTS.interval);
    const timeoutMs = field('timeout', 1, DEFAULTS.timeout);
    const jitterMs = field('jitter', 0, DEFAULTS.jitter);
    if (intervalMs === undefined || timeoutMs === undefined || jitterMs === undefined) return undefined;
    const shown = (k: 'timeout' | 'jitter' | 'interval', ms: number): string =>
      `${formatDuration(ms)}${o[k] === undefined ? ` (${base === undefined ? 'default' : 'inherited'})` : ''}`;
    const before = this.issues.length;
    if (timeoutMs >= intervalMs) {
      this.fail(join(p, 'timeout'), `expected a timeout below the interval (${shown('interval', intervalMs)}), got ${shown('timeout', timeoutMs)}`);
    }
    if (jitterMs >= intervalMs) {
      this.fail(join(p, 'jitter'), `expected a jitter below the interval (${shown('interval', intervalMs)}), got ${shown('jitter', jitterMs)}`);
    }
    const out: ScheduleConfig = { intervalMs, timeoutMs, jitterMs };
    // The top level starts from the default tiers, a target from the top level's: a map given here overrides
    // key by key, so naming one scenario does not silently drop the others' tiers.
    const perScenario = base === undefined ? this.defaultTiers() : { ...base.scenarioIntervalsMs };
    if (o.scenarios === EVERY_CYCLE) {
      for (const name of Object.keys(perScenario)) delete perScenario[name];
    } else if (o.scenarios !== undefined) {
      const sp = join(p, 'scenarios');
      if (o.scenarios === null || typeof o.scenarios !== 'object' || Array.isArray(o.scenarios)) {
        this.fail(sp, `expected a mapping of scenario name to interval or ${EVERY_CYCLE}, such as {overlimit-handoff: 1h}, or ${EVERY_CYCLE} for every scenario every cycle, got ${describe(o.scenarios)}`);
      } else {
        for (const [name, d] of Object.entries(o.scenarios as Obj)) {
          if (!this.known.has(name)) { this.fail(join(sp, name), `unknown scenario${didYouMean(name, [...this.known])}; known: ${[...this.known].join(', ')}`); continue; }
          if (d === EVERY_CYCLE) { delete perScenario[name]; continue; }
          const ms = typeof d === 'string' ? parseDuration(d) : undefined;
          if (ms === undefined) { this.fail(join(sp, name), `expected a duration like 15m, 1h or 6h, or ${EVERY_CYCLE}, got ${describe(d)}`); continue; }
          const checked = this.duration(d, join(sp, name), intervalMs);
          if (checked !== undefined) perScenario[name] = checked;
        }
      }
    }
    if (Object.keys(perScenario).length > 0) out.scenarioIntervalsMs = perScenario;
    return this.issues.length === before ? out : undefined;
  }

  /** The default tiers (ParseConfigOptions.defaultScenarioIntervals) of the known scenarios, in ms. */
  private defaultTiers(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [name, d] of Object.entries(this.opts.defaultScenarioIntervals ?? DEFAULT_SCENARIO_INTERVALS)) {
      const ms = parseDuration(d);
      if (ms === undefined) throw new Error(`default interval of ${name} is not a duration: ${d}`);
      if (this.known.has(name)) out[name] = ms;
    }
    return out;
  }

  private budget(value: unknown, p: string): BudgetConfig | undefined {
    const o = this.object(value, p, ['tokens_per_hour']);
    if (o === undefined) return undefined;
    if (o.tokens_per_hour === undefined) return this.fail(join(p, 'tokens_per_hour'), 'required');
    if (o.tokens_per_hour === 'auto') return { ...DERIVED_BUDGET };
    if (typeof o.tokens_per_hour !== 'number') return this.fail(join(p, 'tokens_per_hour'), `expected auto or an integer >= 1, got ${describe(o.tokens_per_hour)}`);
    const n = this.int(o.tokens_per_hour, join(p, 'tokens_per_hour'), 1);
    return n === undefined ? undefined : { tokensPerHour: n };
  }

  /** A `probe:` block: its keys over `base` (the top-level block, for a target). */
  private tuning(value: unknown, p: string, base: ProbeTuning | undefined): ProbeTuning | undefined {
    const o = this.object(value, p, Object.keys(TUNING_KEYS));
    if (o === undefined) return undefined;
    const out: Record<string, unknown> = { ...base };
    const before = this.issues.length;
    for (const [key, raw] of Object.entries(o)) {
      const spec = TUNING_KEYS[key];
      if (spec === undefined) continue; // reported by object()
      const kp = join(p, key);
      const kind = spec.kind;
      const fraction = (x: unknown): x is number => typeof x === 'number' && x > 0 && x < 1;
      if (typeof kind === 'object' && 'oneOf' in kind) {
        if (typeof raw === 'string' && kind.oneOf.includes(raw)) out[spec.field] = raw;
        else this.fail(kp, `expected one of ${kind.oneOf.join(', ')}, got ${describe(raw)}`);
      } else if (typeof kind === 'object') {
        const n = this.int(raw, kp, kind.int);
        if (n !== undefined) out[spec.field] = n;
      } else if (kind === 'bool') {
        if (typeof raw === 'boolean') out[spec.field] = raw;
        else this.fail(kp, `expected true or false, got ${describe(raw)}`);
      } else if (kind === 'fraction') {
        if (fraction(raw)) out[spec.field] = raw;
        else this.fail(kp, `expected a number strictly between 0 and 1, got ${describe(raw)}`);
      } else if (kind === 'fractions') {
        if (Array.isArray(raw) && raw.length > 0 && raw.every((x) => fraction(x) || x === 1)) out[spec.field] = [...(raw as number[])];
        else this.fail(kp, `expected a non-empty list of fractions of the context limit in (0, 1], got ${describe(raw)}`);
      } else if (Array.isArray(raw) && raw.length > 0 && raw.every((x) => Number.isSafeInteger(x) && (x as number) >= 1)) {
        out[spec.field] = [...(raw as number[])];
      } else {
        this.fail(kp, `expected a non-empty list of integers >= 1, got ${describe(raw)}`);
      }
    }
    return this.issues.length === before ? (out as ProbeTuning) : undefined;
  }

  private headers(value: unknown, p: string): Record<string, string> | undefined {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      return this.fail(p, `expected a mapping of header name to value, got ${describe(value)}`);
    }
    const out: Record<string, string> = {};
    const seen = new Set<string>();
    for (const [k, v] of Object.entries(value as Obj)) {
      const hp = join(p, k);
      const lower = k.toLowerCase();
      if (!HEADER_NAME_RE.test(k) || k.length > 256) { this.fail(hp, 'expected a valid HTTP header name (a token of at most 256 characters)'); continue; }
      if (RESERVED_HEADERS.has(lower)) {
        this.fail(hp, lower === 'authorization'
          ? 'Authorization is set from api_key_env: put the key in an environment variable and name it there'
          : `${k} is set by the prober itself`);
        continue;
      }
      if (seen.has(lower)) { this.fail(hp, 'header given twice (names are case-insensitive)'); continue; }
      seen.add(lower);
      // Header values may be credentials: report the type, never the value.
      if (typeof v !== 'string' && typeof v !== 'number') { this.fail(hp, `expected a string value, got ${Array.isArray(v) ? 'a list' : v === null ? 'nothing' : typeof v}`); continue; }
      const s = String(v);
      if (/[\r\n\0]/.test(s)) { this.fail(hp, 'header value must not contain line breaks or NUL'); continue; }
      out[k] = s;
    }
    return out;
  }

  private tenants(value: unknown, p: string): TenantConfig[] | undefined {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      return this.fail(p, `expected a mapping of tenant name to { api_key_env, cache_salt }, got ${describe(value)}`);
    }
    const out: TenantConfig[] = [];
    for (const [name, spec] of Object.entries(value as Obj)) {
      const tp = join(p, name);
      if (!NAME_RE.test(name)) { this.fail(tp, 'tenant names must match [a-zA-Z0-9_.-]{1,64}'); continue; }
      const o = spec === null ? {} : this.object(spec, tp, ['api_key_env', 'api_key_file', 'cache_salt']);
      if (o === undefined) continue;
      const tenant: TenantConfig = { name };
      if (o.api_key_env !== undefined) {
        const e = this.envName(o.api_key_env, join(tp, 'api_key_env'));
        if (e !== undefined) tenant.apiKeyEnv = e;
      }
      if (o.api_key_file !== undefined) {
        if (o.api_key_env !== undefined) this.fail(join(tp, 'api_key_file'), 'give api_key_env or api_key_file, not both');
        const f = this.keyFile(o.api_key_file, join(tp, 'api_key_file'));
        if (f !== undefined) tenant.apiKeyFile = f;
      }
      if (o.cache_salt !== undefined) {
        const s = this.string(o.cache_salt, join(tp, 'cache_salt'));
        if (s !== undefined) tenant.cacheSalt = s;
      }
      out.push(tenant);
    }
    return out;
  }

  private baseUrl(value: unknown, p: string): string | undefined {
    if (typeof value !== 'string' || value === '') return this.fail(p, `expected an http(s) URL, got ${describe(value)}`);
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      return this.fail(p, `expected an http(s) URL such as https://host:8000, got ${describe(value)}`);
    }
    if (url.username !== '' || url.password !== '') {
      return this.fail(p, 'URL must not carry credentials (user:password@): put the key in an environment variable and name it in api_key_env');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return this.fail(p, `expected an http or https URL, got scheme ${url.protocol}`);
    if (url.search !== '' || url.hash !== '') return this.fail(p, 'expected a server root without ?query or #fragment');
    return value;
  }

  private target(value: unknown, p: string, defaults: TargetDefaults): (TargetConfig & { discover?: DiscoverSpec }) | undefined {
    const o = this.object(value, p, ['name', 'base_url', 'discover', 'model', 'api_key_env', 'api_key_file', 'headers', 'tenants', 'schedule', 'budget', 'scenarios', 'probe', 'deadline']);
    if (o === undefined) return undefined;
    let name: string | undefined;
    if (o.name === undefined) this.fail(join(p, 'name'), 'required');
    else if (typeof o.name !== 'string' || !NAME_RE.test(o.name)) this.fail(join(p, 'name'), `expected a name matching [a-zA-Z0-9_.-]{1,64}, got ${describe(o.name)}`);
    else name = o.name;
    let discover: DiscoverSpec | undefined;
    if (o.discover !== undefined) {
      const d = parseDiscover(o.discover, join(p, 'discover'), this.opts.baseDir ?? process.cwd(), parseDuration);
      this.issues.push(...d.issues);
      discover = d.spec;
      if (o.base_url !== undefined) this.fail(join(p, 'base_url'), 'give base_url or discover, not both');
    }
    const baseUrl = o.discover !== undefined ? (discover === undefined ? undefined : '')
      : o.base_url === undefined ? this.fail(join(p, 'base_url'), 'required') : this.baseUrl(o.base_url, join(p, 'base_url'));
    const model = o.model === undefined ? undefined : this.string(o.model, join(p, 'model'), 'a model id');
    const apiKeyEnv = o.api_key_env === undefined ? undefined : this.envName(o.api_key_env, join(p, 'api_key_env'));
    if (o.api_key_env !== undefined && o.api_key_file !== undefined) this.fail(join(p, 'api_key_file'), 'give api_key_env or api_key_file, not both');
    const apiKeyFile = o.api_key_file === undefined ? undefined : this.keyFile(o.api_key_file, join(p, 'api_key_file'));
    const headers = o.headers === undefined ? {} : this.headers(o.headers, join(p, 'headers'));
    const tenants = o.tenants === undefined ? [] : this.tenants(o.tenants, join(p, 'tenants'));
    const schedule = o.schedule === undefined ? defaults.schedule : this.schedule(o.schedule, join(p, 'schedule'), defaults.schedule);
    const budget = o.budget === undefined ? defaults.budget : this.budget(o.budget, join(p, 'budget'));
    const scenarios = o.scenarios === undefined ? defaults.scenarios : this.scenarios(o.scenarios, join(p, 'scenarios'));
    const tuning = o.probe === undefined ? defaults.tuning : this.tuning(o.probe, join(p, 'probe'), defaults.tuning);
    if (name === undefined || baseUrl === undefined || headers === undefined || tenants === undefined
      || schedule === undefined || budget === undefined || scenarios === undefined || (o.probe !== undefined && tuning === undefined)) return undefined;
    const t: TargetConfig & { discover?: DiscoverSpec } = { name, baseUrl, headers, tenants, schedule, budget, scenarios };
    if (discover !== undefined) t.discover = discover;
    if (tuning !== undefined && Object.keys(tuning).length > 0) t.tuning = tuning;
    if (model !== undefined) t.model = model;
    if (apiKeyEnv !== undefined) t.apiKeyEnv = apiKeyEnv;
    if (o.deadline !== undefined) {
      const d = this.duration(o.deadline, join(p, 'deadline'), 1000, MAX_RUN_DEADLINE_MS);
      if (d === undefined) return undefined;
      // Bounded by the cycle timeout: the scheduler ends the cycle then anyway.
      t.deadlineMs = Math.min(d, schedule.timeoutMs);
    }
    if (apiKeyFile !== undefined) t.apiKeyFile = apiKeyFile;
    return t;
  }

  root(raw: unknown): ServiceConfig | undefined {
    if (raw === null || raw === undefined) return this.fail('', 'the config is empty: expected a mapping with at least `targets`');
    const o = this.object(raw, '', ['listen', 'store', 'log', 'schedule', 'budget', 'concurrency', 'scenarios', 'probe', 'targets', 'allowed_hosts', 'shutdown_grace', 'silences', 'external_url']);
    if (o === undefined) return undefined;

    const listen = this.listen(o.listen ?? DEFAULTS.listen, 'listen');

    let store: ServiceConfig['store'] | undefined;
    const so = o.store === undefined ? {} : this.object(o.store, 'store', ['path', 'retention']);
    if (so !== undefined) {
      const p = so.path === undefined ? DEFAULTS.storePath : this.string(so.path, 'store.path', 'a file path');
      const retentionMs = this.duration(so.retention ?? DEFAULTS.retention, 'store.retention', 60_000, 3650 * 86_400_000);
      if (p !== undefined && retentionMs !== undefined) {
        store = { path: p === ':memory:' ? p : path.resolve(this.opts.baseDir ?? process.cwd(), p), retentionMs };
      }
    }

    let log: ServiceConfig['log'] | undefined;
    const lo = o.log === undefined ? {} : this.object(o.log, 'log', ['level']);
    if (lo !== undefined) {
      const level = lo.level ?? DEFAULTS.logLevel;
      if (typeof level === 'string' && (LOG_LEVELS as readonly string[]).includes(level)) log = { level: level as LogLevel };
      else this.fail('log.level', `expected one of ${LOG_LEVELS.join(', ')}, got ${describe(level)}`);
    }

    const schedule = this.schedule(o.schedule ?? {}, 'schedule', undefined);
    const budget = o.budget === undefined ? { ...DERIVED_BUDGET } : this.budget(o.budget, 'budget');

    let concurrency: ServiceConfig['concurrency'] | undefined;
    const co = o.concurrency === undefined ? {} : this.object(o.concurrency, 'concurrency', ['global', 'per_target']);
    if (co !== undefined) {
      const g = co.global === undefined ? DEFAULTS.concurrencyGlobal : this.int(co.global, 'concurrency.global', 1);
      const t = co.per_target === undefined ? DEFAULTS.concurrencyPerTarget : this.int(co.per_target, 'concurrency.per_target', 1);
      if (g !== undefined && t !== undefined) concurrency = { global: g, perTarget: t };
    }

    const scenarios = o.scenarios === undefined
      ? [...(this.opts.defaultScenarios ?? this.opts.knownScenarios)]
      : this.scenarios(o.scenarios, 'scenarios');

    const tuning = o.probe === undefined ? undefined : this.tuning(o.probe, 'probe', undefined);

    let targets: TargetConfig[] | undefined;
    let discovery: DiscoveryEntry[] | undefined;
    if (o.targets === undefined) this.fail('targets', 'required: a list of at least one target ({name, base_url, ...})');
    else if (!Array.isArray(o.targets) || o.targets.length === 0) this.fail('targets', `expected a non-empty list of targets, got ${describe(o.targets)}`);
    else if (o.targets.length > MAX_TARGETS) this.fail('targets', `expected at most ${MAX_TARGETS} targets, got ${o.targets.length}`);
    else {
      // Targets are validated even when a default above is broken, so one pass reports everything.
      const defaults: TargetDefaults = {};
      if (tuning !== undefined) defaults.tuning = tuning;
      if (schedule !== undefined) defaults.schedule = schedule;
      if (budget !== undefined) defaults.budget = budget;
      if (scenarios !== undefined) defaults.scenarios = scenarios;
      const list = o.targets.map((t, i) => this.target(t, `targets[${i}]`, defaults));
      const firstByName = new Map<string, number>();
      o.targets.forEach((t, i) => {
        const n = (t as Obj | null)?.name;
        if (typeof n !== 'string') return;
        const first = firstByName.get(n);
        if (first === undefined) firstByName.set(n, i);
        else this.fail(`targets[${i}].name`, `duplicate target name ${shownString(n)} (first used by targets[${first}])`);
      });
      if (list.every((t): t is TargetConfig & { discover?: DiscoverSpec } => t !== undefined)) {
        targets = [];
        discovery = [];
        for (const { discover, ...t } of list) {
          if (discover === undefined) targets.push(t);
          else discovery.push({ spec: discover, template: t });
        }
      }
    }

    if (listen === undefined || store === undefined || log === undefined || schedule === undefined || budget === undefined
      || concurrency === undefined || scenarios === undefined || targets === undefined || (o.probe !== undefined && tuning === undefined)) return undefined;
    const silences: Silence[] = [];
    if (o.silences !== undefined) {
      if (!Array.isArray(o.silences)) this.fail('silences', `expected a list of {target, kind, expires, reason}, got ${describe(o.silences)}`);
      else {
        o.silences.forEach((raw, i) => {
          const r = parseSilence(raw, `silences[${i}]`, { now: Date.now(), knownScenarios: [...this.known], id: `config[${i}]`, createdBy: 'config' });
          this.issues.push(...r.issues);
          if (r.silence !== undefined) silences.push(r.silence);
        });
      }
      if (this.issues.length > 0) return undefined;
    }
    const extra = this.serviceExtras(o);
    if (extra === undefined) return undefined;
    const config: ServiceConfig = { listen, store, log, schedule, budget, concurrency, scenarios, targets, ...extra };
    if (silences.length > 0) config.silences = silences;
    if (discovery !== undefined && discovery.length > 0) config.discovery = discovery;
    return config;
  }

  /** `allowed_hosts:`, `shutdown_grace:` and `external_url:`. */
  private serviceExtras(o: Obj): Pick<ServiceConfig, 'allowedHosts' | 'shutdownGraceMs' | 'externalUrl'> | undefined {
    const before = this.issues.length;
    const out: Pick<ServiceConfig, 'allowedHosts' | 'shutdownGraceMs' | 'externalUrl'> = {};
    if (o.external_url !== undefined) {
      const r = parseExternalUrl(o.external_url);
      if ('error' in r) this.fail('external_url', r.error);
      else out.externalUrl = r.url;
    }
    if (o.allowed_hosts !== undefined) {
      const hosts = o.allowed_hosts;
      if (!Array.isArray(hosts) || hosts.length > 64 || !hosts.every((h) => typeof h === 'string' && /^[A-Za-z0-9.-]{1,253}$/.test(h))) {
        this.fail('allowed_hosts', 'expected a list of at most 64 host names (letters, digits, dots, dashes; no port)');
      } else {
        out.allowedHosts = hosts.map((h: string) => h.toLowerCase());
      }
    }
    const grace = this.duration(o.shutdown_grace ?? `${DEFAULT_SHUTDOWN_GRACE_MS}ms`, 'shutdown_grace', 0, MAX_SHUTDOWN_GRACE_MS);
    if (grace !== undefined) out.shutdownGraceMs = grace;
    return this.issues.length === before ? out : undefined;
  }
}
