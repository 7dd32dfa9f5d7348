/**
 * The marker key's bootstrap through the CLI: `kvcanary key new` writes one, `key check` names it by its key
 * id, and `serve` and `run` told to use a configured key (KVCANARY_MARKER_KEY_FILE) refuse to start without it
 * rather than make one of their own.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-cli-key-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('kvcanary key', () => {
  it('new writes a 0600 key once; check prints its id, never the key; a second new refuses to overwrite', async () => {
    const file = path.join(dir, 'marker.key');
    const made = await runCli(['key', 'new', file]);
    expect(made.code, made.stderr).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const key = readFileSync(file, 'utf8').trim();
    expect(key).toMatch(/^[0-9a-f]{32}$/);
    expect(made.stdout + made.stderr).not.toContain(key);
    const checked = await runCli(['key', 'check', file]);
    expect(checked.code, checked.stderr).toBe(0);
    expect(checked.stdout).toMatch(/^marker key .*marker\.key: id [0-9a-f]{12}\n$/);
    expect(checked.stdout).not.toContain(key);
    // The same id from the key the environment names.
    const viaEnv = await runCli(['key', 'check'], { env: { KVCANARY_MARKER_KEY_FILE: file } });
    expect(viaEnv.stdout.split(': id ')[1]).toBe(checked.stdout.split(': id ')[1]);
    const again = await runCli(['key', 'new', file]);
    expect(again.code).toBe(64);
    expect(again.stderr).toMatch(/already exists/);
    expect(readFileSync(file, 'utf8').trim()).toBe(key);
  }, 120_000);

  it('new - prints a fresh key to a pipe; bad usage is 64', async () => {
    const piped = await runCli(['key', 'new', '-']);
    expect(piped.code).toBe(0);
    expect(piped.stdout).toMatch(/^[0-9a-f]{32}\n$/);
    expect((await runCli(['key'])).code).toBe(64);
    expect((await runCli(['key', 'rotate'])).code).toBe(64);
    expect((await runCli(['key', 'new'])).code).toBe(64);
  }, 120_000);
});

describe('a configured marker key that cannot be read', () => {
  it('serve exits 64 naming the file and makes no key (no home, no file)', async () => {
    const home = path.join(dir, 'serve-home');
    const keyFile = path.join(dir, 'mounted', 'marker.key');
    const config = path.join(dir, 'serve.yaml');
    writeFileSync(config, `store: { path: ${path.join(dir, 'serve-store', 'kvcanary.sqlite')} }\ntargets:\n  - { name: t, base_url: "http://127.0.0.1:9" }\n`);
    const r = await runCli(['serve', '--config', config, '--listen', '127.0.0.1:0'], { env: { KVCANARY_HOME: home, KVCANARY_MARKER_KEY_FILE: keyFile } });
    expect(r.code, r.stderr).toBe(64);
    expect(r.stderr).toContain(keyFile);
    expect(r.stderr).toMatch(/KVCANARY_MARKER_KEY_FILE/);
    expect(r.stdout).toBe('');
    expect(existsSync(keyFile)).toBe(false);
    expect(existsSync(home)).toBe(false);
    expect(existsSync(path.join(dir, 'serve-store'))).toBe(false);
  }, 120_000);

  it('run exits 64 the same way, before sending anything', async () => {
    const home = path.join(dir, 'run-home');
    const keyFile = path.join(dir, 'bad.key');
    writeFileSync(keyFile, 'not a key\n');
    const r = await runCli(['run', '--target', 'http://127.0.0.1:9', '-q'], { env: { KVCANARY_HOME: home, KVCANARY_MARKER_KEY_FILE: keyFile } });
    expect(r.code, r.stderr).toBe(64);
    expect(r.stderr).toMatch(/32 hex digits/);
    expect(r.stderr).not.toContain('not a key');
    expect(existsSync(home) ? readdirSync(home).filter((f) => f.endsWith('.key')) : []).toEqual([]);
  }, 120_000);
});
