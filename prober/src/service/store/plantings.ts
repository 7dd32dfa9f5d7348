/**
 * Planting rows read back: by request number (attributing a whole marker) and since a time (reloading the
 * fragment index), each with its run's target where the run is recorded; and pruning what retention drops.
 */
import type Database from 'better-sqlite3';
import type { PlantingRow } from '../../probe/marker-registry.js';
import { iso } from './values.js';

type PlantingDbRow = { request_no: string; run_id: string; request_id: string; role: string; tenant: string; planted_at: string; marker_count: number; target: string | null; base_url: string | null };

const PLANTING_SELECT = `SELECT p.*, r.target AS target, r.base_url AS base_url FROM plantings p LEFT JOIN runs r ON r.run_id = p.run_id`;

const plantingOf = (r: PlantingDbRow): PlantingRow => ({
  requestNo: r.request_no, runId: r.run_id, requestId: r.request_id, role: r.role, tenant: r.tenant, plantedAt: r.planted_at,
  markerCount: r.marker_count, ...(r.target !== null ? { target: r.base_url !== null ? `${r.target} (${r.base_url})` : r.target } : {}),
});

export function createPlantingReads(db: Database.Database) {
  const selectPlanting = db.prepare(`${PLANTING_SELECT} WHERE p.request_no = ?`);
  return {
    loadPlantings(since: Date | number | string, { limit }: { limit?: number } = {}): PlantingRow[] {
      // Newest first under the limit, returned oldest first; legacy rows (no request number) cannot be re-derived.
      const rows = db.prepare(`SELECT * FROM (${PLANTING_SELECT} WHERE p.planted_at >= @since AND p.request_no NOT LIKE 'legacy-%'
        ORDER BY p.planted_at DESC LIMIT @limit) ORDER BY planted_at`)
        .all({ since: iso(since, 'since'), limit: limit === undefined ? -1 : Math.max(0, Math.floor(limit)) }) as PlantingDbRow[];
      return rows.map(plantingOf);
    },

    findPlanting(requestNo: string): PlantingRow | undefined {
      const row = selectPlanting.get(requestNo) as PlantingDbRow | undefined;
      return row === undefined ? undefined : plantingOf(row);
    },
  };
}

/** Removes requests and plantings older than the retention; runs, outcomes, findings and skips are kept. */
export function pruneOlderThan(db: Database.Database, now: Date | number, retentionMs: number): { requests: number; plantings: number } {
  const cutoff = iso((now instanceof Date ? now.getTime() : now) - retentionMs, 'now');
  return db.transaction(() => ({
    requests: db.prepare('DELETE FROM requests WHERE at < ?').run(cutoff).changes,
    plantings: db.prepare('DELETE FROM plantings WHERE planted_at < ?').run(cutoff).changes,
  }))();
}
