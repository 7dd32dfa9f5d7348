/**
 * `kvcanary engine` with the disaggregated presets, faults and defenses, as a process: the worker threads
 * must start under the bin launcher too, the flags must reach the engine, and bad names exit 64 with the list.
 */
import { scratchHome } from '../helpers/cli.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const BIN = fileURLToPath(new URL('../../bin/kvcanary.js', import.meta.url));
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function run(args: string[]): ChildProcess {
  const child = spawn(process.execPath, [BIN, 'engine', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KVCANARY_HOME: scratchHome() } });
  children.push(child);
  return child;
}

const exitOf = (child: ChildProcess): Promise<number | null> =>
  new Promise((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', (code) => resolve(code))));

function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    lines.once('line', (line) => {
      lines.close();
      resolve(line);
    });
    child.once('exit', (code) => reject(new Error(`exited with ${code} before printing a line`)));
  });
}

function collect(stream: NodeJS.ReadableStream | null): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    stream?.on('data', (d: Buffer) => (text += d.toString()));
    stream?.on('end', () => resolve(text));
  });
}

describe('kvcanary engine, disaggregated', () => {
  it('starts the incident preset with its workers, prints URL and fault first, and exits 0 on SIGTERM', async () => {
    const child = run(['--preset', 'incident', '--scale', '64', '--port', '0']);
    const line = await firstLine(child);
    expect(line).toMatch(/http:\/\/127\.0\.0\.1:\d+ \(preset incident, disaggregated, .*faults \[admission-checks-finished\], defenses \[\]/);
    const url = /http:\/\/127\.0\.0\.1:\d+/.exec(line)![0];
    const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'hello there', max_tokens: 3 }) });
    expect(res.status).toBe(200);
    child.kill('SIGTERM');
    expect(await exitOf(child)).toBe(0);
  });

  it('adds faults and defenses and takes the transfer and free-list settings from flags', async () => {
    const child = run([
      '--preset', 'disaggregated', '--scale', '64', '--fault', 'late-write', '--fault', 'offload-release-race', '--defense', 'page-tags',
      '--defense', 'deferred-release', '--transfer-latency-ms', '2.5', '--transfer-batch-tokens', '64', '--free-list', 'lifo', '--decode-pool-tokens', '20000', '--port', '0',
    ]);
    const url = /http:\/\/127\.0\.0\.1:\d+/.exec(await firstLine(child))![0];
    expect(await (await fetch(`${url}/debug/config`)).json()).toMatchObject({
      preset: 'disaggregated',
      faults: ['late-write', 'offload-release-race'],
      defenses: ['deferred-release', 'page-tags'],
      kv_free_list_policy: 'lifo',
    });
    expect(await (await fetch(`${url}/get_server_info`)).json()).toMatchObject({
      decode: { max_total_num_tokens: 20_000 },
      disaggregation_transfer: { batch_tokens: 64, latency_ms: 2.5 },
      host_offload: { capacity_tokens: 20_000 },
    });
    child.kill('SIGINT');
    expect(await exitOf(child)).toBe(0);
  });

  it.each([
    [['--fault', 'bogus'], /--fault must be one of admission-checks-finished, late-write, offload-release-race, prefix-cache-ignores-salt, weak-prefix-hash, prompt-cache-restore-race, host-tier-ignores-salt, got 'bogus'/],
    [['--defense', 'prayer'], /--defense must be one of reject-before-bootstrap, deferred-release, page-tags, zero-on-release, transfer-integrity, salted-prefix-cache, strong-prefix-hash, restore-fencing, salted-host-tier, got 'prayer'/],
    [['--fault', 'late-write'], /`late-write` needs a disaggregated preset \(incident, remediated, hardened, disaggregated\)/],
    [['--preset', 'incident', '--transfer-latency-ms', 'fast'], /--transfer-latency-ms must be a number of milliseconds in \[0, 60000\], got 'fast'/],
    [['--preset', 'incident', '--transfer-batch-tokens', '0'], /--transfer-batch-tokens must be an integer/],
    [['--preset', 'nope'], /--preset must be one of single, incident, remediated, hardened, disaggregated, got 'nope'/],
  ])('exits 64 naming the problem for %j', async (args, message) => {
    const child = run(args);
    const [stderr, stdout] = [collect(child.stderr), collect(child.stdout)];
    expect(await exitOf(child)).toBe(64);
    expect(await stderr).toMatch(message);
    expect(await stdout).toBe('');
  });
});
