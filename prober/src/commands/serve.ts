/**
 * `kvcanary serve [--config FILE] [--listen HOST:PORT]`: the scheduled prober. Without a config it runs
 * the embedded default: the bundled engine twice (incident and remediated presets, scaled down), probed
 * on a short schedule, so a newcomer sees a finding on one and none on the other within a minute.
 *
 * The first stdout line holds the status/metrics URL; each finding is printed on its own stdout line as it
 * arrives (kind, target, severity). Logs (pino) go to stderr. SIGTERM/SIGINT drain in-flight probes and
 * exit 0; SIGHUP reloads the config file (a bad new config keeps the old one and says so).
 */
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { ConfigError, configSecrets, formatDuration, loadConfig, parseConfig, type ServiceConfig } from '../service/config.js';
import { DEFAULT_SHUTDOWN_GRACE_MS } from '../bounds.js';
import { RunCut } from '../probe/run-cut.js';
import { linkSignals } from '../probe/linked-signal.js';
import { forTerminal, oneLine } from '../terminal-text.js';
import { createLogger } from '../service/logger.js';
import { createProbe } from '../probe/probe.js';
import type { ProbeRun } from '../probe/result.js';
import { createScanner } from '../probe/scanner.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import { InstallationError } from '../installation/installation-error.js';
import { installationKey, markerKeyId, MARKER_KEY_FILE_ENV, type InstallationKey } from '../installation/marker-key.js';
import { createInstallationRegistry, persistPlantings, recentMarkersFrom } from '../installation/registry.js';
import { createKeyFiles } from '../service/key-files.js';
import { createService, type ProbeDeps } from '../service/service.js';
import { parseArgsMessage, UsageError } from './usage.js';
import { MAX_PORT } from '../bounds.js';
import { shownString } from '../shown-value.js';
import { ShardError, shardFromArgs, type Shard } from '../service/shard.js';
import { useBaselineWasmCompiler } from '../service/wasm-compiler.js';

const USAGE = `usage: kvcanary serve [--config FILE] [--listen HOST:PORT] [--shard INDEX/COUNT]

  --config FILE       YAML config of targets, schedule, budgets (docs/configuration.md "Reference");
                      without it: the embedded demo against two bundled engines
  --listen HOST:PORT  where /metrics, /healthz and the status page are served
                      (default 127.0.0.1:9464; port 0 picks a free one)
  --shard INDEX/COUNT probe only the targets rendezvous hashing gives shard INDEX (0-based) of COUNT;
                      also KVCANARY_SHARD=INDEX/COUNT, or KVCANARY_SHARD_INDEX + KVCANARY_SHARD_COUNT.
                      A store.path containing {shard} gets INDEX there

environment:
  ${MARKER_KEY_FILE_ENV}  the installation's marker key (e.g. a Secret mounted into every shard;
                      \`kvcanary key new\`): read only, serve refuses to start without it. Unset: the key in
                      KVCANARY_HOME (default ~/.config/kvcanary), created on first use`;

