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
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, linkSync, mkdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { MARKER_KEY_BYTES } from '../probe/markers.js';
import { markerKeyPath, type Env } from './home.js';
import { InstallationError } from './installation-error.js';

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

/** The installation's marker key: `keyFile`, default the one under the installation home, created on first use. */
export function installationKey(env: Env = process.env, keyFile?: string): { key: Uint8Array; file: string } {
  const file = keyFile ?? markerKeyPath(env);
  return { key: loadMarkerKey(file), file };
}
