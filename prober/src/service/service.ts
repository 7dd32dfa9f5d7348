/**
 * `kvcanary serve` assembled: store + metrics + scheduler + status server around a probe function, so the
 * CLI only loads the config, calls createService and wires signals (SIGTERM/SIGINT → stop, SIGHUP → reload).
 *
 * On start the last-run gauges are restored from the store, so a restart neither blanks the dashboards nor
 * makes every "probes stale" alert fire until the first cycle ends. Requests and plantings past retention are
 * pruned at start and hourly.
 */
import { Registry } from 'prom-client';
import type { Logger } from 'pino';
import { configSecrets, type ServiceConfig } from './config.js';
import { createLogger } from './logger.js';
import { createMetrics, observeSchedules, seedScenarioState, type Metrics } from './metrics.js';
import { registerBuildInfo } from './build-info.js';
import type { ProbeFn } from '../probe/probe-fn.js';
import type { ProbeRun } from '../probe/result.js';
import { createScheduler, systemClock, type Clock, type Scheduler } from './scheduler.js';
import { startServiceServer } from './server.js';
import { createFleet, type Fleet } from './fleet.js';
import { renderFleetSection } from './fleet-status.js';
import type { DnsResolver } from './discovery/sources.js';
import { formatShard, type Shard } from './shard.js';
import { statusPageUrl } from './external-url.js';
import { isActive, withSilences, type Silence } from './silences.js';
import { createKeyFiles } from './key-files.js';
import { openStore, type Store } from './store.js';

/** What a probe built by the service may use: the store, to record planting requests before their markers
 *  are sent (`recordPlantings`) and to find earlier runs' plantings (`findPlanting`, `loadPlantings`) so late
 *  leaks are attributed. */
export interface ProbeDeps {
  store: Store;
  logger: Logger;
  /** The current config (changes on reload). */
  config: () => ServiceConfig;
  /** Reads `api_key_file:` keys (cached by mtime; every key read is scrubbed from logs and the store). */
  readKeyFile: (file: string) => string | undefined;
}

/** Either a ready probe, or a factory that gets the service's store (for marker persistence). */
export type ProbeOption =
  | { probe: ProbeFn; createProbe?: never }
  | { createProbe: (deps: ProbeDeps) => ProbeFn; probe?: never };

export type ServiceOptions = ProbeOption & ServiceCommonOptions;

export interface ServiceCommonOptions {
  config: ServiceConfig;
  /** @default a new Registry */
  registry?: Registry;
  /** @default createLogger at the config's level, scrubbing the config's credentials */
  logger?: Logger;
  /** @default systemClock */
  clock?: Clock;
  /** Environment the config's api_key_env names are read from (for scrubbing). @default process.env */
  env?: Record<string, string | undefined>;
  /** Called after each recorded cycle (the CLI prints findings from it). */
  onRun?: (run: ProbeRun) => void | Promise<void>;
  /** Passed to the scheduler. @default 5000 */
  abortGraceMs?: number;
  /** Jitter source. @default Math.random */
  random?: () => number;
  /** This replica's shard (fleet mode). @default 0/1: every target */
  shard?: Shard;
  /** DNS for `discover: {dns, dns_srv}`. @default the system's resolvers */
  dns?: DnsResolver;
}

export interface Service {
  /** Status page URL with the real port, e.g. http://127.0.0.1:9464/ (metrics at `${url}metrics`). */
  url: string;
  stop(): Promise<void>;
  /** Applies a new validated config. listen and store.path changes need a restart and are reported, not applied. */
  reload(config: ServiceConfig): void;
  readonly store: Store;
  readonly registry: Registry;
  readonly metrics: Metrics;
  readonly scheduler: Scheduler;
  readonly logger: Logger;
  readonly fleet: Fleet;
}

const PRUNE_EVERY_MS = 3_600_000;

