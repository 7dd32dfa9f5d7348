/**
 * The probe: one cycle against one target. `kvcanary run` and the scheduler call the same function.
 * It builds the per-cycle context (clients per tenant, introspection, token budget), runs the named
 * scenarios in order and returns a ProbeRun. Faults of the target never throw out of here: they become
 * inconclusive scenarios.
 */
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { TargetConfig } from '../service/config.js';
import type { MarkerEntry, MarkerRegistry } from './marker-registry.js';
import type { ProbeFn, ProbeRequest } from './probe-fn.js';
import { combineOutcomes, type ProbeRun, type ScenarioResult } from './result.js';
import type { Scanner } from './scanner.js';
import type { ProbeTuning, ScenarioContext, Tenant, TokenBudget } from './scenarios/context.js';
import { SCENARIOS } from './scenarios/index.js';
import { createTargetClient } from './target/client.js';
import { introspect } from './target/introspect.js';

export interface ProbeDeps {
  registry: MarkerRegistry;
  scanner: Scanner;
  /** Where API keys are read from (by the variable names the config gives). @default process.env */
  env?: Record<string, string | undefined>;
  /** Reads an `api_key_file` (the service's caches by mtime). @default read the file each probe call */
  readKeyFile?: (file: string) => string | undefined;
  /** Persist markers before the request carrying them is sent. */
  onMarkers?: (entries: MarkerEntry[]) => void;
  progress?: (message: string) => void;
  tuning?: ProbeTuning;
  /** Per-request deadline. @default the target's schedule timeout */
  requestTimeoutMs?: number;
  now?: () => number;
  clock?: () => Date;
}

export function createProbe(deps: ProbeDeps): ProbeFn {
  return (req) => runProbe(deps, req);
}

export async function runProbe(deps: ProbeDeps, req: ProbeRequest): Promise<ProbeRun> {
  const clock = deps.clock ?? (() => new Date());
  const now = deps.now ?? (() => performance.now());
  const progress = deps.progress ?? (() => {});
  const startedAt = clock().toISOString();
  const { target } = req;
  const tenants = buildTenants(target, deps.env ?? process.env, deps.requestTimeoutMs ?? target.schedule.timeoutMs, deps.readKeyFile ?? readKeyFileNow);
  // One cycle signal, listened to by every request in flight (dozens at once): lift the listener warning.
  const cycle = new AbortController();
  setMaxListeners(0, cycle.signal);
  const forward = (): void => cycle.abort(req.signal.reason);
  if (req.signal.aborted) forward();
  else req.signal.addEventListener('abort', forward, { once: true });
  try {
    // A target's `probe:` tuning from the config file, over the caller's defaults.
    const tuning = { ...deps.tuning, ...target.tuning };
    const introspection = await introspect(tenants[0]!.client, { ...(target.model !== undefined ? { model: target.model } : {}), signal: cycle.signal });
    for (const n of introspection.notes) progress(`introspection: ${n}`);
    const model = target.model ?? introspection.models[0];
    const scenarios: ScenarioResult[] = [];
    if (model === undefined) {
      for (const name of req.scenarios) scenarios.push(skipped(name, introspection.reachable ? 'no model given and /v1/models lists none' : 'endpoint unreachable'));
    } else {
      const ctx: ScenarioContext = {
        runId: req.runId,
        target: target.name,
        model,
        api: tuning.chat === true ? 'chat' : 'completions',
        tenants,
        introspection,
        registry: deps.registry,
        scanner: deps.scanner,
        signal: cycle.signal,
        budget: tokenBudget(req.tokenBudget),
        tuning,
        calibration: { tried: false },
        onMarkers: deps.onMarkers ?? (() => {}),
        progress,
        now,
        newRequestId: (role) => `${role}-${randomUUID()}`,
      };
      for (const name of req.scenarios) {
        const scenario = SCENARIOS[name];
        if (scenario === undefined) {
          scenarios.push(skipped(name, `unknown scenario ${name}`));
          continue;
        }
        progress(`${name}: start`);
        const result = await scenario(ctx);
        progress(`${name}: ${result.outcome}${result.findings.length > 0 ? ` (${result.findings.length} finding(s))` : ''}`);
        scenarios.push(result);
      }
    }
    return {
      runId: req.runId,
      target: target.name,
      baseUrl: tenants[0]!.client.root,
      model: model ?? '',
      startedAt,
      finishedAt: clock().toISOString(),
      outcome: combineOutcomes(scenarios),
      scenarios,
      capacity: {
        ...(introspection.contextTokens !== undefined ? { contextTokens: introspection.contextTokens } : {}),
        ...(introspection.poolTokens !== undefined ? { poolTokens: introspection.poolTokens } : {}),
        ...(introspection.pageSize !== undefined ? { pageSize: introspection.pageSize } : {}),
      },
      up: introspection.reachable,
    };
  } finally {
    req.signal.removeEventListener('abort', forward);
    await Promise.all(tenants.map((t) => t.client.close()));
  }
}

function readKeyFileNow(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

function buildTenants(target: TargetConfig, env: Record<string, string | undefined>, timeoutMs: number, readKeyFile: (file: string) => string | undefined): Tenant[] {
  const keyOf = (name: string | undefined, file?: string): string | undefined =>
    (file !== undefined ? readKeyFile(file) : name === undefined ? undefined : env[name] || undefined);
  // keyId: an opaque label, equal for tenants that send the same key (the first such tenant's name), never the key.
  const keyIds = new Map<string | undefined, string>();
  const make = (name: string, apiKey: string | undefined, extraBody: Record<string, unknown>): Tenant => {
    if (!keyIds.has(apiKey)) keyIds.set(apiKey, apiKey === undefined ? '(none)' : name);
    return {
      name,
      client: createTargetClient({ baseUrl: target.baseUrl, headers: target.headers, timeoutMs, ...(apiKey !== undefined ? { apiKey } : {}) }),
      extraBody,
      keyId: keyIds.get(apiKey)!,
    };
  };
  if (target.tenants.length === 0) return [make('default', keyOf(target.apiKeyEnv, target.apiKeyFile), {})];
  return target.tenants.map((t) => make(t.name,
    t.apiKeyEnv !== undefined || t.apiKeyFile !== undefined ? keyOf(t.apiKeyEnv, t.apiKeyFile) : keyOf(target.apiKeyEnv, target.apiKeyFile),
    t.cacheSalt !== undefined ? { cache_salt: t.cacheSalt } : {}));
}

function tokenBudget(limit: number): TokenBudget {
  let spent = 0;
  return {
    remaining: () => Math.max(0, limit - spent),
    spend(tokens) {
      if (spent + tokens > limit) return false;
      spent += tokens;
      return true;
    },
  };
}

function skipped(name: string, why: string): ScenarioResult {
  return { name, outcome: 'inconclusive', findings: [], requests: [], notes: [why], tokens: { sent: 0, billed: 0 }, durationMs: 0 };
}
