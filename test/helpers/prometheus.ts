/**
 * A real Prometheus for tests: Debian's `prometheus` binary on a free loopback port, with its own temp
 * config and TSDB directory, so it never touches (or depends on) a system Prometheus on :9090.
 *
 * The port is found by binding :0 and releasing it; another process could take it in between, so a
 * start whose listener fails is retried on a fresh port. Readiness is Prometheus's own `/-/ready`, and
 * stop() waits for the process to exit before removing its directory (TSDB files are still open until then).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { stringify } from 'yaml';

export class PrometheusHarnessError extends Error {
  readonly code: 'KVC_PROMETHEUS_MISSING' | 'KVC_PROMETHEUS_START' | 'KVC_PROMETHEUS_QUERY' | 'KVC_PROMETHEUS_TIMEOUT';
  constructor(code: PrometheusHarnessError['code'], message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PrometheusHarnessError';
    this.code = code;
  }
}

export interface PrometheusOptions {
  /** `host:port` endpoints to scrape (their metricsPath). */
  targets: string[];
  /** Rule files to load (resolved against the current directory). @default [] */
  ruleFiles?: string[];
  /** @default '1s' */
  scrapeInterval?: string;
  /** @default '1s' */
  evaluationInterval?: string;
  /** @default '/metrics' */
  metricsPath?: string;
  /** @default 'kvcanary' */
  jobName?: string;
  /** `host:port` of Alertmanagers to send alerts to. @default none */
  alertmanagers?: string[];
  /** Path of the binary. @default $PROMETHEUS_BIN, else `prometheus` on PATH, else /usr/bin/prometheus */
  binary?: string;
  /** How long to wait for `/-/ready`. @default 30000 */
  readyTimeoutMs?: number;
}

/** One element of an instant query result; a scalar result becomes one sample with no labels. */
export interface Sample {
  metric: Record<string, string>;
  value: number;
}

export interface RuleState {
  group: string;
  name: string;
  type: 'alerting' | 'recording';
  query: string;
  health: string;
  lastError?: string;
  /** Alerting rules only: inactive, pending or firing. */
  state?: string;
  alerts: { labels: Record<string, string>; state: string; value: string }[];
}

export interface WaitOptions {
  /** @default 20000 */
  timeoutMs?: number;
  /** @default 250 */
  intervalMs?: number;
}

export interface PrometheusHandle {
  /** Base URL, e.g. http://127.0.0.1:41234 */
  url: string;
  /** Instant query at the server's current time. */
  query(expr: string): Promise<Sample[]>;
  /** Polls `expr` until `predicate` holds; returns the samples that satisfied it. */
  waitFor(expr: string, predicate: (samples: Sample[]) => boolean, options?: WaitOptions): Promise<Sample[]>;
  /** Every loaded rule with its health and, for alerts, state and active alerts. */
  rules(): Promise<RuleState[]>;
  /** Stops the process and removes its config and storage. Safe to call twice. */
  stop(): Promise<void>;
}

const INSTALL_HINT =
  "Install Debian's `prometheus` package (apt-get install prometheus), which provides both `prometheus` and " +
  '`promtool`; .ci/run installs it in CI.';

/** Resolves a Prometheus tool to an executable path, or throws KVC_PROMETHEUS_MISSING naming the fix. */
export function findPrometheusTool(name: 'prometheus' | 'promtool', explicit?: string): string {
  const envName = name === 'prometheus' ? 'PROMETHEUS_BIN' : 'PROMTOOL_BIN';
  const fromEnv = process.env[envName];
  const candidates = explicit !== undefined ? [explicit]
    : fromEnv !== undefined && fromEnv !== '' ? [fromEnv]
    : [...(process.env.PATH ?? '').split(delimiter).filter((d) => d !== '').map((d) => join(d, name)), `/usr/bin/${name}`];
  for (const candidate of candidates) {
    try {
      accessSync(candidate, fsConstants.X_OK);
      return candidate;
    } catch {
      // try the next one
    }
  }
  throw new PrometheusHarnessError(
    'KVC_PROMETHEUS_MISSING',
    `${name} binary not found (looked for ${candidates.join(', ')}). ${INSTALL_HINT}`,
  );
}

