/**
 * One measured scenario run: a fresh bundled engine (`kvcanary engine --preset P --scale S --attention A`)
 * and one `kvcanary run --scenario X --json` against it, each a process of its own (a fresh installation in a
 * temporary KVCANARY_HOME), so the engine's counters and both peak memories belong to that one run alone.
 *
 * What is read: the prober's own accounting (`--json`: requests, tokens sent and billed per scenario), the
 * engine's counters from its /metrics (prompt tokens prefilled, tokens generated, HTTP answers by status,
 * rejections by kind, sequences finished by reason), wall time, and each process's peak RSS (VmHWM from
 * /proc, read just before the process ends).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { firstLine, killGroup, exited, type ChildTracker } from './child.js';

export interface EngineCounters {
  prefilled: number;
  generated: number;
  /** kvcanary_engine_http_requests_total for the generation routes, by status. */
  answers: Record<string, number>;
  rejected: Record<string, number>;
  finished: Record<string, number>;
}

export interface MeasuredRun {
  name: string;
  preset: string;
  scale: number;
  /** `full` (real attention) or `skip` (the engine's arithmetic-free mode, engine-under-test/src/attention/skip-kernel.ts). */
  mode: string;
  outcome: string;
  reason?: string;
  power?: unknown;
  /** The prober's own accounting. */
  requests: number;
  sent: number;
  billed: number;
  /** Tokens the engine prefilled plus tokens it generated (its own counters). */
  computed: number;
  engine: EngineCounters;
  seconds: number;
  enginePeakMiB: number;
  proberPeakMiB: number;
}

export interface RunSpec {
  preset: string;
  scenario: string;
  scale: number;
  attention: 'full' | 'skip';
  /** kvcanary run flags beyond --target/--scenario/--json. */
  runArgs: readonly string[];
}

const GENERATION_ROUTES = new Set(['completions', 'chat_completions']);

function peakMiB(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m === null ? 0 : Math.round((Number(m[1]) / 1024) * 10) / 10;
  } catch {
    return 0;
  }
}

/** Sums of a Prometheus text exposition's samples of `name`, keyed by the value of `label` ('' without). */
export function samples(text: string, name: string, label?: string): Record<string, number> {
  const out: Record<string, number> = {};
  const re = new RegExp(`^${name}(\\{[^}]*\\})? ([0-9.e+-]+)$`, 'gm');
  for (const m of text.matchAll(re)) {
    const key = label === undefined ? '' : (new RegExp(`${label}="([^"]*)"`).exec(m[1] ?? '')?.[1] ?? '');
    out[key] = (out[key] ?? 0) + Number(m[2]);
  }
  return out;
}

export function engineCounters(metrics: string): EngineCounters {
  const answers: Record<string, number> = {};
  for (const m of metrics.matchAll(/^kvcanary_engine_http_requests_total\{([^}]*)\} ([0-9.e+-]+)$/gm)) {
    const route = /endpoint="([^"]*)"/.exec(m[1]!)?.[1] ?? '';
    const status = /status="([^"]*)"/.exec(m[1]!)?.[1] ?? '';
    if (GENERATION_ROUTES.has(route) && Number(m[2]) > 0) answers[status] = (answers[status] ?? 0) + Number(m[2]);
  }
  const nonzero = (r: Record<string, number>): Record<string, number> => Object.fromEntries(Object.entries(r).filter(([, v]) => v > 0));
  return {
    prefilled: samples(metrics, 'kvcanary_engine_prompt_tokens_total')[''] ?? 0,
    generated: samples(metrics, 'kvcanary_engine_generation_tokens_total')[''] ?? 0,
    answers,
    rejected: nonzero(samples(metrics, 'kvcanary_engine_requests_rejected_total', 'code')),
    finished: nonzero(samples(metrics, 'kvcanary_engine_requests_finished_total', 'reason')),
  };
}

export async function measureRun(children: ChildTracker, spec: RunSpec): Promise<MeasuredRun> {
  const home = mkdtempSync(join(tmpdir(), 'kvcanary-full-scale-'));
  const engine = children.spawn(process.execPath, ['bin/kvcanary.js', 'engine', '--preset', spec.preset, '--scale', String(spec.scale), '--attention', spec.attention, '--port', '0'], { stderr: 'ignore' });
  try {
    const line = await firstLine(engine, 300_000);
    const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(line)?.[1];
    if (url === undefined) throw new Error(`engine printed no URL: ${line}`);
    const t0 = performance.now();
    const prober = children.spawn(process.execPath, ['bin/kvcanary.js', 'run', '--target', url, '--scenario', spec.scenario, '--json', ...spec.runArgs], {
      stderr: 'pipe', env: { ...process.env, KVCANARY_HOME: home },
    });
    let err = '';
    prober.stderr!.on('data', (d: Buffer) => (err = (err + d.toString('utf8')).slice(-2000)));
    let proberPeak = 0;
    const poll = setInterval(() => (proberPeak = Math.max(proberPeak, peakMiB(prober.pid))), 200);
    let out = '';
    prober.stdout!.on('data', (d: Buffer) => (out += d.toString('utf8')));
    await exited(prober);
    clearInterval(poll);
    const seconds = (performance.now() - t0) / 1000;
    if (out.trim() === '') throw new Error(`kvcanary run printed no JSON (exit ${prober.exitCode}): ${err}`);
    const doc = JSON.parse(out) as { scenarios: { name: string; outcome: string; reason?: string; power?: unknown; requests: number; tokens: { sent: number; billed: number } }[] };
    const s = doc.scenarios.find((x) => x.name === spec.scenario);
    if (s === undefined) throw new Error(`no ${spec.scenario} in the run's JSON`);
    // Let the engine finish what the run aborted (released pages, counters settled) before reading them.
    await new Promise((r) => setTimeout(r, 1000));
    const metrics = await (await fetch(`${url}/metrics`)).text();
    const counters = engineCounters(metrics);
    return {
      name: spec.scenario, preset: spec.preset, scale: spec.scale, mode: spec.attention,
      outcome: s.outcome, ...(s.reason !== undefined ? { reason: s.reason } : {}), ...(s.power !== undefined ? { power: s.power } : {}),
      requests: s.requests, sent: s.tokens.sent, billed: s.tokens.billed,
      computed: counters.prefilled + counters.generated, engine: counters,
      seconds: Math.round(seconds * 10) / 10,
      enginePeakMiB: peakMiB(engine.pid), proberPeakMiB: proberPeak,
    };
  } finally {
    killGroup(engine);
    await exited(engine);
    rmSync(home, { recursive: true, force: true });
  }
}
