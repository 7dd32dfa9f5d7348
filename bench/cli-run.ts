/**
 * One default `kvcanary run --target URL --json -q` as a child process, exactly as a user types it, in its own
 * installation home: its exit code, wall time and parsed JSON document (undefined when stdout held none).
 * Shared by the benches that count whole default runs (default-runs.ts, real-llamacpp.ts).
 */
import { spawn } from 'node:child_process';

export interface CliRun<Doc> {
  exit: number | null;
  ms: number;
  doc: Doc | undefined;
}

export function runKvcanary<Doc>(url: string, home: string): Promise<CliRun<Doc>> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bin/kvcanary.js', 'run', '--target', url, '--json', '-q'], {
      env: { ...process.env, KVCANARY_HOME: home },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.on('error', reject);
    child.on('close', (exit) => {
      let doc: Doc | undefined;
      try {
        doc = JSON.parse(out) as Doc;
      } catch {
        doc = undefined;
      }
      resolve({ exit, ms: performance.now() - t0, doc });
    });
  });
}
