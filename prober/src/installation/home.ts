/**
 * Where an installation lives: `$KVCANARY_HOME`, else `$XDG_CONFIG_HOME/kvcanary`, else `~/.config/kvcanary`.
 * It holds the marker key (`marker.key`, unless KVCANARY_MARKER_KEY_FILE names one elsewhere: marker-key.ts)
 * and `run`'s store (`runs.sqlite`, unless `run --store FILE`).
 */
import { homedir } from 'node:os';
import path from 'node:path';

export type Env = Record<string, string | undefined>;

export const MARKER_KEY_FILE = 'marker.key';
export const RUN_STORE_FILE = 'runs.sqlite';

/** `$KVCANARY_HOME`, else `$XDG_CONFIG_HOME/kvcanary`, else `~/.config/kvcanary`. */
export function installationHome(env: Env = process.env): string {
  if (env.KVCANARY_HOME !== undefined && env.KVCANARY_HOME !== '') return path.resolve(env.KVCANARY_HOME);
  const config = env.XDG_CONFIG_HOME !== undefined && env.XDG_CONFIG_HOME !== '' ? env.XDG_CONFIG_HOME : path.join(homedir(), '.config');
  return path.resolve(config, 'kvcanary');
}

/** The marker key under the installation home (the key created on first use when none is configured). */
export function markerKeyPath(env: Env = process.env): string {
  return path.join(installationHome(env), MARKER_KEY_FILE);
}

export function runStorePath(env: Env = process.env): string {
  return path.join(installationHome(env), RUN_STORE_FILE);
}
