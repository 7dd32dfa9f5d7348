/**
 * startEngine: configuration -> engine (single node, or the disaggregated router and its two worker
 * threads) -> metrics -> HTTP server listening on 127.0.0.1. What the CLI, the tests and the prober's own
 * tests use to get a running engine.
 */
import type { AddressInfo } from 'node:net';
import type { Clock } from './clock.js';
import { resolveEngineConfig, type EngineConfig, type EngineOptions } from './config.js';
import type { Engine } from './engine.js';
import { createEngineMetrics } from './metrics.js';
import { createEngineServer } from './server.js';
import { createSingleNodeEngine } from './single-node.js';
import { createDisaggregatedEngine } from './disagg/router.js';

export interface StartEngineOptions extends EngineOptions {
  /** @default '127.0.0.1' */
  host?: string;
  /** 0 picks a free port. @default 0 */
  port?: number;
  clock?: Clock;
  /** Internal-error log lines. @default stderr */
  log?: (line: string) => void;
}

export interface RunningEngine {
  /** e.g. http://127.0.0.1:41234 (no trailing slash). */
  url: string;
  host: string;
  port: number;
  config: EngineConfig;
  engine: Engine;
  /** Stops accepting, drops open connections, aborts every request. */
  close(): Promise<void>;
}

export async function startEngine(options: StartEngineOptions = {}): Promise<RunningEngine> {
  const config = resolveEngineConfig(options);
  const host = options.host ?? '127.0.0.1';
  const deps = {
    ...(options.clock !== undefined ? { clock: options.clock } : {}),
    ...(options.log !== undefined ? { log: options.log } : {}),
  };
  const engine: Engine = config.mode === 'single' ? createSingleNodeEngine(config, deps) : await createDisaggregatedEngine(config, deps);
  const metrics = createEngineMetrics(engine);
  const server = createEngineServer({
    engine,
    metrics,
    maxBodyBytes: config.maxBodyBytes,
    defaultSeed: config.defaultSeed,
    ...(options.clock !== undefined ? { clock: options.clock } : {}),
    ...(options.log !== undefined ? { log: options.log } : {}),
  });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    await engine.close();
    throw err;
  }
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${port}`,
    host,
    port,
    config,
    engine,
    close: () =>
      (closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        await engine.close();
        server.closeAllConnections();
        await closed;
      })()),
  };
}
