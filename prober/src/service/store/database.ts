/**
 * Opening the store's SQLite file: read-only (`report`: the schema checked, nothing written) or for writing
 * (created owner-only, WAL with synchronous=FULL, migrated to the current schema).
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, statSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { StoreOptions } from '../store.js';
import { StoreError } from './error.js';
import { checkSchema, migrate } from './schema.js';

/**
 * Before a writable open: an existing, non-empty file must already be a kvcanary store (any schema; older ones
 * are migrated). Another application's SQLite file (or any other file) is refused before anything touches
 * it: opening it for writing would add kvcanary's tables, switch it to WAL and chmod it 0600.
 */
function refuseForeignFile(file: string): void {
  let size: number;
  try {
    size = statSync(file).size;
  } catch {
    return;  // a new store
  }
  if (size === 0) return;
  let probe: Database.Database;
  try {
    probe = new Database(file, { readonly: true, fileMustExist: true });
  } catch (err) {
    throw new StoreError('KVC_STORE_NOT_KVCANARY', `${file} is not a kvcanary evidence store (cannot be opened as SQLite); nothing was changed`, { cause: err });
  }
  try {
    const tables = new Set((probe.prepare(`SELECT name FROM sqlite_master WHERE type = 'table'`).all() as Array<{ name: string }>).map((r) => r.name));
    if (!(tables.has('schema_migrations') && tables.has('runs') && tables.has('findings'))) {
      throw new StoreError('KVC_STORE_NOT_KVCANARY', `${file} is not a kvcanary evidence store (an SQLite database without kvcanary's tables); nothing was changed`);
    }
  } catch (err) {
    if (err instanceof StoreError) throw err;
    throw new StoreError('KVC_STORE_NOT_KVCANARY', `${file} is not a kvcanary evidence store (not an SQLite database); nothing was changed`, { cause: err });
  } finally {
    probe.close();
  }
}

/** Creates the file (and its folder) owner-only before SQLite opens it, and tightens an existing one. */
function prepareFile(file: string): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  closeSync(openSync(file, 'a', 0o600));
  for (const f of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
}

/**
 * The page cache a connection keeps, in KiB (SQLite's own default). better-sqlite3 builds SQLite with a 16 MB
 * default, which a replica's store (8 MB after one cycle of 50 targets, every scenario) fills with pages it
 * wrote and seldom reads again: resident memory for nothing. The store is written row by row and read by
 * indexed queries (status page, API, reports), which a small cache serves.
 */
const PAGE_CACHE_KIB = 2048;

/** Every connection's settings: `kvcanary report` may read while `serve` writes (wait for the writer rather than fail); the page cache. */
function tuneConnection(db: Database.Database): void {
  db.pragma('busy_timeout = 5000');
  db.pragma(`cache_size = -${PAGE_CACHE_KIB}`);
}

/** Opens (read-only: checks the schema; otherwise creates owner-only, WAL, migrated) the database. */
export function openDatabase(opts: StoreOptions): Database.Database {
  let db: Database.Database;
  try {
    if (opts.readonly === true) {
      db = new Database(opts.path, { readonly: true, fileMustExist: true });
      tuneConnection(db);
      checkSchema(db, opts.path);
    } else {
      if (opts.path !== ':memory:') {
        refuseForeignFile(opts.path);
        prepareFile(opts.path);
      }
      db = new Database(opts.path);
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = FULL');
      tuneConnection(db);
      // Table rebuilds in migrations must not cascade deletes: foreign keys are enforced once the schema is current.
      db.pragma('foreign_keys = OFF');
      migrate(db);
      db.pragma('foreign_keys = ON');
      if (opts.path !== ':memory:') prepareFile(opts.path);
    }
  } catch (err) {
    if (err instanceof StoreError) throw err;
    throw new StoreError('KVC_STORE_OPEN', `cannot open evidence store ${opts.path}: ${(err as Error).message}`, { cause: err });
  }
  return db;
}

