/**
 * The silences `kvcanary run` applies: the `silences:` of its `--config` and those acknowledged in the store it
 * writes to (`kvcanary ack --store FILE`), active now. A run is named by the endpoint it probes: the config
 * target whose base URL it probes (with --config), else `HOST:PORT` of its URL (endpointName). A silence
 * matches it by that name or by the name of any config target at the same base URL, so one silence holds for
 * one endpoint under `serve` and in CI alike, and never for every endpoint any run probes. (Discovered targets
 * are named `NAME/HOST:PORT`: a pattern `*HOST:PORT` matches both.)
 */
import { parseBaseUrl } from '../probe/target/base-url.js';
import type { ServiceConfig } from '../service/config.js';
import { isActive, type Silence } from '../service/silences.js';
import type { Store } from '../service/store.js';

export interface RunSilences {
  silences: Silence[];
  /** The names the run's target is matched as: its own, then the config's targets at the same base URL. */
  names: string[];
}

function rootOf(baseUrl: string): string | undefined {
  try {
    return parseBaseUrl(baseUrl).root;
  } catch {
    return undefined;
  }
}

/**
 * The name a run without a config target goes by: `HOST:PORT` of its URL (the port explicit, an IPv6 host in
 * brackets), followed by the path prefix when the root has one (`gw.example:443/llama`). What serve calls a
 * discovered replica after its entry's name (`glm/HOST:PORT`).
 */
export function endpointName(baseUrl: string): string {
  const root = new URL(parseBaseUrl(baseUrl).root);
  const port = root.port !== '' ? root.port : root.protocol === 'https:' ? '443' : '80';
  const prefix = root.pathname.replace(/\/+$/, '');
  return `${root.hostname}:${port}${prefix}`;
}

/** The config target whose base URL is the one the run probes, if any: the run takes its name. */
export function configTargetAt(config: ServiceConfig | undefined, baseUrl: string): string | undefined {
  const root = rootOf(baseUrl);
  return (config?.targets ?? []).find((t) => t.baseUrl !== '' && root !== undefined && rootOf(t.baseUrl) === root)?.name;
}

export function runSilences(opts: { config?: ServiceConfig; store: Pick<Store, 'silences'>; target: { name: string; baseUrl: string }; now: number }): RunSilences {
  const root = rootOf(opts.target.baseUrl);
  const same = (opts.config?.targets ?? []).filter((t) => t.baseUrl !== '' && root !== undefined && rootOf(t.baseUrl) === root);
  const silences = [...(opts.config?.silences ?? []), ...opts.store.silences()].filter((s) => isActive(s, opts.now));
  return { silences, names: [...new Set([opts.target.name, ...same.map((t) => t.name)])] };
}