export async function createService(opts: ServiceOptions): Promise<Service> {
  const env = opts.env ?? process.env;
  const clock = opts.clock ?? systemClock;
  let config = opts.config;
  const keyFiles = createKeyFiles();
  let secrets = configSecrets(config, env, keyFiles);
  const secretsOf = (): readonly string[] => [...secrets, ...keyFiles.seen()];
  const ownLogger = opts.logger === undefined;
  const logger = opts.logger ?? createLogger({ level: config.log.level, secrets: secretsOf });
  const store = openStore({ path: config.store.path, retentionMs: config.store.retentionMs, secrets: secretsOf });
  const registry = opts.registry ?? new Registry();
  const metrics = createMetrics(registry, { silences: () => activeSilences(store, config, clock.now(), logger), now: () => clock.now() });
  registerBuildInfo(registry);

  let scheduler: Scheduler | undefined;
  let server: Awaited<ReturnType<typeof startServiceServer>>;
  /** What the scheduler probes: the config with its targets replaced by this shard's static + discovered ones. */
  let effective = config;
  let applyQueued = false;
  const fleet = createFleet({
    config, registry, logger, clock,
    ...(opts.shard === undefined ? {} : { shard: opts.shard }),
    ...(opts.dns === undefined ? {} : { dns: opts.dns }),
    onChange: () => {
      if (applyQueued) return;
      applyQueued = true;
      queueMicrotask(() => { applyQueued = false; applyTargets(); });
    },
  });
  /** Shard gauges, target info and the open-findings labels (shard, status page, discovery labels) for `effective`. */
  const observeTargets = (): void => {
    const template = config.externalUrl;
    const statusPage = template === undefined ? undefined : (target: string): string => statusPageUrl(template, fleet.shard.index, target);
    fleet.observe(effective.targets, statusPage);
    metrics.open.setContext({ shard: formatShard(fleet.shard), placements: fleet.placements(effective.targets), ...(statusPage === undefined ? {} : { statusPage }) });
    observeSchedules(metrics, effective.targets);
  };
  const applyTargets = (): void => {
    const before = new Set(effective.targets.map((t) => t.name));
    effective = { ...config, targets: fleet.targets(config) };
    observeTargets();
    if (scheduler === undefined) return;
    scheduler.reload(effective);
    const added = new Set(effective.targets.map((t) => t.name).filter((n) => !before.has(n)));
    if (added.size > 0) restoreGauges(store, metrics, effective, added);
  };
  try {
    await fleet.start();
    effective = { ...config, targets: fleet.targets(config) };
    observeTargets();
    const probe = withSilences(opts.probe ?? opts.createProbe({ store, logger, config: () => config, readKeyFile: (f) => keyFiles.read(f) }), () => activeSilences(store, config, clock.now(), logger), () => clock.now());
    const onRun = async (run: ProbeRun): Promise<void> => {
      fleet.noteCycle(Date.parse(run.finishedAt));
      await opts.onRun?.(run);
    };
    scheduler = createScheduler({
      config: effective, probe, store, metrics, logger, clock, onRun,
      ...(opts.abortGraceMs === undefined ? {} : { abortGraceMs: opts.abortGraceMs }),
      ...(opts.random === undefined ? {} : { random: opts.random }),
    });
    restoreGauges(store, metrics, effective);
    const sched = scheduler;
    server = await startServiceServer({
      host: config.listen.host,
      port: config.listen.port,
      registry,
      store,
      health: () => sched.health(),
      targets: () => effective.targets,
      apiTargets: () => fleet.apiTargets(effective.targets, sched.states()),
      extraHtml: () => renderFleetSection(fleet.status(effective.targets)),
      silences: () => activeSilences(store, config, clock.now(), logger),
      logger,
      now: () => clock.now(),
      ...(config.allowedHosts !== undefined ? { allowedHosts: config.allowedHosts } : {}),
    });
  } catch (err) {
    fleet.stop();
    store.close();
    throw err;
  }
  const sched = scheduler;

  let pruneTimer: unknown;
  const prune = (): void => {
    try {
      const gone = store.prune(clock.now(), config.store.retentionMs);
      if (gone.requests + gone.plantings > 0) logger.info(gone, 'pruned requests and plantings past retention');
    } catch (err) {
      logger.error({ err }, 'prune failed');
    }
    pruneTimer = clock.setTimeout(prune, PRUNE_EVERY_MS);
  };
  prune();
  sched.start();
  logger.info({ url: server.url, store: store.path, shard: `${fleet.shard.index}/${fleet.shard.count}`, targets: effective.targets.map((t) => t.name) }, 'kvcanary service started');

  let stopping: Promise<void> | undefined;
  return {
    url: server.url,
    store,
    registry,
    metrics,
    scheduler: sched,
    logger,
    fleet,
    stop() {
      stopping ??= (async () => {
        clock.clearTimeout(pruneTimer);
        fleet.stop();
        try {
          await sched.stop();
        } finally {
          await server.close();
          store.close();
          logger.info('kvcanary service stopped');
          logger.flush?.();
        }
      })();
      return stopping;
    },
    reload(next) {
      if (next.listen.host !== config.listen.host || next.listen.port !== config.listen.port) {
        logger.warn({ listen: `${config.listen.host}:${config.listen.port}` }, 'listen changed: takes effect on restart; still serving the old address');
      }
      if (next.store.path !== config.store.path) {
        logger.warn({ store: config.store.path }, 'store.path changed: takes effect on restart; still writing the old file');
      }
      secrets = configSecrets(next, env, keyFiles);
      if (ownLogger) logger.level = next.log.level;
      config = next;
      applyTargets();
      fleet.reconfigure(next).catch((err: unknown) => logger.error({ err }, 'discovery reconfigure failed'));
      logger.info({ targets: effective.targets.map((t) => t.name) }, 'config reloaded');
    },
  };
}

/** Last-run gauges from the store for configured targets (after a reload: only for the targets it added). */
function restoreGauges(store: Store, metrics: Metrics, config: ServiceConfig, only?: ReadonlySet<string>): void {
  const configured = new Map(config.targets.map((t) => [t.name, t]));
  for (const t of store.latestPerTarget()) {
    const target = configured.get(t.target);
    if (target === undefined || (only !== undefined && !only.has(t.target))) continue;
    for (const s of t.scenarios) {
      if (!target.scenarios.includes(s.scenario)) continue;
      seedScenarioState(metrics, { target: t.target, scenario: s.scenario, outcome: s.outcome, at: s.at, inconclusiveStreak: s.inconclusiveStreak, findingCounts: s.findingCounts, runId: s.runId });
    }
    metrics.targetUp.set({ target: t.target }, t.lastRun.up ? 1 : 0);
    if (t.lastRun.capacity.contextTokens !== undefined) metrics.contextLimit.set({ target: t.target }, t.lastRun.capacity.contextTokens);
    if (t.lastRun.capacity.poolTokens !== undefined) metrics.poolCapacity.set({ target: t.target }, t.lastRun.capacity.poolTokens);
  }
}

/** The config's silences and the store's (kvcanary ack) that have not expired. A store error is logged, not fatal. */
function activeSilences(store: Store, config: ServiceConfig, now: number, logger: Logger): Silence[] {
  let stored: Silence[] = [];
  try {
    stored = store.silences();
  } catch (err) {
    logger.error({ err }, 'could not read silences from the store');
  }
  return [...(config.silences ?? []), ...stored].filter((s) => isActive(s, now));
}
