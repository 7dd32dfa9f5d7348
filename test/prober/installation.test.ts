import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_RECENT_MARKERS } from '../../prober/src/probe/marker-registry.js';
import { installationHome, markerKeyPath, runStorePath } from '../../prober/src/installation/home.js';
import { InstallationError } from '../../prober/src/installation/installation-error.js';
import { installationKey, loadMarkerKey, MARKER_KEY_FILE_ENV, markerKeyId, readMarkerKey, writeNewMarkerKey } from '../../prober/src/installation/marker-key.js';
import { createInstallationRegistry, persistPlantings, recentMarkersFrom } from '../../prober/src/installation/registry.js';
import { openStore } from '../../prober/src/service/store.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-installation-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('installation: marker key file', () => {
  it('lives under KVCANARY_HOME, else XDG_CONFIG_HOME/kvcanary, else ~/.config/kvcanary', () => {
    expect(installationHome({ KVCANARY_HOME: '/srv/kvc' })).toBe('/srv/kvc');
    expect(markerKeyPath({ KVCANARY_HOME: '/srv/kvc' })).toBe('/srv/kvc/marker.key');
    expect(runStorePath({ KVCANARY_HOME: '/srv/kvc' })).toBe('/srv/kvc/runs.sqlite');
    expect(installationHome({ XDG_CONFIG_HOME: '/cfg' })).toBe('/cfg/kvcanary');
    expect(installationHome({})).toMatch(/\.config\/kvcanary$/);
  });

  it('is created on first use with mode 0600 (folder 0700) and the same key is read back by every later process', () => {
    const file = path.join(dir, 'home1', 'marker.key');
    const key = loadMarkerKey(file);
    expect(key).toHaveLength(16);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(path.dirname(file)).mode & 0o777).toBe(0o700);
    expect(loadMarkerKey(file)).toEqual(key);
    expect(readFileSync(file, 'utf8').trim()).toBe(Buffer.from(key).toString('hex'));
  });

  it('tightens a key file others can read, and refuses a malformed one without echoing its content', () => {
    const file = path.join(dir, 'home2', 'marker.key');
    loadMarkerKey(file);
    chmodSync(file, 0o644);
    loadMarkerKey(file);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    writeFileSync(file, 'secret-looking-garbage-0123');
    let message = '';
    try {
      loadMarkerKey(file);
    } catch (err) {
      expect(err).toBeInstanceOf(InstallationError);
      message = (err as Error).message;
    }
    expect(message).toContain(file);
    expect(message).toMatch(/32 hex digits/);
    expect(message).not.toContain('secret-looking-garbage');
  });

  it('reads the fragment index bound from KVCANARY_RECENT_MARKERS', () => {
    expect(recentMarkersFrom({})).toBe(DEFAULT_MAX_RECENT_MARKERS);
    expect(recentMarkersFrom({ KVCANARY_RECENT_MARKERS: '2000' })).toBe(2000);
    expect(() => recentMarkersFrom({ KVCANARY_RECENT_MARKERS: 'lots' })).toThrow(/KVCANARY_RECENT_MARKERS: expected an integer/);
  });

  it('two processes of one installation: the second attributes the first one\'s markers from the store; the key is in no row', () => {
    const home = path.join(dir, 'home3');
    const env = { KVCANARY_HOME: home };
    const store = openStore({ path: runStorePath(env), retentionMs: 86_400_000 });
    const first = createInstallationRegistry({ store, since: 0, env });
    const planted = Array.from({ length: 3 }, () => first.plant({ runId: 'run-a', requestId: 'planter-a', role: 'planter', tenant: 'default' }));
    persistPlantings(store)(planted);
    const second = createInstallationRegistry({ store, since: 0, env });
    expect(second.get(planted[2]!.marker)).toMatchObject({ runId: 'run-a', requestId: 'planter-a', index: 2 });
    expect(second.isRecent(planted[0]!.marker)).toBe(true); // reloaded into the fragment index
    store.close();
    const keyHex = readFileSync(markerKeyPath(env), 'utf8').trim();
    expect(readFileSync(runStorePath(env)).includes(Buffer.from(keyHex))).toBe(false);
    expect(JSON.stringify(second)).not.toContain(keyHex);
  });
});

