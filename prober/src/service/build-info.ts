/**
 * `kvcanary_build_info{version, node}` = 1, and prom-client's default process and Node.js metrics
 * (process_cpu_seconds_total, process_resident_memory_bytes, nodejs_eventloop_lag_seconds, ...) on the
 * service's registry. Registering twice on one registry is a no-op.
 *
 * Three of prom-client's defaults are gauges named `*_total` (nodejs_active_handles_total,
 * nodejs_active_requests_total, nodejs_active_resources_total), which `promtool check metrics` rejects
 * ("non-counter metrics should not have _total suffix"): they are not registered. Each is the sum of the
 * per-type gauge kept beside it (nodejs_active_handles{type}, nodejs_active_requests{type},
 * nodejs_active_resources{type}): `sum(nodejs_active_handles)` is the same number.
 */
import { collectDefaultMetrics, Gauge, type Registry } from 'prom-client';
import { kvcanaryVersion } from '../version.js';

export function registerBuildInfo(registry: Registry): void {
  if (registry.getSingleMetric('kvcanary_build_info') !== undefined) return;
  const info = new Gauge({ name: 'kvcanary_build_info', help: 'kvcanary build information (always 1)', labelNames: ['version', 'node'], registers: [registry] });
  info.set({ version: kvcanaryVersion(), node: process.version }, 1);
  collectDefaultMetrics({ register: registry });
  for (const name of GAUGES_NAMED_TOTAL) registry.removeSingleMetric(name);
}

/** prom-client default gauges whose names end in _total (promtool lint fails them); their per-type gauges stay. */
export const GAUGES_NAMED_TOTAL = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'] as const;
