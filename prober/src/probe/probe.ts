/**
 * The probe: one cycle against one target. `kvcanary run` and the scheduler call the same function.
 * It builds the per-cycle context (clients per tenant, introspection, token budget), runs the named
 * scenarios in order and returns a ProbeRun. Faults of the target never throw out of here: they become
 * inconclusive scenarios.
 */
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { ProbeTarget } from './probe-target.js';
import type { MarkerEntry, MarkerRegistry } from './marker-registry.js';
import { AUTO_BUDGET_FALLBACK, type BudgetReserve, type ProbeFn, type ProbeRequest } from './probe-fn.js';
import { combineOutcomes, type ProbeRun, type ScenarioResult } from './result.js';
import type { Scanner } from './scanner.js';
import type { ProbeTuning, ScenarioContext, Tenant, TokenBudget } from './scenarios/context.js';
import { SCENARIOS } from './scenarios/index.js';
import { introspect } from './target/introspect.js';
import { DEAD_AFTER_FAILURES, MAX_PROBE_RESPONSE_BYTES } from '../bounds.js';
import { createRedactor, targetSecrets } from './redactor.js';
import { cutOf, cutSkipped, markCut, RunCut } from './run-cut.js';
import { createLiveness, WatchedTargetClient, type Liveness } from './target/watched-client.js';
import { runBudget } from './scenarios/cost.js';
import { createPoolHolds, type PoolHolds } from './scenarios/pool-hold.js';

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
  /** Who holds each endpoint's pool with ballast: shared by every call of one prober. @default one per call */
  poolHolds?: PoolHolds;
}

/** A prober: its calls share who holds each endpoint's pool (scenarios of one cycle may run together). */
export function createProbe(deps: ProbeDeps): ProbeFn {
  const shared = { ...deps, poolHolds: deps.poolHolds ?? createPoolHolds() };
  return (req) => runProbe(shared, req);
}

export async function runProbe(deps: ProbeDeps, req: ProbeRequest): Promise<ProbeRun> {
  const clock = deps.clock ?? (() => new Date());
  const now = deps.now ?? (() => performance.now());
  const startedAt = clock().toISOString();
  const { target } = req;
  const env = deps.env ?? process.env;
  const readKeyFile = deps.readKeyFile ?? readKeyFileNow;
  // Every secret the target's config refers to (keys from files too), scrubbed from progress and from the
  // whole finished run.
  const fileKeys = [target.apiKeyFile, ...target.tenants.map((t) => t.apiKeyFile)].flatMap((f) => (f === undefined ? [] : [readKeyFile(f) ?? '']));
  const redactor = createRedactor([...targetSecrets(target, env), ...fileKeys.filter((k) => k !== '')]);
  // A configured key file that is gone or emptied (a Secret being rotated, a mount lost) must not turn into
  // requests without a key: nothing is sent and the run says why.
  if (fileKeys.includes('')) return noKeyRun(req, target.name, target.baseUrl, startedAt, clock);
  const progress = deps.progress === undefined ? () => {} : (m: string) => deps.progress!(redactor.text(m));
  // One cycle signal, listened to by every request in flight (dozens at once): lift the listener warning.
  const cycle = new AbortController();
  setMaxListeners(0, cycle.signal);
  const forward = (): void => cycle.abort(req.signal.reason);
  if (req.signal.aborted) forward();
  else req.signal.addEventListener('abort', forward, { once: true });
  const liveness = createLiveness(DEAD_AFTER_FAILURES, (cut) => cycle.abort(cut));
  const deadline = target.deadlineMs === undefined ? undefined
    : setTimeout(() => cycle.abort(new RunCut('deadline', `deadline: the target's deadline (${Math.round(target.deadlineMs! / 1000)}s) passed; in-flight requests were aborted`)), target.deadlineMs);
  const tenants = buildTenants(target, env, deps.requestTimeoutMs ?? target.schedule.timeoutMs, cycle.signal, liveness, readKeyFile);
  try {
    // A target's `probe:` tuning from the config file, over the caller's defaults.
    const tuning = { ...deps.tuning, ...target.tuning };
    const introspection = await introspect(tenants[0]!.client, { ...(target.model !== undefined ? { model: target.model } : {}), signal: cycle.signal });
    for (const n of introspection.notes) progress(`introspection: ${n}`);
    const model = target.model ?? introspection.models[0];
    const scenarios: ScenarioResult[] = [];
    const cutAtStart = cutOf(cycle.signal);
    if (model === undefined || cutAtStart !== undefined) {
      for (const name of req.scenarios) {
        scenarios.push(cutAtStart !== undefined ? cutSkipped(name, cutAtStart)
          : introspection.reachable ? skipped(name, 'no model given and /v1/models lists none')
          : { ...skipped(name, 'unreachable: the endpoint did not answer /v1/models'), reason: 'unreachable' });
      }
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
        secrets: redactor.secrets,
        signal: cycle.signal,
        budget: tokenBudget(req.tokenBudget === 'auto' ? runBudget(req.scenarios, introspection, tuning, AUTO_BUDGET_FALLBACK) : req.tokenBudget, req.moreBudget),
        tuning,
        calibration: { tried: false },
        prefixReuse: {},
        poolHold: (deps.poolHolds ?? createPoolHolds())(target.baseUrl),
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
        const before = cutOf(cycle.signal);
        if (before !== undefined) {
          scenarios.push(cutSkipped(name, before));
          continue;
        }
        progress(`${name}: start`);
        // A budget view per scenario: a request the budget refused means the scenario did less than it
        // needed, whatever it concluded from the rest.
        const refused = { count: 0 };
        let result = starvedByBudget(await scenario({ ...ctx, budget: countingRefusals(ctx.budget, refused) }), refused.count);
        const cut = cutOf(cycle.signal);
        if (cut !== undefined) result = markCut(result, cut);
        progress(`${name}: ${result.outcome}${result.findings.length > 0 ? ` (${result.findings.length} finding(s))` : ''}`);
        scenarios.push(result);
      }
    }
    return redactor.deep({
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
        ...(introspection.reservationPoolTokens !== undefined ? { reservationPoolTokens: introspection.reservationPoolTokens } : {}),
        ...(introspection.largestPoolTokens !== undefined ? { largestPoolTokens: introspection.largestPoolTokens } : {}),
      },
      up: introspection.reachable,
    } satisfies ProbeRun);
  } finally {
    if (deadline !== undefined) clearTimeout(deadline);
    req.signal.removeEventListener('abort', forward);
    await Promise.all(tenants.map((t) => t.client.close()));
  }
}

