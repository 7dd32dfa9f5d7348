/**
 * Section 6, the component benchmarks: `npm run bench:scanner` and `npm run bench:engine`, each run as a
 * child process with `--json FILE`, so their figures land in this report from the same run, with the
 * table each printed kept verbatim.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildTracker } from './child.js';

export interface ComponentRun {
  script: string;
  command: string;
  exitCode: number | null;
  seconds: number;
  /** What the script printed on stdout (its table). */
  table: string;
  /** Its --json document, when it wrote one. */
  json?: unknown;
  error?: string;
}

export async function runComponent(children: ChildTracker, script: string, extraArgs: readonly string[] = []): Promise<ComponentRun> {
  const dir = mkdtempSync(join(tmpdir(), 'kvcanary-bench-'));
  const file = join(dir, `${script}.json`);
  const t0 = performance.now();
  try {
    const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = children.spawn('npm', ['run', '-s', script, '--', ...extraArgs, '--json', file], { stderr: 'pipe' });
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
      child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString('utf8')).slice(-2000)));
      child.once('error', reject);
      child.once('close', (c) => resolve({ code: c, stdout, stderr }));
    });
    const run: ComponentRun = {
      script,
      command: `npm run ${script} -- ${[...extraArgs, '--json FILE'].join(' ')}`,
      exitCode: code,
      seconds: (performance.now() - t0) / 1000,
      table: stdout.trim(),
    };
    try {
      run.json = JSON.parse(readFileSync(file, 'utf8'));
    } catch {
      run.error = `no --json output; stderr: ${stderr.trim().slice(-400)}`;
    }
    return run;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