export interface PromtoolResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs promtool with `args`, feeding `stdin` if given. Never throws for a non-zero exit: the caller judges. */
export async function runPromtool(args: string[], options: { stdin?: string; cwd?: string } = {}): Promise<PromtoolResult> {
  const bin = findPrometheusTool('promtool');
  return new Promise((resolvePromise, reject) => {
    const child = spawn(bin, args, { cwd: options.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => { stdout += d; });
    child.stderr.setEncoding('utf8').on('data', (d: string) => { stderr += d; });
    child.on('error', reject);
    child.on('close', (code) => resolvePromise({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(options.stdin ?? '');
  });
}

async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolvePromise(port));
    });
  });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Keeps the last few KB of the process's output for error messages. */
function tail(limit = 4000) {
  let text = '';
  return {
    push(chunk: string) { text = (text + chunk).slice(-limit); },
    get text() { return text; },
  };
}

function waitForExit(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolvePromise) => {
    const timer = setTimeout(() => resolvePromise(false), ms);
    child.once('exit', () => { clearTimeout(timer); resolvePromise(true); });
  });
}

async function killAndWait(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  if (await waitForExit(child, 10_000)) return;
  child.kill('SIGKILL');
  await waitForExit(child, 5_000);
}

interface ApiEnvelope<T> { status: 'success' | 'error'; data?: T; error?: string; errorType?: string }

async function getJson<T>(url: string, what: string): Promise<T> {
  const response = await fetch(url);
  const body = await response.json() as ApiEnvelope<T>;
  if (body.status !== 'success' || body.data === undefined) {
    throw new PrometheusHarnessError('KVC_PROMETHEUS_QUERY', `${what} failed (HTTP ${response.status}): ${body.errorType ?? ''} ${body.error ?? ''}`.trim());
  }
  return body.data;
}

type QueryData =
  | { resultType: 'vector'; result: { metric: Record<string, string>; value: [number, string] }[] }
  | { resultType: 'scalar' | 'string'; result: [number, string] }
  | { resultType: 'matrix'; result: { metric: Record<string, string>; values: [number, string][] }[] };

function toSamples(data: QueryData): Sample[] {
  switch (data.resultType) {
    case 'vector': return data.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
    case 'scalar': return [{ metric: {}, value: Number(data.result[1]) }];
    case 'string': return [{ metric: {}, value: Number.NaN }];
    case 'matrix': return data.result.flatMap((r) => r.values.slice(-1).map(([, v]) => ({ metric: r.metric, value: Number(v) })));
  }
}