function noKeyRun(req: ProbeRequest, name: string, baseUrl: string, startedAt: string, clock: () => Date): ProbeRun {
  const why = 'api_key_file: a configured key file is missing, unreadable or empty: nothing was sent (never a request without its key)';
  const scenarios = req.scenarios.map((s) => skipped(s, why));
  return { runId: req.runId, target: name, baseUrl, model: '', startedAt, finishedAt: clock().toISOString(), outcome: combineOutcomes(scenarios), scenarios, capacity: {}, up: false };
}

function readKeyFileNow(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

function buildTenants(target: ProbeTarget, env: Record<string, string | undefined>, timeoutMs: number, signal: AbortSignal, liveness: Liveness,
  readKeyFile: (file: string) => string | undefined): Tenant[] {
  const keyOf = (name: string | undefined, file?: string): string | undefined =>
    (file !== undefined ? readKeyFile(file) : name === undefined ? undefined : env[name] || undefined);
  // keyId: an opaque label, equal for tenants that send the same key (the first such tenant's name), never the key.
  const keyIds = new Map<string | undefined, string>();
  const make = (name: string, apiKey: string | undefined, extraBody: Record<string, unknown>): Tenant => {
    if (!keyIds.has(apiKey)) keyIds.set(apiKey, apiKey === undefined ? '(none)' : name);
    return {
      name,
      client: new WatchedTargetClient({
        baseUrl: target.baseUrl, headers: target.headers, timeoutMs, maxResponseBytes: MAX_PROBE_RESPONSE_BYTES, ...(apiKey !== undefined ? { apiKey } : {}),
      }, signal, liveness),
      extraBody,
      keyId: keyIds.get(apiKey)!,
    };
  };
  if (target.tenants.length === 0) return [make('default', keyOf(target.apiKeyEnv, target.apiKeyFile), {})];
  return target.tenants.map((t) => make(t.name,
    t.apiKeyEnv !== undefined || t.apiKeyFile !== undefined ? keyOf(t.apiKeyEnv, t.apiKeyFile) : keyOf(target.apiKeyEnv, target.apiKeyFile),
    t.cacheSalt !== undefined ? { cache_salt: t.cacheSalt } : {}));
}

/** The probe's budget: its grant, topped up from `more` (the scheduler's spare tokens) when a spend would pass it. */
function tokenBudget(grant: number, more?: BudgetReserve): TokenBudget {
  let limit = grant;
  let spent = 0;
  return {
    remaining: () => Math.max(0, limit - spent) + Math.max(0, more?.spare() ?? 0),
    spend(tokens) {
      const over = spent + tokens - limit;
      if (over > 0) {
        if (more === undefined || !more.take(over)) return false;
        limit += over;
      }
      spent += tokens;
      return true;
    },
  };
}

function countingRefusals(budget: TokenBudget, refused: { count: number }): TokenBudget {
  return {
    remaining: () => budget.remaining(),
    spend(tokens) {
      const ok = budget.spend(tokens);
      if (!ok) refused.count++;
      return ok;
    },
  };
}

/**
 * Notes a starved scenario may have drawn about the endpoint from what little it sent: they are not
 * evidence when the cause was the prober's own budget, so they are dropped.
 */
const STARVED_CLAIMS = /not reported|no planter was accepted|no reader was answered|too few .*answered|nothing was sent|not exercised/;

/**
 * A scenario the token budget cut short is inconclusive with reason `budget` — never a pass, never
 * not-applicable, and never the endpoint's fault — unless it found something (a finding stands).
 */
export function starvedByBudget(result: ScenarioResult, refusals: number): ScenarioResult {
  if (refusals === 0 || result.outcome === 'fail') return result;
  const notes = result.notes.filter((n) => !STARVED_CLAIMS.test(n));
  notes.push(`cut short by the token budget: ${refusals} request(s) not sent; isolation not established (the prober's limit, not the endpoint's fault)`);
  return { ...result, outcome: 'inconclusive', reason: 'budget', notes };
}

function skipped(name: string, why: string): ScenarioResult {
  return { name, outcome: 'inconclusive', findings: [], requests: [], notes: [why], tokens: { sent: 0, billed: 0 }, durationMs: 0 };
}
