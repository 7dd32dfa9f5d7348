/**
 * The container as deploy/Dockerfile and deploy/k8s/statefulset.yaml describe it, run with bubblewrap (`bwrap`,
 * Debian's `bubblewrap`) standing in for the container runtime. Everything is read from those files, not
 * restated here:
 * - the image: its `WORKDIR` laid out from its `COPY` instructions (the build stage's dist/ from a build made
 *   for the test; `npm ci --omit=dev`'s node_modules from the checkout's), its `ENV`, its `ENTRYPOINT`'s node
 *   flags and script, `USER node` (uid 1000 in node's images) with its HOME;
 * - the pod: the container's args and env (`fieldRef: metadata.name` is the first pod's name, a
 *   `secretKeyRef` a value the caller gives), `runAsUser`/`runAsGroup`, `readOnlyRootFilesystem`, and exactly
 *   its volumeMounts, each backed by a folder of the caller's (a configMap's or Secret's files, an emptyDir,
 *   a volumeClaimTemplate), read-only where the mount or the volume kind says so.
 * The sandbox's root is a fresh tmpfs holding only those, read-only, with the host's /usr and a few /etc files
 * (read-only) standing for the base image's system files: the checkout, /work, /root and the host's /tmp are not there.
 * Not stood in for: the pod's network namespace (the sandbox shares the host's, so the caller replaces the
 * listen address with 127.0.0.1:0) and its process namespace (so the caller can signal serve by its pid).
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { imageLayout, type ImageLayout } from '../../deploy/image-runtime.js';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
const K8S = path.join(REPO, 'deploy', 'k8s');

/** The `node` user of the node:20 images (/etc/passwd there): what `USER node` runs as. */
export const NODE_IMAGE_USER = { name: 'node', uid: 1000, gid: 1000, home: '/home/node' };
/** What a Node process reads of /etc: names, users, time zone, TLS roots. */
const HOST_ETC = ['passwd', 'group', 'hosts', 'resolv.conf', 'nsswitch.conf', 'host.conf', 'gai.conf', 'localtime', 'ssl', 'ca-certificates'];
/** The node image's PATH (its ENV, inherited by the final stage). */
const NODE_IMAGE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export type Manifest = Record<string, any>;

export function k8sManifest(file: string): Manifest {
  return parseYaml(readFileSync(path.join(K8S, file), 'utf8')) as Manifest;
}

export interface VolumeMount { name: string; mountPath: string; readOnly: boolean; kind: 'configMap' | 'secret' | 'emptyDir' | 'persistentVolumeClaim'; source: Manifest }

export interface PodSpec {
  statefulSet: Manifest;
  container: Manifest;
  /** The first pod's name (`<statefulset>-0`). */
  podName: string;
  uid: number;
  gid: number;
  readOnlyRoot: boolean;
  mounts: VolumeMount[];
}

export function podSpec(statefulSet = k8sManifest('statefulset.yaml')): PodSpec {
  const pod = statefulSet.spec.template.spec;
  const container = pod.containers[0];
  const volumes = new Map<string, Manifest>((pod.volumes ?? []).map((v: Manifest) => [v.name, v]));
  const claims = new Map<string, Manifest>((statefulSet.spec.volumeClaimTemplates ?? []).map((c: Manifest) => [c.metadata.name, c]));
  const mounts = (container.volumeMounts as Manifest[]).map((m): VolumeMount => {
    const v = volumes.get(m.name);
    const kind = v === undefined ? (claims.has(m.name) ? 'persistentVolumeClaim' : undefined)
      : (['configMap', 'secret', 'emptyDir'] as const).find((k) => v[k] !== undefined);
    if (kind === undefined) throw new Error(`statefulset.yaml: volumeMount ${m.name} has no volume or claim of a kind the sandbox knows`);
    // configMap and Secret volumes are read-only in Kubernetes whatever the mount says.
    return { name: m.name, mountPath: m.mountPath, readOnly: m.readOnly === true || kind === 'configMap' || kind === 'secret', kind, source: v ?? claims.get(m.name)! };
  });
  const sc = { ...pod.securityContext, ...container.securityContext };
  return {
    statefulSet, container, podName: `${statefulSet.metadata.name}-0`,
    uid: sc.runAsUser, gid: sc.runAsGroup, readOnlyRoot: sc.readOnlyRootFilesystem === true, mounts,
  };
}

/** The container's env as Kubernetes would set it: values, the pod name for `metadata.name`, secrets from `secrets[name/key]`. */
export function containerEnv(spec: PodSpec, secrets: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of spec.container.env as Manifest[]) {
    if (e.value !== undefined) env[e.name] = String(e.value);
    else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.name') env[e.name] = spec.podName;
    else if (e.valueFrom?.secretKeyRef !== undefined) {
      const ref = `${e.valueFrom.secretKeyRef.name}/${e.valueFrom.secretKeyRef.key}`;
      if (secrets[ref] === undefined) throw new Error(`statefulset.yaml: env ${e.name} needs secret ${ref}; give it`);
      env[e.name] = secrets[ref];
    } else throw new Error(`statefulset.yaml: env ${e.name}: a source the sandbox does not know`);
  }
  return env;
}