describe('installation: a configured marker key (KVCANARY_MARKER_KEY_FILE)', () => {
  const messageOf = (f: () => unknown): string => {
    try {
      f();
    } catch (err) {
      expect(err).toBeInstanceOf(InstallationError);
      return (err as Error).message;
    }
    throw new Error('expected an InstallationError');
  };

  it('is read, never created: a missing one is an error naming the file and the bootstrap, and no key appears anywhere', () => {
    const home = path.join(dir, 'configured-home');
    const file = path.join(dir, 'secret', 'marker.key');
    const env = { KVCANARY_HOME: home, [MARKER_KEY_FILE_ENV]: file };
    const message = messageOf(() => installationKey(env));
    expect(message).toContain(file);
    expect(message).toMatch(/never made in its place/);
    expect(message).toMatch(/kvcanary key new/);
    expect(existsSync(file)).toBe(false);
    expect(existsSync(home)).toBe(false);
    expect(() => createInstallationRegistry({ store: openStore({ path: ':memory:', retentionMs: 1000 }), since: 0, env })).toThrow(InstallationError);
  });

  it('a key written by writeNewMarkerKey is the one every reader gets, with the same key id; it is never chmodded', () => {
    mkdirSync(path.join(dir, 'secret2'));
    const file = path.join(dir, 'secret2', 'marker.key');
    writeNewMarkerKey(file);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    chmodSync(file, 0o444); // a Secret volume's mode is the volume's, not ours
    const k = installationKey({ [MARKER_KEY_FILE_ENV]: file, KVCANARY_HOME: path.join(dir, 'unused-home') });
    expect(k).toMatchObject({ file, configured: true });
    expect(k.key).toEqual(readMarkerKey(file));
    expect(statSync(file).mode & 0o777).toBe(0o444);
    expect(existsSync(path.join(dir, 'unused-home'))).toBe(false);
    expect(markerKeyId(k.key)).toMatch(/^[0-9a-f]{12}$/);
    expect(markerKeyId(k.key)).toBe(markerKeyId(readMarkerKey(file)));
    expect(readFileSync(file, 'utf8')).not.toContain(markerKeyId(k.key));
  });

  it('writeNewMarkerKey never overwrites: an existing file, a symlink, a dangling symlink are refused and left as they were', () => {
    const existing = path.join(dir, 'exists.key');
    writeFileSync(existing, 'keep me');
    expect(messageOf(() => writeNewMarkerKey(existing))).toMatch(/already exists/);
    expect(readFileSync(existing, 'utf8')).toBe('keep me');
    const target = path.join(dir, 'dangling-target');
    const dangling = path.join(dir, 'dangling.key');
    symlinkSync(target, dangling);
    messageOf(() => writeNewMarkerKey(dangling));
    expect(existsSync(target)).toBe(false);
  });

  it('refuses a folder, a FIFO (without blocking on it), an oversized file and a malformed one, never echoing content', () => {
    expect(messageOf(() => readMarkerKey(dir))).toMatch(/not a regular file/);
    const fifo = path.join(dir, 'fifo.key');
    execFileSync('mkfifo', [fifo]);
    expect(messageOf(() => readMarkerKey(fifo))).toMatch(/not a regular file/);
    const big = path.join(dir, 'big.key');
    writeFileSync(big, 'a'.repeat(5000));
    expect(messageOf(() => readMarkerKey(big))).toMatch(/5000 bytes, not a key/);
    const bad = path.join(dir, 'bad.key');
    writeFileSync(bad, 'sk-live-0123456789-secretish');
    const message = messageOf(() => readMarkerKey(bad));
    expect(message).toMatch(/32 hex digits/);
    expect(message).not.toContain('secretish');
  });
});
