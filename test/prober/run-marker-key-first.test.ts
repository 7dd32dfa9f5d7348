/**
 * `kvcanary run` checks the installation's marker key before it opens (creates) the evidence store: a key
 * that is missing, unreadable or malformed exits 64 naming the file, and no store is created or touched.
 * Before the fix the store was opened (and pruned) first, so a bad key left a fresh runs.sqlite behind (the
 * first two tests failed); the third, an existing store left as it was, held before too and guards it.
 */
import { existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { openStore } from '../../prober/src/service/store.js';
import { runCli } from '../helpers/cli.js';

const fresh = (): string => mkdtempSync(path.join(tmpdir(), 'kvc-run-key-'));
const TARGET = 'http://127.0.0.1:1';

describe('kvcanary run: a bad marker key exits 64 before any store is opened', () => {
  it('KVCANARY_MARKER_KEY_FILE naming a missing file: exit 64 naming it, no runs.sqlite made', async () => {
    const home = fresh();
    const keyFile = path.join(home, 'no-such.key');
    const r = await runCli(['run', '--target', TARGET, '--scenario', 'capacity-audit', '-q'], { env: { KVCANARY_HOME: home, KVCANARY_MARKER_KEY_FILE: keyFile } });
    expect(r.code).toBe(64);
    expect(r.stderr).toContain(keyFile);
    expect(existsSync(path.join(home, 'runs.sqlite'))).toBe(false);
  });

  it('a malformed key under KVCANARY_HOME: exit 64 naming it, no runs.sqlite made', async () => {
    const home = fresh();
    const keyFile = path.join(home, 'marker.key');
    writeFileSync(keyFile, 'not a key\n', { mode: 0o600 });
    const r = await runCli(['run', '--target', TARGET, '--scenario', 'capacity-audit', '-q'], { env: { KVCANARY_HOME: home, KVCANARY_MARKER_KEY_FILE: '' } });
    expect(r.code).toBe(64);
    expect(r.stderr).toContain(keyFile);
    expect(existsSync(path.join(home, 'runs.sqlite'))).toBe(false);
  });

  it('an existing --store is left byte for byte as it was', async () => {
    const home = fresh();
    const store = path.join(home, 'kept.sqlite');
    openStore({ path: store, retentionMs: Number.MAX_SAFE_INTEGER }).close();
    const before = readFileSync(store);
    const mtime = statSync(store).mtimeMs;
    const r = await runCli(['run', '--target', TARGET, '--scenario', 'capacity-audit', '-q', '--store', store], { env: { KVCANARY_HOME: home, KVCANARY_MARKER_KEY_FILE: path.join(home, 'absent.key') } });
    expect(r.code).toBe(64);
    expect(readFileSync(store).equals(before)).toBe(true);
    expect(statSync(store).mtimeMs).toBe(mtime);
    expect(existsSync(`${store}-wal`)).toBe(false);
  });
});
