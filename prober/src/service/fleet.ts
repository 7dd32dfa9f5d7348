/**
 * Fleet mode around the scheduler: the targets this replica probes are the config's static targets plus
 * what discovery finds, minus those another shard owns (rendezvous hashing, shard.ts). Whenever that set
 * changes, the service hands the scheduler a config with the new list; the scheduler adds loops for new
 * targets and stops removed ones at their next cycle boundary (an in-flight cycle finishes and is recorded).
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ServiceConfig, TargetConfig } from './config.js';
import { createDiscovery, type Discovery, type SourceStatus } from './discovery/manager.js';
import type { DnsResolver } from './discovery/sources.js';
import { createFleetMetrics, type FleetMetrics } from './fleet-metrics.js';
import type { Clock } from './scheduler.js';
import type { LoopState } from './server.js';
import { formatShard, owns, SINGLE_SHARD, type Shard } from './shard.js';

export interface FleetTarget {
  name: string;
  baseUrl: string;
  shard: string;
  /** The last cycle's own outcome (`partial` for a cycle of cheap checks that passed). */
  lastOutcome: string | null;
  /** The target's standing by the overall rule: `pass` only while its behavioural scenarios passed within their intervals. */
  verdict: string;
  /** Why the standing is not a pass. */
  verdictReasons: string[];
}

export interface FleetStatus {
  shard: string;
  targets: number;
  sources: SourceStatus[];
}

export interface Fleet {
  readonly shard: Shard;
  readonly metrics: FleetMetrics;
  /** Resolves discovery once; later changes arrive through onChange. */
  start(): Promise<void>;
  /** The targets this replica probes now. */
  targets(config: ServiceConfig): TargetConfig[];
  /** New config (SIGHUP): discovery entries are replaced; unchanged ones keep their lists. */
  reconfigure(config: ServiceConfig): Promise<void>;
  refreshAll(): Promise<void>;
  /** A cycle finished (the shard-stalled alert watches this). */
  noteCycle(at: number): void;
  /**
   * Updates the shard gauges and the target info metric for the targets now probed; `statusPage` gives each
   * target's page URL (external_url) for its `status_page` label.
   */
  observe(targets: readonly TargetConfig[], statusPage?: (target: string) => string | undefined): void;
  /** Each probed target's discovery source and labels (a configured target: its own name, no labels). */
  placements(targets: readonly TargetConfig[]): Map<string, { source: string; labels: Record<string, string> }>;
  apiTargets(targets: readonly TargetConfig[], loops: readonly LoopState[]): FleetTarget[];
  status(targets: readonly TargetConfig[]): FleetStatus;
  stop(): void;
}

export interface FleetOptions {
  config: ServiceConfig;
  shard?: Shard;
  registry: Registry;
  logger: Logger;
  clock: Clock;
  onChange: () => void;
  dns?: DnsResolver;
}

export function createFleet(opts: FleetOptions): Fleet {
  const shard = opts.shard ?? SINGLE_SHARD;
  const label = formatShard(shard);
  const metrics = createFleetMetrics(opts.registry);
  const discovery: Discovery = createDiscovery({
    entries: opts.config.discovery ?? [],
    logger: opts.logger,
    clock: opts.clock,
    onChange: opts.onChange,
    onError: (source) => metrics.discoveryErrors.inc({ source }),
    ...(opts.dns === undefined ? {} : { dns: opts.dns }),
  });
  const sourceOf = new Map<string, { source: string; labels: Record<string, string> }>();

  metrics.shardInfo.set({ shard: label }, 1);
  metrics.shardLastCycle.set({ shard: label }, opts.clock.now() / 1000);
  const initSources = (c: ServiceConfig): void => {
    metrics.discoveredTargets.reset();
    for (const e of c.discovery ?? []) {
      metrics.discoveryErrors.inc({ source: e.template.name }, 0);
      metrics.discoveredTargets.set({ source: e.template.name }, 0);
    }
  };
  initSources(opts.config);

  return {
    shard,
    metrics,
    start: () => discovery.start(),
    targets(config) {
      const found = discovery.targets();
      sourceOf.clear();
      for (const d of found) sourceOf.set(d.target.name, { source: d.source, labels: d.labels });
      const all = [...config.targets, ...found.map((d) => d.target)];
      const seen = new Set<string>();
      return all.filter((t) => (seen.has(t.name) ? false : (seen.add(t.name), owns(shard, t.name))));
    },
    async reconfigure(config) {
      initSources(config);
      await discovery.reconfigure(config.discovery ?? []);
    },
    refreshAll: () => discovery.refreshAll(),
    noteCycle(at) {
      metrics.shardLastCycle.set({ shard: label }, at / 1000);
    },
    observe(targets, statusPage) {
      metrics.shardTargets.set({ shard: label }, targets.length);
      metrics.shardLongestInterval.set({ shard: label }, Math.max(0, ...targets.map((t) => t.schedule.intervalMs)) / 1000);
      for (const s of discovery.status()) metrics.discoveredTargets.set({ source: s.source }, s.addresses);
      metrics.setTargetInfo(label, targets.map((t) => ({
        target: t.name, source: sourceOf.get(t.name)?.source ?? t.name, labels: sourceOf.get(t.name)?.labels ?? {},
        ...(statusPage?.(t.name) === undefined ? {} : { statusPage: statusPage(t.name)! }),
      })));
    },
    placements(targets) {
      return new Map(targets.map((t) => [t.name, { source: sourceOf.get(t.name)?.source ?? t.name, labels: sourceOf.get(t.name)?.labels ?? {} }]));
    },
    apiTargets(targets, loops) {
      const byName = new Map(loops.map((l) => [l.target, l]));
      return targets.map((t) => {
        const l = byName.get(t.name);
        return {
          name: t.name, baseUrl: t.baseUrl, shard: label, lastOutcome: l?.lastOutcome ?? null,
          verdict: l?.verdict?.outcome ?? 'none', verdictReasons: l?.verdict?.reasons ?? ['no completed run yet'],
        };
      });
    },
    status(targets) {
      return { shard: label, targets: targets.length, sources: discovery.status() };
    },
    stop: () => discovery.stop(),
  };
}
