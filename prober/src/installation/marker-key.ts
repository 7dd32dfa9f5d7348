/**
 * The installation's marker key: what every `kvcanary run` and `serve` of one installation shares so that any
 * of them recognises and attributes any marker another planted.
 *
 * 16 random bytes (AES-128, see probe/markers.ts), as 32 hex digits in `marker.key` under the installation
 * home (home.ts). Created on first use (directory 0700, file 0600, written to a temporary file and linked into
 * place so two processes starting at once agree on one key); an existing file readable by others is tightened
 * to 0600. It is read here and handed to the marker cipher only: never logged, never in metrics, evidence or
 * errors. Losing it means earlier markers are no longer recognised (they are then scanned like another
 * installation's); copying it to another machine makes that machine part of the installation.
 *
 * A deployment configures its key instead: KVCANARY_MARKER_KEY_FILE names the file (a Kubernetes Secret
 * mounted into every shard, written once by `kvcanary key new`). A configured key is only ever read: when it
 * is missing, unreadable or malformed, `serve` and `run` refuse to start (exit 64) rather than make a key of
 * their own, which would leave each pod of one installation unable to recognise the others' markers and
 * its own after a restart. Without KVCANARY_MARKER_KEY_FILE a plain local `serve` or `run` keeps the dev
 * default above: the key under the installation home, created on first use.
 */
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, closeSync, constants as fsConstants, fstatSync, linkSync, mkdirSync, openSync, readFileSync, readSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { MARKER_KEY_BYTES } from '../probe/markers.js';
import { markerKeyPath, type Env } from './home.js';
import { InstallationError } from './installation-error.js';

/** The installation's marker key, created (0600) on first use. Errors name the file, never its content. */
export function loadMarkerKey(file: string): Uint8Array {
  try {
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new InstallationError(`cannot create the installation folder ${path.dirname(file)} for the marker key (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}): ` +
      `set KVCANARY_HOME to a writable folder, or ${MARKER_KEY_FILE_ENV} to the installation's key file`);
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new InstallationError(`cannot read marker key file ${file}: ${(err as Error).message}`);
    const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
    writeFileSync(tmp, newMarkerKeyText(), { mode: 0o600, flag: 'wx' });
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
  return parseKey(text, file, 'restore it from a backup, or delete it to make a new key (markers planted under the old key are then no longer recognised)');
}

/** The key in a key file's text: 32 hex digits and optional white space. Errors name the file, never its content. */
function parseKey(text: string, file: string, remedy: string): Uint8Array {
  const hex = text.trim();
  if (!new RegExp(`^[0-9a-fA-F]{${2 * MARKER_KEY_BYTES}}$`).test(hex)) {
    throw new InstallationError(`marker key file ${file}: expected ${2 * MARKER_KEY_BYTES} hex digits (a ${8 * MARKER_KEY_BYTES}-bit key); ${remedy}`);
  }
  return Uint8Array.from(Buffer.from(hex, 'hex'));
}

export const MARKER_KEY_FILE_ENV = 'KVCANARY_MARKER_KEY_FILE';
/** A key file is 33 bytes; anything past this is not one (and is never read whole). */
const MAX_KEY_FILE_BYTES = 1024;
const BOOTSTRAP = 'write one with `kvcanary key new FILE` and mount it there (docs/deployment.md, "Marker key")';

/**
 * A configured key (KVCANARY_MARKER_KEY_FILE): read, never created, never chmodded (a Secret volume is
 * read-only). A FIFO or device is refused without reading it; a file that cannot be read, or is not a key,
 * is an InstallationError naming the file and what to do.
 */
export function readMarkerKey(file: string): Uint8Array {
  let fd: number;
  try {
    fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new InstallationError(code === 'ENOENT'
      ? `marker key file ${file} (${MARKER_KEY_FILE_ENV}) does not exist: the installation's key is expected there and is never made in its place; ${BOOTSTRAP}`
      : `marker key file ${file} (${MARKER_KEY_FILE_ENV}) cannot be read (${code ?? (err as Error).message}); it must be readable by this user (uid ${process.getuid?.() ?? '?'})`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new InstallationError(`marker key file ${file} (${MARKER_KEY_FILE_ENV}) is not a regular file; ${BOOTSTRAP}`);
    if (st.size > MAX_KEY_FILE_BYTES) throw new InstallationError(`marker key file ${file}: ${st.size} bytes, not a key (${2 * MARKER_KEY_BYTES} hex digits)`);
    const buf = Buffer.alloc(MAX_KEY_FILE_BYTES + 1);
    const n = readSync(fd, buf, 0, buf.length, 0);
    return parseKey(buf.subarray(0, n).toString('utf8'), file, `${BOOTSTRAP}, or restore the installation's key from its backup`);
  } catch (err) {
    if (err instanceof InstallationError) throw err;
    throw new InstallationError(`marker key file ${file} (${MARKER_KEY_FILE_ENV}) cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  } finally {
    closeSync(fd);
  }
}

/** A new random key as a key file's text. */
export function newMarkerKeyText(): string {
  return randomBytes(MARKER_KEY_BYTES).toString('hex') + '\n';
}

/**
 * Writes a new key to `file` (mode 0600). Never overwrites: an existing file, or a symlink (dangling or not),
 * is refused (O_EXCL), so an installation's key is never replaced by accident.
 */
export function writeNewMarkerKey(file: string): void {
  try {
    writeFileSync(file, newMarkerKeyText(), { mode: 0o600, flag: 'wx' });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new InstallationError(code === 'EEXIST'
      ? `${file} already exists: an installation's key is never overwritten (markers planted under it would no longer be recognised); choose another file`
      : `cannot write ${file} (${code ?? (err as Error).message})`);
  }
}

/**
 * A short public name of a key, the same for every process holding the same key: the first 12 hex digits of a
 * SHA-256 over a label and the key. Logged by `serve` at start, printed by `kvcanary key check`, so shards
 * can be seen to share one key without the key being shown.
 */
export function markerKeyId(key: Uint8Array): string {
  return createHash('sha256').update('kvcanary marker key id\0').update(key).digest('hex').slice(0, 12);
}

export interface InstallationKey {
  key: Uint8Array;
  /** The file it came from. */
  file: string;
  /** Whether KVCANARY_MARKER_KEY_FILE named it (read only), or it is the installation home's (created on first use). */
  configured: boolean;
}

/**
 * The installation's marker key: `keyFile` when given (created on first use; benches and tests), else the file
 * KVCANARY_MARKER_KEY_FILE names (read only: readMarkerKey), else the one under the installation home
 * (created on first use).
 */
export function installationKey(env: Env = process.env, keyFile?: string): InstallationKey {
  if (keyFile !== undefined) return { key: loadMarkerKey(keyFile), file: keyFile, configured: false };
  const configured = env[MARKER_KEY_FILE_ENV];
  if (configured !== undefined && configured !== '') {
    const file = path.resolve(configured);
    return { key: readMarkerKey(file), file, configured: true };
  }
  const file = markerKeyPath(env);
  return { key: loadMarkerKey(file), file, configured: false };
}
