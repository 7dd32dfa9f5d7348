/**
 * `kvcanary run`: probe one endpoint now. Progress and a summary table go to stderr; with --json, stdout
 * holds exactly one JSON document. Exit 0 pass, 1 at least one finding (not acknowledged by a silence),
 * 2 inconclusive, 64 bad usage.
 */
import { jsonText } from '../json-text.js';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { formatDuration, loadConfig, type ServiceConfig, type TargetConfig, type TenantConfig } from '../service/config.js';
import { SEVERITIES, type Severity } from '../probe/findings.js';
import { runProbe } from '../probe/probe.js';
import { createScanner } from '../probe/scanner.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import { parseBaseUrl } from '../probe/target/base-url.js';
import { markerKeyPath, runStorePath } from '../installation/home.js';
import { InstallationError } from '../installation/installation-error.js';
import { installationKey } from '../installation/marker-key.js';
import { createInstallationRegistry, persistPlantings, recentMarkersFrom } from '../installation/registry.js';
import { applySilences } from '../service/silences.js';
import { openStore } from '../service/store.js';
import { configTargetAt, endpointName, runSilences } from './run-silences.js';
import { adoptConfigTarget } from './run-config-target.js';
import { checkOutputFile, writeOutputFile, type OutputFileRules } from './output-file.js';
import { exitCodeFor, quietLine, summaryTable, toJson, toJunit } from './run-output.js';
import { RunCut } from '../probe/run-cut.js';
import { targetSecrets } from '../probe/redactor.js';
import { forTerminal, oneLine } from '../terminal-text.js';
import { UsageError, durationFlag, headerFlags, parseArgsMessage, positiveIntFlag } from './usage.js';
import { DEFAULT_RUN_DEADLINE_MS, MAX_REQUEST_TIMEOUT_MS, MAX_RUN_DEADLINE_MS } from '../bounds.js';
import { shownPath, shownString } from '../shown-value.js';

export const RUN_USAGE = `usage: kvcanary run --target URL [options]

  --target URL            server root, with or without /v1 (required)
  --model ID              model to probe (default: the first in /v1/models)
  --scenario NAME         repeatable; default all: ${SCENARIO_NAMES.join(', ')}
  --api-key-env VAR       read the API key from environment variable VAR (never logged)
  --tenant NAME=VAR       repeatable: probe as several tenants, each with the key in VAR
  --tenant-salt NAME=SALT repeatable: tenant NAME sends cache_salt SALT (vLLM/SGLang key their prefix cache
                          by it). A NAME without --tenant is a tenant with the run's own key, apart from the
                          others only by its salt: a boundary you declare, so sharing across it is a finding
  --header 'K: V'         repeatable extra request header; every value is treated as a secret (kept out of all
                          output) unless the name is a known non-secret one (Accept, User-Agent, X-Request-Id, ...)
  --timeout DURATION      per-request deadline (default 60s, at most 24h), e.g. 30s, 2m
  --deadline DURATION     the whole run's deadline (default 15m, at most 24h): when it passes, everything in
                          flight is aborted and the run ends inconclusive (reason "deadline") with what it had
  --budget TOKENS         most tokens this run may send (default auto: what the selected scenarios are
                          expected to send at the endpoint's advertised sizes, times 1.5; 5000000 when it
                          advertises none)
  --planter-tokens N      prompt tokens per planter (default: sized from the KV pool)
  --rounds N              abort-race race windows (default 29; a pass needs 29)
  --ballast-hold MODE     abort-race and concurrent-interleave ballast: prompt (default: half prompt, half
                          generation) or generation (a short prompt, a long generation: see docs/cost.md)
  --chat                  use /v1/chat/completions instead of /v1/completions
  --json                  print one JSON document on stdout
  --fail-on SEVERITY      exit 1 only for a finding at or above it: critical, high, warning (default), info;
                          every finding is still listed
  --junit FILE            also write a JUnit XML report (a testcase per scenario) to FILE: a new file or an
                          earlier XML report, checked before the run (never a link, the store or the key)
  --store FILE            where plantings and this run are recorded, so later runs attribute its markers
                          (default $KVCANARY_HOME/runs.sqlite, ~/.config/kvcanary/runs.sqlite; may be the
                          file \`serve\` writes); silences acknowledged in it (\`kvcanary ack --store FILE\`) apply
  --config FILE           apply the \`silences:\` of this serve config too. The run is named after the config
                          target with this URL, else HOST:PORT of the URL (e.g. 10.0.0.5:8000); silences match
                          it by that name. At a config target's URL the run probes as serve would: its key,
                          headers, tenants (keys, cache_salts) and model, unless flags give them (its keys must
                          be set; other targets' api_key_env variables need not be).
                          A silenced finding is listed, marked acknowledged, and does not count for --fail-on
  -q, --quiet             no progress on stderr, and the verdict as one line (with its reason, e.g.
                          "INCONCLUSIVE (unreachable)") instead of the table

  --debug                 on an internal error, print the stack too (or KVCANARY_DEBUG=1)

exit codes: 0 pass, 1 finding(s) at or above --fail-on that no silence acknowledged, 2 inconclusive (or
nothing applicable; also a dead endpoint or the deadline), 64 bad usage, 70 internal error`;

