/** Silences in the store (`kvcanary ack`): added with an id assigned here, listed newest first, active and expired. */
import type Database from 'better-sqlite3';
import { safeText } from '../../probe/redact.js';
import type { Silence } from '../silences.js';
import { iso } from './values.js';

export function createSilenceAccess(db: Database.Database, secretsOf: () => readonly string[]) {
  return {
    addSilence(silence: Omit<Silence, 'id'>): Silence {
      const info = db.prepare(`INSERT INTO silences (target, kind, scenario, reason, created_at, expires_at, created_by)
        VALUES (@target, @kind, @scenario, @reason, @created_at, @expires_at, @created_by)`).run({
        target: silence.target, kind: silence.kind, scenario: silence.scenario ?? null, reason: safeText(silence.reason, 300, secretsOf()),
        created_at: iso(silence.createdAt, 'createdAt'), expires_at: iso(silence.expiresAt, 'expiresAt'), created_by: safeText(silence.createdBy, 64, secretsOf()),
      });
      return { ...silence, id: String(info.lastInsertRowid) };
    },

    silences(): Silence[] {
      const rows = db.prepare('SELECT * FROM silences ORDER BY created_at DESC, id DESC').all() as
        { id: number; target: string; kind: string; scenario: string | null; reason: string; created_at: string; expires_at: string; created_by: string }[];
      return rows.map((r) => ({
        id: String(r.id), target: r.target, kind: r.kind, reason: r.reason, createdAt: r.created_at, expiresAt: r.expires_at, createdBy: r.created_by,
        ...(r.scenario === null ? {} : { scenario: r.scenario }),
      }));
    },
  };
}
