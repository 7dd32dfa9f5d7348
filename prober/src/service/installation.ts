/**
 * The installation: what every `kvcanary run` and `serve` of one user shares so that any of them
 * recognises and attributes any marker another planted.
 *
 * - The marker key: 16 random bytes (AES-128, see probe/markers.ts) in `marker.key` under the installation
 *   home, `$KVCANARY_HOME`, else `$XDG_CONFIG_HOME/kvcanary`, else `~/.config/kvcanary`. Created on first use
 *   (directory 0700, file 0600, written to a temporary file and linked into place so two processes starting
 *   at once agree on one key); an existing file readable by others is tightened to 0600. It is read here and
 *   handed to the marker cipher only: never logged, never in metrics, evidence or errors. Losing it means
 *   earlier markers are no longer recognised (they are then scanned like another installation's); copying it
 *   to another machine makes that machine part of the installation.
 * - `run`'s store: `runs.sqlite` under the same home (or `run --store FILE`, e.g. the file `serve` writes, to
 *   share plantings with it), holding one planting row per request and each run's record.
 * - The fragment index bound: `KVCANARY_RECENT_MARKERS` (default 50000, about 130 bytes each: ~6.5 MB,
 *   `npm run bench:marker-memory`), the most recent markers whose fragments (12+ characters) are
 *   recognised; whole markers need no index.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { DEFAULT_MAX_RECENT_MARKERS, createMarkerRegistry, plantingRows, type MarkerEntry, type MarkerRegistry } from '../probe/marker-registry.js';
import { MARKER_KEY_BYTES } from '../probe/markers.js';
import type { Store } from './store.js';

export const MARKER_KEY_FILE = 'marker.key';
export const RUN_STORE_FILE = 'runs.sqlite';
export const RECENT_MARKERS_ENV = 'KVCANARY_RECENT_MARKERS';

type Env = Record<string, string | undefined>;

export class InstallationError extends Error {
  override readonly name = 'InstallationError';
}

/** `$KVCANARY_HOME`, else `$XDG_CONFIG_HOME/kvcanary`, else `~/.config/kvcanary`. */
export function installationHome(env: Env = process.env): string {
  if (env.KVCANARY_HOME !== undefined && env.KVCANARY_HOME !== '') return path.resolve(env.KVCANARY_HOME);
  const config = env.XDG_CONFIG_HOME !== undefined && env.XDG_CONFIG_HOME !== '' ? env.XDG_CONFIG_HOME : path.join(homedir(), '.config');
  return path.resolve(config, 'kvcanary');
}

export function markerKeyPath(env: Env = process.env): string {
  return path.join(installationHome(env), MARKER_KEY_FILE);
}

export function runStorePath(env: Env = process.env): string {
  return path.join(installationHome(env), RUN_STORE_FILE);
}

/** The fragment index bound from `KVCANARY_RECENT_MARKERS`, or the default. */
export function recentMarkersFrom(env: Env = process.env): number {
  const raw = env[RECENT_MARKERS_ENV];
  if (raw === undefined || raw.trim() === '') return DEFAULT_MAX_RECENT_MARKERS;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 10_000_000) {
    throw new InstallationError(`${RECENT_MARKERS_ENV}: expected an integer from 1 to 10000000 (markers kept for fragment matching), got '${raw.slice(0, 40)}'`);
  }
  return n;
}

/** The installation's marker key, created (0600) on first use. Errors name the file, never its content. */
export function loadMarkerKey(file: string): Uint8Array {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new InstallationError(`cannot read marker key file ${file}: ${(err as Error).message}`);
    const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    writeFileSync(tmp, randomBytes(MARKER_KEY_BYTES).toString('hex') + '\n', { mode: 0o600, flag: 'wx' });
    try {
      linkSync(tmp, file); // atomic; fails if another process created the key first, whose key then wins
    } catch (linkErr) {
      if ((linkErr as NodeJS.ErrnoException).code !== 'EEXIST') throw new InstallationError(`cannot create marker key file ${file}: ${(linkErr as Error).message}`);
    } finally {
      unlinkSync(tmp);
    }
    text = readFileSync(file, 'utf8');
  }
  if ((statSync(file).mode & 0o077) !== 0) chmodSync(file, 0o600);
  const hex = text.trim();
  if (!new RegExp(`^[0-9a-fA-F]{${2 * MARKER_KEY_BYTES}}$`).test(hex)) {
    throw new InstallationError(
      `marker key file ${file}: expected ${2 * MARKER_KEY_BYTES} hex digits (a ${8 * MARKER_KEY_BYTES}-bit key); ` +
        'restore it from a backup, or delete it to make a new key (markers planted under the old key are then no longer recognised)',
    );
  }
  return Uint8Array.from(Buffer.from(hex, 'hex'));
}

export interface InstallationRegistryOptions {
  /** Where plantings are looked up and from which recent ones are reloaded. */
  store: Store;
  /** Reload plantings since this time (ms epoch) into the fragment index (most recent first, up to the bound). */
  since: number;
  env?: Env;
  /** @default markerKeyPath(env) */
  keyFile?: string;
}

/**
 * A marker registry under the installation key: whole markers of any run decrypt and are attributed through
 * the store; the fragment index holds this process's markers and the most recent reloaded ones.
 */
export function createInstallationRegistry(opts: InstallationRegistryOptions): MarkerRegistry {
  const env = opts.env ?? process.env;
  const maxRecentMarkers = recentMarkersFrom(env);
  const registry = createMarkerRegistry({
    key: loadMarkerKey(opts.keyFile ?? markerKeyPath(env)),
    lookupPlanting: (requestNo) => opts.store.findPlanting(requestNo),
    maxRecentMarkers,
  });
  // Each planting carries many markers: a limit on rows well above the bound's worth is plenty.
  registry.addPlantings(opts.store.loadPlantings(opts.since, { limit: maxRecentMarkers }));
  return registry;
}

/** `onMarkers` for a probe: persist one planting row per request before its markers are sent. */
export function persistPlantings(store: Store): (entries: MarkerEntry[]) => void {
  return (entries) => store.recordPlantings(plantingRows(entries));
}