async function launch(binary: string, dir: string, configPath: string, port: number, readyTimeoutMs: number) {
  const url = `http://127.0.0.1:${port}`;
  const output = tail();
  const child = spawn(binary, [
    `--config.file=${configPath}`,
    `--storage.tsdb.path=${join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${port}`,
    '--log.level=warn',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.setEncoding('utf8').on('data', (d: string) => output.push(d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => output.push(d));
  let spawnError: Error | undefined;
  child.once('error', (err) => { spawnError = err; });

  const deadline = Date.now() + readyTimeoutMs;
  while (Date.now() < deadline) {
    if (spawnError !== undefined || child.exitCode !== null || child.signalCode !== null) {
      return { ok: false as const, child, output: output.text, spawnError, url };
    }
    try {
      const response = await fetch(`${url}/-/ready`);
      if (response.status === 200) return { ok: true as const, child, output: output.text, url };
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  await killAndWait(child);
  throw new PrometheusHarnessError('KVC_PROMETHEUS_TIMEOUT',
    `prometheus on ${url} was not ready within ${readyTimeoutMs} ms. Its output:\n${output.text}`);
}

/** Starts a private Prometheus scraping `targets`; resolves once `/-/ready` answers 200. */
export async function startPrometheus(options: PrometheusOptions): Promise<PrometheusHandle> {
  if (options.targets.length === 0) {
    throw new TypeError('startPrometheus: expected `targets` to list at least one host:port, got none');
  }
  const binary = findPrometheusTool('prometheus', options.binary);
  const dir = await mkdtemp(join(tmpdir(), 'kvcanary-prometheus-'));
  const configPath = join(dir, 'prometheus.yml');
  const scrapeInterval = options.scrapeInterval ?? '1s';
  await writeFile(configPath, stringify({
    global: { scrape_interval: scrapeInterval, scrape_timeout: scrapeInterval, evaluation_interval: options.evaluationInterval ?? '1s' },
    rule_files: (options.ruleFiles ?? []).map((f) => resolve(f)),
    ...(options.alertmanagers === undefined ? {} : { alerting: { alertmanagers: [{ static_configs: [{ targets: options.alertmanagers }] }] } }),
    scrape_configs: [{
      job_name: options.jobName ?? 'kvcanary',
      metrics_path: options.metricsPath ?? '/metrics',
      static_configs: [{ targets: options.targets }],
    }],
  }));

  let started: Awaited<ReturnType<typeof launch>> | undefined;
  try {
    for (let attempt = 1; attempt <= 3; attempt++) {
      started = await launch(binary, dir, configPath, await freeLoopbackPort(), options.readyTimeoutMs ?? 30_000);
      if (started.ok) break;
      // Only a port lost to another process is worth another try; anything else is reported at once.
      if (!/address already in use/i.test(started.output) || attempt === 3) {
        throw new PrometheusHarnessError('KVC_PROMETHEUS_START',
          `prometheus exited before it was ready (exit ${String(started.child.exitCode ?? started.child.signalCode)})` +
          `${started.spawnError ? `: ${started.spawnError.message}` : ''}. Its output:\n${started.output}`,
          { cause: started.spawnError });
      }
    }
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  if (started === undefined || !started.ok) throw new Error('unreachable: launch loop ended without a result');
  const { child, url } = started;
  // If the test process exits without stop() (a crash, a killed worker), take Prometheus down with it.
  const killOnExit = () => { child.kill('SIGKILL'); };
  process.once('exit', killOnExit);

  let stopped: Promise<void> | undefined;
  const handle: PrometheusHandle = {
    url,
    async query(expr) {
      const data = await getJson<QueryData>(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`, `query ${JSON.stringify(expr)}`);
      return toSamples(data);
    },
    async waitFor(expr, predicate, waitOptions = {}) {
      const deadline = Date.now() + (waitOptions.timeoutMs ?? 20_000);
      let last: Sample[] = [];
      for (;;) {
        last = await handle.query(expr);
        if (predicate(last)) return last;
        if (Date.now() >= deadline) {
          throw new PrometheusHarnessError('KVC_PROMETHEUS_TIMEOUT',
            `waitFor(${JSON.stringify(expr)}): condition not met within ${waitOptions.timeoutMs ?? 20_000} ms; last result ${JSON.stringify(last)}`);
        }
        await sleep(waitOptions.intervalMs ?? 250);
      }
    },
    async rules() {
      const data = await getJson<{ groups: { name: string; rules: Omit<RuleState, 'group'>[] }[] }>(`${url}/api/v1/rules`, 'rules');
      return data.groups.flatMap((g) => g.rules.map((r) => ({ ...r, group: g.name, alerts: r.alerts ?? [] })));
    },
    stop() {
      stopped ??= (async () => {
        process.removeListener('exit', killOnExit);
        await killAndWait(child);
        await rm(dir, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
  return handle;
}
