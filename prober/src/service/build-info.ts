/**
 * `kvcanary_build_info{version, node}` = 1, and prom-client's default process and Node.js metrics
 * (process_cpu_seconds_total, process_resident_memory_bytes, nodejs_eventloop_lag_seconds, ...) on the
 * service's registry. Registering twice on one registry is a no-op.
 */
import { collectDefaultMetrics, Gauge, type Registry } from 'prom-client';
import { kvcanaryVersion } from '../version.js';

export function registerBuildInfo(registry: Registry): void {
  if (registry.getSingleMetric('kvcanary_build_info') !== undefined) return;
  const info = new Gauge({ name: 'kvcanary_build_info', help: 'kvcanary build information (always 1)', labelNames: ['version', 'node'], registers: [registry] });
  info.set({ version: kvcanaryVersion(), node: process.version }, 1);
  collectDefaultMetrics({ register: registry });
}
