/**
 * `serve` run exactly as the image and the StatefulSet say — the Dockerfile's ENV and ENTRYPOINT (node flags,
 * the compiled dist/), the container's args and env, uid 1000, a read-only root, and nothing but the declared
 * volumes and the marker-key Secret — with bubblewrap standing in for the container runtime
 * (test/helpers/container-sandbox.ts derives all of it from deploy/). Against a bundled incident engine
 * started outside:
 * - the control: as the image and pod were before (no KVCANARY_HOME, no key Secret) serve cannot start, its
 *   home under /home/node being on the read-only root (64, naming it; it was an internal error, 70);
 * - with the Secret's key missing, serve refuses to start (64, naming the file) and makes no key anywhere;
 * - with it, serve starts, probes (overlimit-handoff plants markers and finds the incident), and keeps
 *   its key where the manifests put it: the key id it logs is the Secret's, and no key appears on the volume;
 * - restarted (the pod replaced, the volume kept), it still recognises what it planted before: a cycle that
 *   plants nothing (overlimit-rejection) reads a marker the first pod planted and attributes it to that run.
 * The config is the ConfigMap's, with its discovered target replaced by the engine (a name shard 0 owns) and
 * the first cycle's jitter cut; the listen address is 127.0.0.1:0 (the sandbox shares the host's network).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';
import { markerKeyId, MARKER_KEY_FILE_ENV, readMarkerKey, writeNewMarkerKey } from '../../prober/src/installation/marker-key.js';
import { shardOf } from '../../prober/src/service/shard.js';
import { imageLayout, type ImageLayout } from '../../deploy/image-runtime.js';
import { k8sManifest, podSpec, REPO, sandboxArgv, startSandboxed, type PodSpec, type Sandboxed } from '../helpers/container-sandbox.js';

const dir = mkdtempSync(path.join(tmpdir(), 'kvc-confined-'));
const pod = podSpec();
const env = Object.fromEntries((pod.container.env as Array<{ name: string; value?: string }>).map((e) => [e.name, e.value]));
const keyFile = env[MARKER_KEY_FILE_ENV]!;
const keyMount = pod.mounts.find((m) => keyFile.startsWith(`${m.mountPath}/`))!;
const configMount = pod.mounts.find((m) => m.kind === 'configMap')!;
const storeMount = pod.mounts.find((m) => m.kind === 'persistentVolumeClaim')!;
const configMap = k8sManifest('configmap.yaml');
const shardCount = Number(env.KVCANARY_SHARD_COUNT);
const secrets = { 'kvcanary-keys/api-key': 'sk-confined-test-0123456789abcdef' };

/** Host folders behind the pod's volumes: a fresh one for every emptyDir per start, the same claim throughout. */
const host = {
  dist: path.join(dir, 'dist'),
  store: path.join(dir, 'store'),
  secret: path.join(dir, 'secret'),
  config: path.join(dir, 'config'),
};
let engine: RunningEngine;
let targetName: string;

function volumesFor(start: string, p: PodSpec = pod): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of p.mounts) {
    if (m.name === configMount.name) out[m.name] = host.config;
    else if (m.name === keyMount.name) out[m.name] = host.secret;
    else if (m.name === storeMount.name) out[m.name] = host.store;
    else if (m.kind === 'emptyDir') mkdirSync(out[m.name] = path.join(dir, `${start}-${m.name}`), { recursive: true });
    else throw new Error(`no host folder for volume ${m.name}`);
  }
  return out;
}

/** The ConfigMap's kvcanary.yaml, its discovered target replaced by the engine, running `scenarios`. */
function writeConfig(scenarios: string[]): void {
  const config = parseYaml(configMap.data['kvcanary.yaml'] as string) as Record<string, any>;
  const [entry] = config.targets as Array<Record<string, unknown>>;
  const { discover: _discovered, ...template } = entry!;
  config.targets = [{ ...template, name: targetName, base_url: engine.url, scenarios }];
  config.schedule = { ...config.schedule, jitter: '1s', scenarios: 'every_cycle' };
  mkdirSync(host.config, { recursive: true });
  writeFileSync(path.join(host.config, 'kvcanary.yaml'), stringifyYaml(config));
}

const listenArgs = (): string[] => {
  const args = [...(pod.container.args as string[])];
  args[args.indexOf('--listen') + 1] = '127.0.0.1:0';
  return args;
};

interface Phase { code: number | null; stdout: string; stderr: string; runs: Array<{ runId: string; outcome: string }>; findings: any[] }

