import { spawn, type ChildProcess } from 'node:child_process';
import { scratchHome } from '../helpers/cli.js';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const BIN = fileURLToPath(new URL('../../bin/kvcanary.js', import.meta.url));
const children: ChildProcess[] = [];

function run(args: string[]): ChildProcess {
  const child = spawn(process.execPath, [BIN, 'engine', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KVCANARY_HOME: scratchHome() } });
  children.push(child);
  return child;
}

function exit(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => resolve({ code, signal }));
  });
}

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

function output(stream: NodeJS.ReadableStream | null): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    stream?.on('data', (d: Buffer) => (text += d.toString()));
    stream?.on('end', () => resolve(text));
  });
}

afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

describe('kvcanary engine (as a process)', () => {
  it.each(['SIGTERM', 'SIGINT'] as const)('prints its URL first, serves, and exits 0 on %s', async (signal) => {
    const child = run(['--scale', '64', '--port', '0']);
    const stderr = output(child.stderr);
    const line = await firstLine(child);
    const url = /http:\/\/127\.0\.0\.1:\d+/.exec(line)?.[0];
    expect(url).toBeDefined();
    const info = (await (await fetch(`${url}/get_server_info`)).json()) as Record<string, unknown>;
    expect(info).toMatchObject({ context_length: 16_384, max_total_num_tokens: 16_640 });
    child.kill(signal);
    expect(await exit(child)).toEqual({ code: 0, signal: null });
    expect(await stderr).toMatch(new RegExp(`${signal}, stopping`));
  });

  it('takes capacities, page size and free-list policy from flags', async () => {
    const child = run(['--context-tokens', '4096', '--pool-tokens', '2048', '--page-size', '32', '--free-list', 'lifo', '--port', '0']);
    const url = /http:\/\/127\.0\.0\.1:\d+/.exec(await firstLine(child))?.[0];
    const info = (await (await fetch(`${url}/get_server_info`)).json()) as Record<string, unknown>;
    expect(info).toMatchObject({ context_length: 4096, max_total_num_tokens: 2048, page_size: 32, kv_free_list_policy: 'lifo' });
    child.kill('SIGTERM');
    expect((await exit(child)).code).toBe(0);
  });

  it.each([
    [['--bogus'], /Unknown option '--bogus'/],
    [['--scale', 'lots'], /--scale must be an integer/],
    [['--port', '70000'], /--port must be an integer in \[0, 65535\]/],
    [['--free-list', 'random'], /--free-list must be one of fifo, lifo, got 'random'/],
    [['--preset', 'nope'], /--preset must be one of single/],
    [['--page-size', '6'], /pageSize.* multiple of 4/],
    [['--port'], /--port/],
  ])('exits 64 naming the flag for %j', async (args, message) => {
    const child = run(args);
    const stderr = output(child.stderr);
    const stdout = output(child.stdout);
    expect((await exit(child)).code).toBe(64);
    expect(await stderr).toMatch(message);
    expect(await stdout).toBe('');
  });
});

describe('kvcanary engine model flags', () => {
  it('--model-ngram and --model-beta set the copy head; bad values name the flag', async () => {
    const { parseEngineArgs } = await import('../../engine-under-test/src/cli.js');
    expect(parseEngineArgs(['--model-ngram', '4', '--model-beta', '7.5'])).toMatchObject({ model: { ngram: 4, beta: 7.5 } });
    expect(parseEngineArgs([])).not.toHaveProperty('model');
    expect(() => parseEngineArgs(['--model-ngram', '0'])).toThrow(/--model-ngram must be an integer in \[1, 64\], got '0'/);
    expect(() => parseEngineArgs(['--model-beta', 'flat'])).toThrow(/--model-beta must be a number in \(0, 1000\], got 'flat'/);
  });

  it('the engine runs with them: a shorter n-gram still copies an unambiguous continuation', async () => {
    const child = run(['--model-ngram', '4', '--model-beta', '10', '--port', '0']);
    const line = await firstLine(child);
    expect(line).toContain('model ngram 4 beta 10');
    const url = /http:\/\/127\.0\.0\.1:\d+/.exec(line)![0];
    const res = await fetch(`${url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'code: zq7kd9\ncode: zq7', max_tokens: 3, temperature: 0 }) });
    expect(((await res.json()) as { choices: { text: string }[] }).choices[0]!.text).toBe('kd9');
    child.kill('SIGTERM');
    expect(await exit(child)).toEqual({ code: 0, signal: null });
  });
});
