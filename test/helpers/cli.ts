/** Runs the kvcanary CLI as a user would: a child process through bin/kvcanary.js. */
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

let sharedHome: string | undefined;
/** A scratch installation home (marker key, run store) so tests never write to the user's ~/.config. */
function testHome(): string {
  sharedHome ??= mkdtempSync(path.join(tmpdir(), 'kvc-cli-home-'));
  return sharedHome;
}

/** A fresh installation home of its own (KVCANARY_HOME) for one spawned kvcanary. */
export function scratchHome(): string {
  return mkdtempSync(path.join(tmpdir(), 'kvc-home-'));
}

export const BIN = fileURLToPath(new URL('../../bin/kvcanary.js', import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(args: string[], opts: { env?: Record<string, string>; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: { KVCANARY_HOME: testHome(), ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`kvcanary ${args.join(' ')} did not exit within ${opts.timeoutMs ?? 60_000} ms\n${stderr}`));
    }, opts.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