/** Starts the container, waits for a run it recorded (not one of `earlierRuns`; or for its exit), stops it with SIGTERM. */
async function runPod(start: string, opts: { expectExit?: boolean; earlierRuns?: string[]; image?: ImageLayout; pod?: PodSpec } = {}): Promise<Phase> {
  const s: Sandboxed = startSandboxed({ dist: host.dist, volumes: volumesFor(start, opts.pod), secrets, args: listenArgs(), pod: opts.pod ?? pod, ...(opts.image === undefined ? {} : { image: opts.image }) });
  let stdout = '';
  let stderr = '';
  s.child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  s.child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => s.child.on('close', (code) => resolve(code)));
  const out: Phase = { code: null, stdout: '', stderr: '', runs: [], findings: [] };
  try {
    if (opts.expectExit === true) {
      out.code = await Promise.race([exited, new Promise<null>((_, reject) => setTimeout(() => reject(new Error(`did not exit:\n${stderr}`)), 60_000))]);
      return { ...out, stdout, stderr };
    }
    const deadline = Date.now() + 240_000;
    let url: string | undefined;
    while (Date.now() < deadline && s.child.exitCode === null) {
      url ??= /kvcanary serving (http:\/\/127\.0\.0\.1:\d+\/)/.exec(stdout)?.[1];
      if (url !== undefined) {
        const { runs } = await (await fetch(`${url}api/runs`)).json() as { runs: Phase['runs'] };
        if (runs.some((r) => !(opts.earlierRuns ?? []).includes(r.runId))) {
          out.runs = runs;
          out.findings = ((await (await fetch(`${url}api/findings`)).json()) as { findings: any[] }).findings;
          break;
        }
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
    expect(out.runs.length, `no run recorded by the confined serve (exit ${s.child.exitCode})\n${stderr.slice(-3000)}`).toBeGreaterThan(0);
    process.kill(await s.pid, 'SIGTERM');
    out.code = await exited;
    return { ...out, stdout, stderr };
  } finally {
    if (s.child.exitCode === null) s.child.kill('SIGKILL');
  }
}

/** Every file under a folder, relative. */
function filesUnder(d: string): string[] {
  return readdirSync(d, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => path.relative(d, path.join(e.parentPath, e.name))).sort();
}

beforeAll(async () => {
  const which = spawnSync('bwrap', ['--version'], { encoding: 'utf8' });
  if (which.status !== 0) throw new Error('bwrap (Debian package bubblewrap) is missing: run scripts/setup-test-env.sh');
  // The image's build stage: `npm run build`, here into the test's folder.
  const built = spawnSync(process.execPath, [path.join(REPO, 'scripts', 'build.mjs'), '--out', host.dist], { cwd: REPO, encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`build failed: ${built.stderr}`);
  engine = await startEngine({ preset: 'incident', scale: 64, port: 0, log: () => {} });
  // A target shard 0 (the first pod) owns among the StatefulSet's shards.
  targetName = Array.from({ length: 50 }, (_, i) => `engine-incident-${i}`).find((n) => shardOf(n, shardCount) === 0)!;
  mkdirSync(host.store, { recursive: true });
  mkdirSync(host.secret, { recursive: true });
}, 600_000);

afterAll(async () => {
  await engine?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('serve confined as the image and the StatefulSet say (bubblewrap)', () => {
  it('refuses to start without the Secret\'s key, then starts, probes, keeps its key and recognises its markers after a restart', async () => {
    expect(pod.uid).toBe(1000);
    expect(pod.readOnlyRoot).toBe(true);
    expect(keyMount.kind).toBe('secret');
    expect(storeMount.mountPath).toBe(env.KVCANARY_HOME ?? '/var/lib/kvcanary');
    writeConfig(['overlimit-handoff']);

    // The control: the image and pod as they were before the installation home and the key Secret (no
    // KVCANARY_HOME, no KVCANARY_MARKER_KEY_FILE) cannot start: the home under HOME is on the read-only root.
    const before = imageLayout();
    delete before.env.KVCANARY_HOME;
    const beforePod = structuredClone(pod);
    beforePod.container.env = (pod.container.env as Array<{ name: string }>).filter((e) => e.name !== MARKER_KEY_FILE_ENV);
    const withoutHome = await runPod('before', { expectExit: true, image: before, pod: beforePod });
    expect(withoutHome.code, withoutHome.stderr).toBe(64);
    expect(withoutHome.stderr).toMatch(/cannot create the installation folder \/home\/node\/\.config\/kvcanary/);
    expect(filesUnder(host.store)).toEqual([]);

    // The Secret mounted without the key (e.g. created under another key name): no start, no key made.
    const refused = await runPod('refused', { expectExit: true });
    expect(refused.code, refused.stderr).toBe(64);
    expect(refused.stderr).toContain(keyFile);
    expect(refused.stderr).toMatch(/never made in its place/);
    expect(filesUnder(host.store)).toEqual([]);

    // The bootstrap: one key, written once, as a Secret file (0440 as defaultMode gives it).
    const secretFile = path.join(host.secret, path.basename(keyFile));
    writeNewMarkerKey(secretFile);
    chmodSync(secretFile, 0o440);
    const keyText = readFileSync(secretFile, 'utf8');
    const keyId = markerKeyId(readMarkerKey(secretFile));

    const first = await runPod('first');
    expect(first.code, first.stderr.slice(-3000)).toBe(0);
    const firstRun = first.runs[0]!;
    // It probed: the incident is found (its unenforced rejection always; its leak in about 99 runs of 100,
    // bench/markers.json, so not required of this one run).
    expect(first.findings.map((f) => f.kind)).toContain('rejection-not-enforced');

    writeConfig(['overlimit-rejection']); // plants nothing: any marker it reads was planted before
    const second = await runPod('second', { earlierRuns: first.runs.map((r) => r.runId) });
    expect(second.code, second.stderr.slice(-3000)).toBe(0);
    const secondRun = second.runs.find((r) => r.runId !== firstRun.runId)!;
    expect(secondRun).toBeDefined();
    const leaks = second.findings.filter((f) => f.runId === secondRun.runId && f.kind === 'cross-request-leak');
    expect(leaks.length, JSON.stringify(second.findings).slice(0, 2000)).toBeGreaterThan(0);
    for (const f of leaks) expect(f.evidence.planted).toMatchObject({ runId: firstRun.runId, by: 'earlier-run' });

    // The key: the Secret's (both pods logged its id), untouched, and never copied or made on the volume.
    for (const p of [first, second]) {
      const line = p.stderr.split('\n').find((l) => l.includes('"marker key"'));
      expect(line, p.stderr.slice(0, 2000)).toBeDefined();
      expect(JSON.parse(line!).markerKey).toEqual({ file: keyFile, id: keyId, source: MARKER_KEY_FILE_ENV });
      expect(p.stdout + p.stderr).not.toContain(keyText.trim());
    }
    expect(readFileSync(secretFile, 'utf8')).toBe(keyText);
    expect(statSync(secretFile).mode & 0o777).toBe(0o440);
    // Only the store the ConfigMap names, on the volume, for shard 0.
    const storeFile = path.basename((parseYaml(configMap.data['kvcanary.yaml'] as string) as { store: { path: string } }).store.path.replace('{shard}', '0'));
    expect(filesUnder(host.store).filter((f) => !/-(wal|shm)$/.test(f))).toEqual([storeFile]);
  }, 900_000);

  it('the sandbox holds the image\'s files and the declared volumes only: the checkout is absent, only the store and /tmp are writable', () => {
    const { bwrap } = sandboxArgv({ dist: host.dist, volumes: volumesFor('look'), secrets, pod });
    const cut = bwrap.indexOf('--info-fd');
    const writable = (p: string): string => `(touch ${p}/.w 2>/dev/null && echo "W ${p}") || echo "R ${p}"`;
    const script = [
      'id -u', 'pwd', 'ls /app | tr "\\n" " "; echo',
      `test -e ${REPO} && echo "VISIBLE ${REPO}" || echo "ABSENT ${REPO}"`,
      ...['/', '/app', '/etc', '/usr', configMount.mountPath, keyMount.mountPath, storeMount.mountPath, '/tmp', '/home'].map(writable),
    ].join('; ');
    const r = spawnSync('bwrap', [...bwrap.slice(0, cut), '--', 'sh', '-c', script], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toBe('1000');
    expect(lines[1]).toBe(imageLayout().workdir);
    expect(lines[2]!.trim().split(' ').sort()).toEqual(['bin', 'dashboards', 'dist', 'node_modules', 'package-lock.json', 'package.json']);
    expect(lines).toContain(`ABSENT ${REPO}`);
    const written = lines.filter((l) => l.startsWith('W ')).map((l) => l.slice(2)).sort();
    expect(written).toEqual([storeMount.mountPath, '/tmp'].sort());
    rmSync(path.join(host.store, '.w'), { force: true });
  });
});