export interface SandboxOptions {
  /** The build stage's output (`node scripts/build.mjs --out DIR`): what `COPY --from=build` takes. */
  dist: string;
  /** A host folder backing each volumeMount, by volume name. */
  volumes: Record<string, string>;
  /** Values of the secrets the env refers to, as `name/key`. */
  secrets: Record<string, string>;
  /** Arguments in place of the container's (default: its args). */
  args?: string[];
  image?: ImageLayout;
  pod?: PodSpec;
}

export interface Sandboxed {
  child: ChildProcessByStdio<null, Readable, Readable>;
  /** The sandboxed process's pid on the host (bwrap's --info-fd), once known. */
  pid: Promise<number>;
  /** The bwrap command line, for messages. */
  argv: string[];
}

/** bwrap's arguments for the image and pod, and the command the container runs. */
export function sandboxArgv(o: SandboxOptions): { bwrap: string[]; env: Record<string, string> } {
  const image = o.image ?? imageLayout();
  const pod = o.pod ?? podSpec();
  if (image.user !== NODE_IMAGE_USER.name) throw new Error(`deploy/Dockerfile: USER ${image.user}; the sandbox knows the node image's \`node\` user`);
  const env: Record<string, string> = { PATH: NODE_IMAGE_PATH, HOME: NODE_IMAGE_USER.home, ...image.env, ...containerEnv(pod, o.secrets) };
  const a: string[] = ['--unshare-user', '--uid', String(pod.uid ?? NODE_IMAGE_USER.uid), '--gid', String(pod.gid ?? NODE_IMAGE_USER.gid),
    '--unshare-ipc', '--unshare-uts', '--die-with-parent', '--new-session', '--clearenv'];
  for (const [k, v] of Object.entries(env)) a.push('--setenv', k, v);
  // The base image's system files: the host's /usr and the few /etc files a Node process reads, read-only
  // (the rest of /etc is the image's own: its folders, such as the config mount point, are made here).
  a.push('--ro-bind', '/usr', '/usr', '--dir', '/etc');
  for (const f of HOST_ETC) a.push('--ro-bind-try', `/etc/${f}`, `/etc/${f}`);
  for (const l of ['bin', 'sbin', 'lib', 'lib64']) a.push('--symlink', `usr/${l}`, `/${l}`);
  a.push('--proc', '/proc', '--dev', '/dev', '--dir', '/tmp', '--dir', '/var/tmp');
  // The image's WORKDIR from its COPY instructions, and `RUN npm ci --omit=dev`'s node_modules.
  const inWorkdir = (p: string): string => path.posix.resolve(image.workdir, p);
  for (const c of image.copies) {
    for (const src of c.sources) {
      const dest = c.dest.endsWith('/') || c.sources.length > 1 ? path.posix.join(inWorkdir(c.dest), path.posix.basename(src)) : inWorkdir(c.dest);
      a.push('--ro-bind', c.fromBuild ? o.dist : path.join(REPO, src), dest);
    }
  }
  a.push('--ro-bind', realpathSync(path.join(REPO, 'node_modules')), inWorkdir('node_modules'));
  for (const m of pod.mounts) {
    const host = o.volumes[m.name];
    if (host === undefined) throw new Error(`volume ${m.name} (${m.kind}) at ${m.mountPath}: give a host folder for it`);
    a.push(m.readOnly ? '--ro-bind' : '--bind', host, m.mountPath);
  }
  if (pod.readOnlyRoot) a.push('--remount-ro', '/');
  a.push('--chdir', image.workdir, '--info-fd', '3', '--', 'node', ...image.nodeArgs, image.script, ...(o.args ?? pod.container.args as string[]));
  return { bwrap: a, env };
}

export function startSandboxed(o: SandboxOptions): Sandboxed {
  const { bwrap } = sandboxArgv(o);
  const child = spawn('bwrap', bwrap, { stdio: ['ignore', 'pipe', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } }) as unknown as ChildProcessByStdio<null, Readable, Readable>;
  const info = (child.stdio as unknown as Readable[])[3]!;
  const pid = new Promise<number>((resolve, reject) => {
    let text = '';
    info.on('data', (c: Buffer) => {
      text += c.toString();
      const m = /"child-pid":\s*(\d+)/.exec(text);
      if (m !== null) resolve(Number(m[1]));
    });
    info.on('end', () => reject(new Error(`bwrap gave no child pid: ${text}`)));
    child.on('error', reject);
  });
  pid.catch(() => {});
  return { child, pid, argv: ['bwrap', ...bwrap] };
}
