/**
 * `kvcanary run`: probe one endpoint now. Progress and a summary table go to stderr; with --json, stdout
 * holds exactly one JSON document. Exit 0 pass, 1 at least one finding, 2 inconclusive, 64 bad usage.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { parseDuration, type TargetConfig, type TenantConfig } from '../service/config.js';
import { SEVERITIES, type Severity } from '../probe/findings.js';
import { createMarkerRegistry } from '../probe/marker-registry.js';
import { runProbe } from '../probe/probe.js';
import { createScanner } from '../probe/scanner.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import { parseBaseUrl } from '../probe/target/base-url.js';
import { writeFileSync } from 'node:fs';
import { exitCodeFor, summaryTable, toJson, toJunit } from './run-output.js';
import { UsageError, positiveIntFlag } from './usage.js';

export const RUN_USAGE = `usage: kvcanary run --target URL [options]

  --target URL            server root, with or without /v1 (required)
  --model ID              model to probe (default: the first in /v1/models)
  --scenario NAME         repeatable; default all: ${SCENARIO_NAMES.join(', ')}
  --api-key-env VAR       read the API key from environment variable VAR (never logged)
  --tenant NAME=VAR       repeatable: probe as several tenants, each with the key in VAR
  --header 'K: V'         repeatable extra request header
  --timeout DURATION      per-request deadline (default 60s), e.g. 30s, 2m
  --budget TOKENS         most prompt+completion tokens this run may spend (default 5000000)
  --planter-tokens N      prompt tokens per planter (default: sized from the KV pool)
  --rounds N              abort-race race windows (default 29; a pass needs 29)
  --chat                  use /v1/chat/completions instead of /v1/completions
  --json                  print one JSON document on stdout
  --fail-on SEVERITY      exit 1 only for a finding at or above it: critical, high, warning (default), info;
                          every finding is still listed
  --junit FILE            also write a JUnit XML report (a testcase per scenario) to FILE
  -q, --quiet             no progress on stderr

exit codes: 0 pass, 1 finding(s) at or above --fail-on, 2 inconclusive (or nothing applicable), 64 bad usage`;

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
  const registry = createMarkerRegistry();
  const controller = new AbortController();
  const stop = (): void => controller.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const progress = opts.quiet ? () => {} : (m: string) => process.stderr.write(`  ${m}\n`);
  try {
    const run = await runProbe(
      {
        registry,
        scanner: createScanner(registry),
        progress,
        requestTimeoutMs: opts.timeoutMs,
        tuning: {
          chat: opts.chat,
          ...(opts.planterTokens !== undefined ? { planterTokens: opts.planterTokens } : {}),
          ...(opts.rounds !== undefined ? { abortRounds: opts.rounds } : {}),
        },
      },
      { target: opts.target, scenarios: opts.scenarios, runId: `run-${randomUUID()}`, signal: controller.signal, tokenBudget: opts.budget },
    );
    process.stderr.write(summaryTable(run) + '\n');
    if (opts.json) process.stdout.write(JSON.stringify(toJson(run), null, 2) + '\n');
    if (opts.junit !== undefined) writeFileSync(opts.junit, toJunit(run, opts.failOn));
    return exitCodeFor(run, opts.failOn);
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}

interface RunOptions {
  help: boolean;
  target: TargetConfig;
  scenarios: string[];
  timeoutMs: number;
  budget: number;
  planterTokens?: number;
  rounds?: number;
  chat: boolean;
  json: boolean;
  quiet: boolean;
  failOn: Severity;
  junit?: string;
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
        header: { type: 'string', multiple: true },
        timeout: { type: 'string' },
        budget: { type: 'string' },
        'planter-tokens': { type: 'string' },
        rounds: { type: 'string' },
        chat: { type: 'boolean', default: false },
        json: { type: 'boolean', default: false },
        'fail-on': { type: 'string' },
        junit: { type: 'string' },
        quiet: { type: 'boolean', short: 'q', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
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
    if (!SCENARIO_NAMES.includes(s)) throw new UsageError(`--scenario: unknown scenario '${s}' (expected one of ${SCENARIO_NAMES.join(', ')})`);
  }
  const envName = /^[A-Za-z_][A-Za-z0-9_]*$/;
  const apiKeyEnv = v['api-key-env'];
  if (apiKeyEnv !== undefined) {
    if (!envName.test(apiKeyEnv)) throw new UsageError(`--api-key-env: expected an environment variable name, got '${apiKeyEnv}'`);
    if (!process.env[apiKeyEnv]) throw new UsageError(`--api-key-env: environment variable ${apiKeyEnv} is not set`);
  }
  const tenants: TenantConfig[] = (v.tenant ?? []).map((t) => {
    const m = /^([a-zA-Z0-9_.-]{1,64})=([A-Za-z_][A-Za-z0-9_]*)$/.exec(t);
    if (m === null) throw new UsageError(`--tenant: expected NAME=ENV_VAR, got '${t}'`);
    if (!process.env[m[2]!]) throw new UsageError(`--tenant ${m[1]}: environment variable ${m[2]} is not set`);
    return { name: m[1]!, apiKeyEnv: m[2]! };
  });
  const headers: Record<string, string> = {};
  for (const h of v.header ?? []) {
    const i = h.indexOf(':');
    const name = i > 0 ? h.slice(0, i).trim() : '';
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new UsageError(`--header: expected 'Name: value', got '${h.slice(0, 40)}'`);
    headers[name] = h.slice(i + 1).trim();
  }
  let timeoutMs = 60_000;
  if (v.timeout !== undefined) {
    const t = parseDuration(v.timeout);
    if (t === undefined || t <= 0) throw new UsageError(`--timeout: expected a duration like 30s or 2m, got '${v.timeout}'`);
    timeoutMs = t;
  }
  const failOn = (v['fail-on'] ?? 'warning') as Severity;
  if (!SEVERITIES.includes(failOn)) throw new UsageError(`--fail-on: expected one of ${SEVERITIES.join(', ')}`);
  if (v.junit !== undefined && v.junit.trim() === '') throw new UsageError('--junit: expected a file path');
  const target: TargetConfig = {
    name: 'cli',
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
    budget: v.budget === undefined ? 5_000_000 : positiveIntFlag('--budget', v.budget),
    ...(v['planter-tokens'] !== undefined ? { planterTokens: positiveIntFlag('--planter-tokens', v['planter-tokens']) } : {}),
    ...(v.rounds !== undefined ? { rounds: positiveIntFlag('--rounds', v.rounds) } : {}),
    chat: v.chat,
    json: v.json,
    quiet: v.quiet,
    failOn,
    ...(v.junit !== undefined ? { junit: v.junit } : {}),
  };
}
