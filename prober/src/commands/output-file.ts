/**
 * Files a command writes at a path the operator names (`run --junit FILE`, `init FILE`): checked before any
 * work is done, so a bad path is a usage error up front rather than a lost verdict at the end, and written
 * without following links. A path that is a symbolic link (dangling or not), a FIFO, a device or a folder is
 * refused; so is one of kvcanary's own files (the evidence store, its WAL, the marker key), whatever name it
 * is reached by. Opening uses O_NOFOLLOW (and O_EXCL for a new file) and re-checks the opened file, so a
 * link swapped in between the check and the write is refused too.
 */
import { closeSync, constants, fstatSync, ftruncateSync, lstatSync, openSync, readSync, statSync, writeSync, type Stats } from 'node:fs';
import path from 'node:path';
import { shownPath } from '../shown-value.js';
import { UsageError } from './usage.js';

export interface OutputFileRules {
  /** The flag or argument named in errors (`--junit`, `init FILE`). */
  what: string;
  /** An existing regular file may be replaced (init --force; a JUnit report from an earlier run). */
  overwrite: boolean | ((head: string) => boolean);
  /** kvcanary's own files that must never be overwritten, with why (`the evidence store`). */
  protect: ReadonlyArray<{ file: string; what: string }>;
  /** Why overwrite refused, for the message. @default 'exists' */
  existsHint?: string;
}

const sameFile = (a: Stats, b: Stats): boolean => a.dev === b.dev && a.ino === b.ino;

function protectedBy(st: Stats, rules: OutputFileRules): string | undefined {
  for (const p of rules.protect) {
    for (const f of [p.file, `${p.file}-wal`, `${p.file}-shm`, `${p.file}-journal`]) {
      try {
        if (sameFile(statSync(f), st)) return p.what;
      } catch { /* not there */ }
    }
  }
  return undefined;
}

function headOf(file: string): string {
  const fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const buf = Buffer.alloc(64);
    const n = readSync(fd, buf, 0, buf.length, 0);
    return buf.subarray(0, n).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** Throws a UsageError naming `rules.what` if `file` may not be written; returns whether it exists now. */
export function checkOutputFile(file: string, rules: OutputFileRules): boolean {
  const shown = shownPath(file);
  const dir = path.dirname(path.resolve(file));
  let dirSt: Stats;
  try {
    dirSt = statSync(dir);
  } catch {
    throw new UsageError(`${rules.what}: cannot write ${shown}: its folder does not exist (create it first)`);
  }
  if (!dirSt.isDirectory()) throw new UsageError(`${rules.what}: cannot write ${shown}: its parent is not a folder`);
  let st: Stats;
  try {
    st = lstatSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw new UsageError(`${rules.what}: cannot write ${shown} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  if (st.isSymbolicLink()) throw new UsageError(`${rules.what}: ${shown} is a symbolic link: kvcanary does not write through links (give the real path)`);
  if (!st.isFile()) throw new UsageError(`${rules.what}: ${shown} is not a regular file`);
  const own = protectedBy(st, rules);
  if (own !== undefined) throw new UsageError(`${rules.what}: ${shown} is ${own}: refusing to overwrite it`);
  const may = typeof rules.overwrite === 'function' ? rules.overwrite(headOf(file)) : rules.overwrite;
  if (!may) throw new UsageError(`${rules.what}: ${shown} ${rules.existsHint ?? 'exists'}`);
  return true;
}

/** Writes `text` to `file` after `checkOutputFile`'s rules, never through a link; the check is repeated on the opened file. */
export function writeOutputFile(file: string, text: string, rules: OutputFileRules, mode = 0o644): void {
  const existed = checkOutputFile(file, rules);
  const shown = shownPath(file);
  let fd: number;
  try {
    fd = existed
      ? openSync(file, constants.O_WRONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK)
      : openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new UsageError(`${rules.what}: cannot write ${shown} (${code === 'ELOOP' ? 'it became a symbolic link' : code === 'EEXIST' ? 'it appeared meanwhile' : code ?? 'error'})`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new UsageError(`${rules.what}: ${shown} is not a regular file`);
    const own = protectedBy(st, rules);
    if (own !== undefined) throw new UsageError(`${rules.what}: ${shown} is ${own}: refusing to overwrite it`);
    ftruncateSync(fd, 0);
    const buf = Buffer.from(text, 'utf8');
    for (let off = 0; off < buf.length;) off += writeSync(fd, buf, off, buf.length - off, off);
  } finally {
    closeSync(fd);
  }
}