export async function runMain(args: string[]): Promise<number> {
  let opts: RunOptions;
  try {
    opts = parseRunArgs(args);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`kvcanary run: ${err.message}\n\n${RUN_USAGE}\n`);
      return EXIT.usage;
    }
    throw err;
  }
  if (opts.help) {
    process.stderr.write(RUN_USAGE + '\n');
    return EXIT.pass;
  }
  // Loaded before anything is sent: a bad config is a usage error, not a wasted run.
  const config: ServiceConfig | undefined = opts.config === undefined ? undefined
    : await loadConfig(opts.config, { knownScenarios: SCENARIO_NAMES, requireSecrets: false });
  // Named by its endpoint: the config target at this URL, else HOST:PORT (run-silences.ts), so a silence or
  // a stored run is about one endpoint.
  const configName = configTargetAt(config, opts.target.baseUrl);
  if (configName !== undefined) opts.target.name = configName;
  // A configured target is probed as serve probes it: its key, headers, tenants and model (flags win).
  if (config !== undefined && configName !== undefined) opts.target = adoptConfigTarget(opts.target, config, opts.config!, process.env);
  // The installation's key and store: markers planted by earlier runs decrypt and are attributed to them.
  const storePath = opts.store ?? runStorePath();
  // A --junit path that cannot be written is found now, not after the whole run (the verdict would be lost).
  if (opts.junit !== undefined) checkOutputFile(opts.junit, junitRules(storePath));
  // The marker key (and the fragment bound) before the store: a bad key exits 64 naming its file without
  // creating or touching a store.
  let key: Uint8Array;
  try {
    key = installationKey(process.env).key;
    recentMarkersFrom(process.env);
  } catch (err) {
    if (err instanceof InstallationError) {
      process.stderr.write(`kvcanary run: ${err.message}\n`);
      return EXIT.usage;
    }
    throw err;
  }
  const store = openStore({ path: storePath, retentionMs: RUN_STORE_RETENTION_MS, secrets: runSecrets(opts.target) });
  let registry;
  try {
    store.prune(Date.now());
    registry = createInstallationRegistry({ store, since: Date.now() - RUN_STORE_RETENTION_MS, key });
  } catch (err) {
    store.close();
    throw err;
  }
  const controller = new AbortController();
  const stop = (): void => controller.abort(new RunCut('deadline', 'interrupted (signal): in-flight requests were aborted'));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  // The run's own deadline: everything in flight is aborted and the run ends inconclusive with what it had.
  const deadline = setTimeout(() => controller.abort(new RunCut('deadline', `deadline: the run's --deadline (${formatDuration(opts.deadlineMs)}) passed; in-flight requests were aborted`)), opts.deadlineMs);
  // Target-supplied text (model ids, notes) is stripped of control characters before it reaches a terminal.
  const progress = opts.quiet ? () => {} : (m: string) => process.stderr.write(`  ${oneLine(m)}\n`);
  try {
    const probed = await runProbe(
      {
        registry,
        scanner: createScanner(registry),
        onMarkers: persistPlantings(store),
        progress,
        requestTimeoutMs: opts.timeoutMs,
        tuning: {
          chat: opts.chat,
          ...(opts.planterTokens !== undefined ? { planterTokens: opts.planterTokens } : {}),
          ...(opts.rounds !== undefined ? { abortRounds: opts.rounds } : {}),
          ...(opts.ballastHold !== undefined ? { ballastHold: opts.ballastHold } : {}),
        },
      },
      { target: opts.target, scenarios: opts.scenarios, runId: `run-${randomUUID()}`, signal: controller.signal, tokenBudget: opts.budget },
    );
    // Silences read after the run, as serve reads them at each probe: one acknowledged meanwhile applies.
    const now = Date.now();
    const { silences, names } = runSilences({ ...(config === undefined ? {} : { config }), store, target: opts.target, now });
    const run = applySilences(probed, silences, now, names);
    store.recordRun(run);
    process.stderr.write(forTerminal(opts.quiet ? quietLine(run, opts.failOn) : summaryTable(run)) + '\n');
    if (opts.json) process.stdout.write(jsonText(toJson(run, silences), 2) + '\n');
    if (opts.junit !== undefined) {
      try {
        writeOutputFile(opts.junit, toJunit(run, opts.failOn), junitRules(storePath));
      } catch (err) {
        if (err instanceof UsageError) throw err;
        throw new UsageError(`--junit: cannot write ${shownPath(opts.junit)} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
      }
    }
    return exitCodeFor(run, opts.failOn);
  } finally {
    clearTimeout(deadline);
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    store.close();
  }
}

/**
 * `--junit FILE`: a new file, or a JUnit report an earlier run wrote (an XML file) replaced; never the store,
 * the marker key, a link, a FIFO or a device, and never anything else that exists (a typo must not eat a file).
 */
function junitRules(storePath: string): OutputFileRules {
  return {
    what: '--junit',
    overwrite: (head) => head === '' || head.trimStart().startsWith('<?xml') || head.trimStart().startsWith('<testsuites'),
    existsHint: 'exists and is not an XML report: refusing to overwrite it',
    protect: [{ file: storePath, what: "kvcanary's evidence store" }, { file: markerKeyPath(), what: "the installation's marker key" }],
  };
}

/** Plantings older than this are pruned from `run`'s store (the service's default retention). */
const RUN_STORE_RETENTION_MS = 7 * 86_400_000;

/** Secret values the run's store must scrub: the probe's own list (keys, salts, secret headers, URL credentials, key files' keys). */
function runSecrets(target: TargetConfig): string[] {
  const files = [target.apiKeyFile, ...target.tenants.map((t) => t.apiKeyFile)].flatMap((f) => (f === undefined ? [] : [f]));
  return [...targetSecrets(target, process.env), ...files.flatMap((f) => {
    try {
      const key = readFileSync(f, 'utf8').trim();
      return key === '' ? [] : [key];
    } catch {
      return [];
    }
  })];
}

interface RunOptions {
  help: boolean;
  target: TargetConfig;
  scenarios: string[];
  timeoutMs: number;
  /** The whole run ends after this: in-flight requests aborted, inconclusive with what it had. */
  deadlineMs: number;
  budget: number | 'auto';
  planterTokens?: number;
  rounds?: number;
  ballastHold?: 'prompt' | 'generation';
  chat: boolean;
  json: boolean;
  quiet: boolean;
  failOn: Severity;
  junit?: string;
  store?: string;
  /** A serve config whose `silences:` apply. */
  config?: string;
}

export function parseRunArgs(args: string[]): RunOptions {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        target: { type: 'string' },
        model: { type: 'string' },
        scenario: { type: 'string', multiple: true },
        'api-key-env': { type: 'string' },
        tenant: { type: 'string', multiple: true },
        'tenant-salt': { type: 'string', multiple: true },
        header: { type: 'string', multiple: true },
        timeout: { type: 'string' },
        deadline: { type: 'string' },
        budget: { type: 'string' },
        'planter-tokens': { type: 'string' },
        rounds: { type: 'string' },
        'ballast-hold': { type: 'string' },
        chat: { type: 'boolean', default: false },
        json: { type: 'boolean', default: false },
        'fail-on': { type: 'string' },
        junit: { type: 'string' },
        store: { type: 'string' },
        config: { type: 'string' },
        quiet: { type: 'boolean', short: 'q', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    throw new UsageError(parseArgsMessage(err));
  }
  const v = parsed.values;
  if (v.help) return { help: true } as RunOptions;
  if (v.target === undefined) throw new UsageError('--target URL is required');
  try {
    parseBaseUrl(v.target, '--target');
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const scenarios = v.scenario ?? [...SCENARIO_NAMES];
  for (const s of scenarios) {
    if (!SCENARIO_NAMES.includes(s)) throw new UsageError(`--scenario: unknown scenario ${shownString(s)} (expected one of ${SCENARIO_NAMES.join(', ')})`);
  }
  const envName = /^[A-Za-z_][A-Za-z0-9_]*$/;
  const apiKeyEnv = v['api-key-env'];
  if (apiKeyEnv !== undefined) {
    // Never echo it: the usual mistake is pasting the key itself here.
    if (!envName.test(apiKeyEnv)) throw new UsageError('--api-key-env: expected the NAME of an environment variable (letters, digits, _), got something else (not shown: it may be a key)');
    if (!process.env[apiKeyEnv]) throw new UsageError(`--api-key-env: environment variable ${apiKeyEnv} is not set`);
  }
  const tenants = withSalts(tenantFlags(v.tenant ?? []), v['tenant-salt'] ?? []);
  const headers = headerFlags(v.header ?? [], apiKeyEnv !== undefined || tenants.some((t) => t.apiKeyEnv !== undefined));
  const timeoutMs = v.timeout === undefined ? 60_000 : durationFlag('--timeout', v.timeout, 1, MAX_REQUEST_TIMEOUT_MS);
  const deadlineMs = v.deadline === undefined ? DEFAULT_RUN_DEADLINE_MS : durationFlag('--deadline', v.deadline, 1000, MAX_RUN_DEADLINE_MS);
  const failOn = (v['fail-on'] ?? 'warning') as Severity;
  if (!SEVERITIES.includes(failOn)) throw new UsageError(`--fail-on: expected one of ${SEVERITIES.join(', ')}`);
  if (v.junit !== undefined && v.junit.trim() === '') throw new UsageError('--junit: expected a file path');
  if (v.store !== undefined && v.store.trim() === '') throw new UsageError('--store: expected a file path');
  if (v.config !== undefined && v.config.trim() === '') throw new UsageError('--config: expected a file path');
  const target: TargetConfig = {
    name: endpointName(v.target),
    baseUrl: v.target,
    ...(v.model !== undefined ? { model: v.model } : {}),
    ...(apiKeyEnv !== undefined ? { apiKeyEnv } : {}),
    headers,
    tenants,
    schedule: { intervalMs: timeoutMs * 2, timeoutMs, jitterMs: 0 },
    budget: { tokensPerHour: Number.MAX_SAFE_INTEGER },
    scenarios,
  };
  return {
    help: false,
    target,
    scenarios,
    timeoutMs,
    deadlineMs,
    budget: v.budget === undefined || v.budget === 'auto' ? 'auto' : positiveIntFlag('--budget', v.budget),
    ...(v['planter-tokens'] !== undefined ? { planterTokens: positiveIntFlag('--planter-tokens', v['planter-tokens']) } : {}),
    ...(v.rounds !== undefined ? { rounds: positiveIntFlag('--rounds', v.rounds) } : {}),
    ...(v['ballast-hold'] !== undefined ? { ballastHold: ballastHoldFlag(v['ballast-hold']) } : {}),
    chat: v.chat,
    json: v.json,
    quiet: v.quiet,
    failOn,
    ...(v.junit !== undefined ? { junit: v.junit } : {}),
    ...(v.store !== undefined ? { store: v.store } : {}),
    ...(v.config !== undefined ? { config: v.config } : {}),
  };
}

const TENANT_NAME = /^([a-zA-Z0-9_.-]{1,64})=/;

/** `--tenant NAME=VAR`: a tenant sending the key in environment variable VAR. The value is never echoed. */
function tenantFlags(flags: string[]): TenantConfig[] {
  const tenants: TenantConfig[] = [];
  for (const t of flags) {
    const m = /^([a-zA-Z0-9_.-]{1,64})=([A-Za-z_][A-Za-z0-9_]*)$/.exec(t);
    if (m === null) {
      const name = TENANT_NAME.exec(t)?.[1];
      throw new UsageError(name === undefined
        ? '--tenant: expected NAME=ENV_VAR (tenant name [a-zA-Z0-9_.-]{1,64}), got something else (not shown: it may hold a key)'
        : `--tenant ${name}: expected NAME=ENV_VAR, the NAME of an environment variable after '=' (the value is not shown: it may be a key)`);
    }
    if (tenants.some((x) => x.name === m[1])) throw new UsageError(`--tenant ${m[1]}: given twice`);
    if (!process.env[m[2]!]) throw new UsageError(`--tenant ${m[1]}: environment variable ${m[2]} is not set`);
    tenants.push({ name: m[1]!, apiKeyEnv: m[2]! });
  }
  return tenants;
}

/** Longest --tenant-salt value accepted. */
const MAX_SALT_CHARS = 256;

/**
 * `--tenant-salt NAME=SALT`: the cache_salt tenant NAME sends. A NAME no `--tenant` gave becomes a tenant
 * of its own with the run's key, separated from the others only by the salt. A salt partitions a shared
 * prefix cache, so it is treated like a key: never echoed.
 */
function withSalts(tenants: TenantConfig[], flags: string[]): TenantConfig[] {
  const out = tenants.map((t) => ({ ...t }));
  const salted = new Set<string>();
  for (const f of flags) {
    const name = TENANT_NAME.exec(f)?.[1];
    if (name === undefined) throw new UsageError('--tenant-salt: expected NAME=SALT (tenant name [a-zA-Z0-9_.-]{1,64}), got something else (not shown: it may hold a secret)');
    const salt = f.slice(name.length + 1);
    // Printable ASCII without spaces: what a gateway can pass on unchanged in a JSON body and a shell line.
    if (!/^[\x21-\x7e]+$/.test(salt) || salt.length > MAX_SALT_CHARS) {
      throw new UsageError(`--tenant-salt ${name}: expected a salt of 1 to ${MAX_SALT_CHARS} printable characters without spaces after '=' (the value is not shown)`);
    }
    if (salted.has(name)) throw new UsageError(`--tenant-salt ${name}: given twice`);
    salted.add(name);
    const tenant = out.find((t) => t.name === name);
    if (tenant !== undefined) tenant.cacheSalt = salt;
    else out.push({ name, cacheSalt: salt });
  }
  return out;
}

function ballastHoldFlag(value: string): 'prompt' | 'generation' {
  if (value === 'prompt' || value === 'generation') return value;
  throw new UsageError(`--ballast-hold: expected prompt or generation, got ${shownString(value)}`);
}