export async function serveMain(args: string[]): Promise<number> {
  let v;
  let shard: Shard | undefined;
  try {
    v = parseArgs({ args, strict: true, allowPositionals: false, options: {
      config: { type: 'string' }, listen: { type: 'string' }, shard: { type: 'string' }, help: { type: 'boolean', short: 'h', default: false },
    } }).values;
    if (v.listen !== undefined && (!/^[^:\s]+:\d{1,5}$/.test(v.listen) || Number(v.listen.slice(v.listen.lastIndexOf(':') + 1)) > MAX_PORT)) {
      throw new UsageError(`--listen: expected HOST:PORT with a port from 0 to ${MAX_PORT}, got ${shownString(v.listen)}`);
    }
    shard = shardFromArgs(v.shard, process.env);
  } catch (err) {
    if (err instanceof ShardError) {
      process.stderr.write(`kvcanary serve: ${err.message}\n`);
      return EXIT.usage;
    }
    process.stderr.write(`kvcanary serve: ${err instanceof UsageError ? err.message : parseArgsMessage(err)}\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  if (v.help) {
    process.stderr.write(USAGE + '\n');
    return EXIT.pass;
  }
  // The installation's marker key, before anything starts: a configured key (KVCANARY_MARKER_KEY_FILE) that
  // cannot be read stops serve here (64), never replaced by a key of this pod's own.
  let markerKey: InstallationKey;
  try {
    markerKey = installationKey(process.env);
    recentMarkersFrom(process.env);
  } catch (err) {
    if (err instanceof InstallationError) {
      process.stderr.write(`kvcanary serve: ${oneLine(err.message)}\n`);
      return EXIT.usage;
    }
    throw err;
  }

  const engines: Array<{ close(): Promise<void> }> = [];
  let config: ServiceConfig;
  try {
    if (v.config !== undefined) {
      config = await loadConfig(v.config, { knownScenarios: SCENARIO_NAMES });
      useBaselineWasmCompiler();
    } else {
      const demo = await embeddedDemo();
      engines.push(...demo.engines);
      config = parseConfig(demo.yaml, { knownScenarios: SCENARIO_NAMES });
    }
    if (v.listen !== undefined) {
      const i = v.listen.lastIndexOf(':');
      config = { ...config, listen: { host: v.listen.slice(0, i), port: Number(v.listen.slice(i + 1)) } };
    }
    if (config.store.path.includes('{shard}')) {
      config = { ...config, store: { ...config.store, path: config.store.path.replaceAll('{shard}', String(shard?.index ?? 0)) } };
    }
  } catch (err) {
    await Promise.all(engines.map((e) => e.close()));
    if (err instanceof ConfigError) {
      process.stderr.write(err.message + '\n');
      return EXIT.usage;
    }
    throw err;
  }

  // The logger scrubs every configured secret (keys, secret header values, URL credentials) from each line.
  let current = config;
  const keyFiles = createKeyFiles();
  const logger = createLogger({ level: config.log.level, destination: process.stderr, secrets: () => configSecrets(current, process.env, keyFiles) });
  // The key id, never the key: every shard of one installation logs the same one.
  logger.info({ markerKey: { file: markerKey.file, id: markerKeyId(markerKey.key), source: markerKey.configured ? MARKER_KEY_FILE_ENV : 'installation home' } }, 'marker key');
  if (shard !== undefined && shard.count > 1 && !markerKey.configured) {
    logger.warn({ markerKey: { file: markerKey.file } }, `shard ${shard.index}/${shard.count} uses the key of its own installation home: shards of one installation need one key (${MARKER_KEY_FILE_ENV}, docs/deployment.md)`);
  }
  // SIGTERM: stop starting work at once; after the grace, abort what is in flight (recorded inconclusive).
  const shutdown = new AbortController();
  let service: Awaited<ReturnType<typeof createService>>;
  try {
    service = await createService({
      config,
      logger,
      createProbe: ({ store, logger: log, config: live, readKeyFile }) => {
        // The installation key: markers of any earlier run (or `kvcanary run`) decrypt and are attributed.
        const registry = createInstallationRegistry({ store, since: Date.now() - live().store.retentionMs, key: markerKey.key });
        const probe = createProbe({
          registry,
          scanner: createScanner(registry),
          onMarkers: persistPlantings(store),
          readKeyFile,
          progress: (m) => log.debug({ progress: m }, 'probe progress'),
        });
        return (req) => {
          // Linked by listeners, released when the probe ends (linked-signal.ts says why not AbortSignal.any).
          const link = linkSignals([req.signal, shutdown.signal]);
          return probe({ ...req, signal: link.signal }).finally(link.dispose);
        };
      },
      onRun: (run) => printFindings(run),
      ...(shard === undefined ? {} : { shard }),
    } satisfies Parameters<typeof createService>[0] & { createProbe: (d: ProbeDeps) => unknown });
  } catch (err) {
    await Promise.all(engines.map((e) => e.close()));
    throw err;
  }
  process.stdout.write(`kvcanary serving ${service.url} (metrics ${service.url}metrics)\n`);

  return await new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      const graceMs = current.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS;
      logger.info({ signal, graceMs }, 'stopping: no new probes; in-flight probes are aborted after the shutdown grace');
      const cut = setTimeout(() => {
        logger.warn({ graceMs }, 'shutdown grace over: aborting in-flight probes (recorded inconclusive)');
        shutdown.abort(new RunCut('deadline', `cut short by shutdown (${signal}) after the ${formatDuration(graceMs)} shutdown grace`));
      }, graceMs);
      void service
        .stop()
        .finally(() => clearTimeout(cut))
        .then(() => Promise.all(engines.map((e) => e.close())))
        .then(() => resolve(EXIT.pass), (err) => {
          logger.error({ err }, 'shutdown failed');
          resolve(EXIT.internal);
        });
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
    process.on('SIGHUP', () => {
      if (v.config === undefined) {
        logger.warn('SIGHUP: no config file to reload (embedded demo)');
        return;
      }
      loadConfig(v.config, { knownScenarios: SCENARIO_NAMES }).then(
        (loaded) => {
          const next = { ...loaded, store: { ...loaded.store, path: loaded.store.path.replaceAll('{shard}', String(shard?.index ?? 0)) } };
          service.reload(next);
          current = next;
          logger.info({ targets: next.targets.map((t) => t.name) }, 'config reloaded');
        },
        // The new file's problems: field paths and values are already described, not echoed (config.ts); the
        // lines are kept free of control characters whatever else got in.
        (err) => logger.error({ problems: forTerminal(err instanceof ConfigError ? err.message : String(err)).split('\n').slice(0, 50) }, 'config reload failed: keeping the old config'),
      );
    });
  });
}

function printFindings(run: ProbeRun): void {
  for (const s of run.scenarios) {
    for (const f of s.findings) {
      process.stdout.write(oneLine(`FINDING ${f.kind} target=${run.target} severity=${f.severity} scenario=${f.scenario}${f.evidence.match !== undefined ? ` match=${JSON.stringify(f.evidence.match.slice(0, 60))}` : ''}${f.acknowledged !== undefined ? ' acknowledged' : ''}`) + '\n');
    }
  }
}

/** Two bundled engines (scaled incident and remediated presets) and a config probing both. */
async function embeddedDemo(): Promise<{ engines: Array<{ close(): Promise<void> }>; yaml: string }> {
  const { startEngine } = await import('../../../engine-under-test/src/start.js');
  const incident = await startEngine({ preset: 'incident', scale: 64, port: 0 });
  const remediated = await startEngine({ preset: 'remediated', scale: 64, port: 0 });
  const yaml = `# embedded demo: the bundled engine, incident and remediated presets at 1/64 scale
listen: 127.0.0.1:9464
store: { path: ./.kvcanary/demo.sqlite, retention: 1d }
schedule: { interval: 30s, timeout: 25s, jitter: 2s, scenarios: every_cycle }   # local engines: no cost tiers
budget: { tokens_per_hour: 50000000 }
concurrency: { global: 2, per_target: 1 }
targets:
  - name: engine-incident
    base_url: ${incident.url}
  - name: engine-remediated
    base_url: ${remediated.url}
`;
  return { engines: [incident, remediated], yaml };
}
