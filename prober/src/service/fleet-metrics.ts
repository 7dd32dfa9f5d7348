/**
 * Fleet metrics: which shard this replica is, when it last finished a cycle, what discovery found and how
 * often it failed, and one info series per probed target carrying the labels discovery gave it.
 *
 * Discovered labels live on `kvcanary_target_info{target, source, shard, status_page, ...labels}` (value 1), not
 * on the probe series: join them in PromQL (`* on (target) group_left(zone) kvcanary_target_info`). The one
 * exception is kvcanary_open_findings (open-findings.ts), the series the finding alerts fire on. The info
 * metric's label names follow what sources report; when the set of names changes it is re-registered.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

export interface InfoRow {
  target: string;
  source: string;
  labels: Record<string, string>;
  /** The target's section on its shard's status page (external_url), the `status_page` label. */
  statusPage?: string;
}

export interface FleetMetrics {
  shardInfo: Gauge<'shard'>;
  shardTargets: Gauge<'shard'>;
  shardLastCycle: Gauge<'shard'>;
  shardLongestInterval: Gauge<'shard'>;
  discoveryErrors: Counter<'source'>;
  discoveredTargets: Gauge<'source'>;
  /** Replaces every kvcanary_target_info series. */
  setTargetInfo(shard: string, rows: readonly InfoRow[]): void;
}

const RESERVED = new Set(['target', 'source', 'shard', 'status_page', 'job', 'instance']);
const MAX_INFO_LABELS = 32;

export function createFleetMetrics(registry: Registry): FleetMetrics {
  const registers = [registry];
  let info: Gauge<string> | undefined;
  let infoNames = '';
  return {
    shardInfo: new Gauge({ name: 'kvcanary_shard_info', help: 'Always 1: this replica\'s shard as INDEX/COUNT.', labelNames: ['shard'], registers }),
    shardTargets: new Gauge({ name: 'kvcanary_shard_targets', help: 'Targets this shard probes.', labelNames: ['shard'], registers }),
    shardLastCycle: new Gauge({ name: 'kvcanary_shard_last_cycle_timestamp_seconds', help: 'Unix time this shard last finished a probe cycle of any target (its start time until the first).', labelNames: ['shard'], registers }),
    shardLongestInterval: new Gauge({ name: 'kvcanary_shard_longest_interval_seconds', help: 'Longest schedule interval among the targets this shard probes (0 with none).', labelNames: ['shard'], registers }),
    discoveryErrors: new Counter({ name: 'kvcanary_discovery_errors_total', help: 'Failed resolves of a discovery source (the last good list is kept).', labelNames: ['source'], registers }),
    discoveredTargets: new Gauge({ name: 'kvcanary_discovered_targets', help: 'Addresses a discovery source currently lists (before sharding).', labelNames: ['source'], registers }),
    setTargetInfo(shard, rows) {
      const extra = [...new Set(rows.flatMap((r) => Object.keys(r.labels)))].filter((k) => !RESERVED.has(k)).sort().slice(0, MAX_INFO_LABELS);
      const names = ['target', 'source', 'shard', 'status_page', ...extra];
      if (info === undefined || infoNames !== names.join(',')) {
        if (info !== undefined) registry.removeSingleMetric('kvcanary_target_info');
        info = new Gauge({ name: 'kvcanary_target_info', help: 'Always 1 per probed target: its discovery source, shard, status page (external_url) and the labels discovery gave it.', labelNames: names, registers });
        infoNames = names.join(',');
      }
      info.reset();
      for (const r of rows) {
        const labels: Record<string, string> = { target: r.target, source: r.source, shard, ...(r.statusPage === undefined ? {} : { status_page: r.statusPage }) };
        for (const k of extra) labels[k] = r.labels[k] ?? '';
        info.set(labels, 1);
      }
    },
  };
}
