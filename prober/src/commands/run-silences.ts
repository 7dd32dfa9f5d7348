/**
 * The silences `kvcanary run` applies: the `silences:` of its `--config` and those acknowledged in the store it
 * writes to (`kvcanary ack --store FILE`), active now. A run's target is recorded as `cli`; a silence matches it
 * by that name, or by the name of any config target with the base URL the run probes, so the silences written
 * for `serve` hold for the same endpoint under `run`. (Discovered targets have no fixed base URL: match them
 * with `cli` or a pattern.)
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

export function runSilences(opts: { config?: ServiceConfig; store: Pick<Store, 'silences'>; target: { name: string; baseUrl: string }; now: number }): RunSilences {
  const root = rootOf(opts.target.baseUrl);
  const same = (opts.config?.targets ?? []).filter((t) => t.baseUrl !== '' && root !== undefined && rootOf(t.baseUrl) === root);
  const silences = [...(opts.config?.silences ?? []), ...opts.store.silences()].filter((s) => isActive(s, opts.now));
  return { silences, names: [...new Set([opts.target.name, ...same.map((t) => t.name)])] };
}
