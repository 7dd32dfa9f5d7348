/**
 * A marker registry under the installation key, as `run` and `serve` both build it: whole markers of any run
 * decrypt and are attributed through the store's planting rows; the fragment index holds this process's
 * markers and the most recent reloaded ones, up to `KVCANARY_RECENT_MARKERS` (default 50000, about 130 bytes
 * each: ~6.5 MB, `npm run bench:marker-memory`). Fragments (12+ characters) are recognised only for markers
 * in the index; whole markers need no index.
 */
import { DEFAULT_MAX_RECENT_MARKERS, createMarkerRegistry, plantingRows, type MarkerEntry, type MarkerRegistry, type PlantingRow } from '../probe/marker-registry.js';
import type { Env } from './home.js';
import { InstallationError } from './installation-error.js';
import { installationKey } from './marker-key.js';

export const RECENT_MARKERS_ENV = 'KVCANARY_RECENT_MARKERS';

/** What the registry needs of a store: the planting rows (the service's evidence store, or `run`'s). */
export interface PlantingStore {
  findPlanting(requestNo: string): PlantingRow | undefined;
  loadPlantings(since: number, opts?: { limit?: number }): PlantingRow[];
  recordPlantings(rows: readonly PlantingRow[]): void;
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

export interface InstallationRegistryOptions {
  /** Where plantings are looked up and from which recent ones are reloaded. */
  store: PlantingStore;
  /** Reload plantings since this time (ms epoch) into the fragment index (most recent first, up to the bound). */
  since: number;
  env?: Env;
  /** The marker key. @default installationKey(env).key */
  key?: Uint8Array;
  /** Where the marker key is, created on first use (benches and tests). Ignored when `key` is given. */
  keyFile?: string;
}

export function createInstallationRegistry(opts: InstallationRegistryOptions): MarkerRegistry {
  const env = opts.env ?? process.env;
  const maxRecentMarkers = recentMarkersFrom(env);
  const registry = createMarkerRegistry({
    key: opts.key ?? installationKey(env, opts.keyFile).key,
    lookupPlanting: (requestNo) => opts.store.findPlanting(requestNo),
    maxRecentMarkers,
  });
  // Each planting carries many markers: a limit on rows well above the bound's worth is plenty.
  registry.addPlantings(opts.store.loadPlantings(opts.since, { limit: maxRecentMarkers }));
  return registry;
}

/** `onMarkers` for a probe: persist one planting row per request before its markers are sent. */
export function persistPlantings(store: PlantingStore): (entries: MarkerEntry[]) => void {
  return (entries) => store.recordPlantings(plantingRows(entries));
}
