/**
 * deploy/ kept consistent with the code: the ConfigMap's config passes check-config's validation, the
 * PrometheusRule is exactly the rules files, the StatefulSet's args are flags `serve` accepts and its ports,
 * Service, ServiceMonitor and shard environment agree, and the Dockerfile is what docs/deployment.md promises.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { parseConfig } from '../../prober/src/service/config.js';
import { shardFromArgs, shardOf } from '../../prober/src/service/shard.js';
import { SCENARIO_NAMES } from '../../prober/src/probe/scenarios/index.js';
import { prometheusRule, OUTPUT } from '../../deploy/prometheusrule.js';
import { imageLayout, imageNodeOptions, sizeFlagMiB } from '../../deploy/image-runtime.js';
import { MARKER_KEY_FILE_ENV } from '../../prober/src/installation/marker-key.js';
import { runCli } from '../helpers/cli.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const k8s = (f: string): Record<string, any> => parseYaml(readFileSync(join(root, 'deploy', 'k8s', f), 'utf8')) as Record<string, any>;

const statefulSet = k8s('statefulset.yaml');
const container = statefulSet.spec.template.spec.containers[0];
const configMap = k8s('configmap.yaml');
const env = Object.fromEntries((container.env as { name: string; value?: string }[]).map((e) => [e.name, e.value ?? 'set-from-a-secret']));

describe('deploy/k8s', () => {
  it('the ConfigMap\'s config is valid, with the environment the StatefulSet gives it', () => {
    const config = parseConfig(configMap.data['kvcanary.yaml'], { knownScenarios: SCENARIO_NAMES, env });
    expect(config.discovery?.[0]?.spec.source).toMatchObject({ kind: 'dns' });
    expect(config.store.path).toMatch(/^\/var\/lib\/kvcanary\/.*\{shard\}/);
    const storeMount = container.volumeMounts.find((m: { name: string }) => m.name === 'store');
    expect(config.store.path.startsWith(`${storeMount.mountPath}/`)).toBe(true);
    expect(`${config.listen.host}:${config.listen.port}`).toBe('0.0.0.0:9464');
  });

  it('the StatefulSet runs `serve` with flags it accepts, the mounted config, and one shard per pod ordinal', async () => {
    const args = container.args as string[];
    expect(args[0]).toBe('serve');
    const help = await runCli(['serve', '--help']);
    for (const flag of args.filter((a) => a.startsWith('--'))) expect(help.stderr).toContain(`${flag} `);
    const configPath = args[args.indexOf('--config') + 1]!;
    const configMount = container.volumeMounts.find((m: { name: string }) => m.name === 'config');
    expect(configPath).toBe(`${configMount.mountPath}/kvcanary.yaml`);
    expect(Object.keys(configMap.data)).toEqual(['kvcanary.yaml']);
    const listen = args[args.indexOf('--listen') + 1]!;
    expect(Number(listen.split(':')[1])).toBe(container.ports[0].containerPort);

    const replicas = statefulSet.spec.replicas as number;
    expect(Number(env.KVCANARY_SHARD_COUNT)).toBe(replicas);
    expect(container.env.find((e: { name: string }) => e.name === 'KVCANARY_SHARD_INDEX').valueFrom.fieldRef.fieldPath).toBe('metadata.name');
    const shards = Array.from({ length: replicas }, (_, i) => shardFromArgs(undefined, { KVCANARY_SHARD_INDEX: `${statefulSet.metadata.name}-${i}`, KVCANARY_SHARD_COUNT: String(replicas) }));
    expect(shards.map((s) => s?.index)).toEqual(Array.from({ length: replicas }, (_, i) => i));
    expect(new Set(Array.from({ length: 300 }, (_, i) => shardOf(`glm/10.0.0.${i}:8000`, replicas))).size).toBe(replicas);

    const sec = container.securityContext;
    expect(sec.readOnlyRootFilesystem).toBe(true);
    expect(statefulSet.spec.template.spec.securityContext.runAsNonRoot).toBe(true);
    expect(container.volumeMounts.map((m: { mountPath: string }) => m.mountPath)).toContain('/tmp');
  });

  it('every shard reads one marker key from the Secret (read-only, not world-readable), with its home on the store volume', () => {
    const pod = statefulSet.spec.template.spec;
    const keyFile = env[MARKER_KEY_FILE_ENV]!;
    expect(keyFile).toMatch(/^\//);
    const mount = container.volumeMounts.find((m: { mountPath: string }) => keyFile.startsWith(`${m.mountPath}/`));
    expect(mount, `${MARKER_KEY_FILE_ENV} ${keyFile} is on no volume`).toBeDefined();
    expect(mount.readOnly).toBe(true);
    const volume = pod.volumes.find((v: { name: string }) => v.name === mount.name);
    expect(volume.secret.secretName).toBe('kvcanary-marker-key');
    expect(volume.secret.defaultMode & 0o007).toBe(0); // YAML 1.2 has no 0440: a decimal 288 is 0440
    expect(volume.secret.defaultMode & 0o040).toBe(0o040); // the group (fsGroup) reads it
    expect(pod.securityContext.fsGroup).toBe(pod.securityContext.runAsGroup);
    // The installation home (Dockerfile ENV) is the store volume: the root filesystem is read-only.
    const storeMount = container.volumeMounts.find((m: { name: string }) => m.name === 'store');
    expect(imageLayout().env.KVCANARY_HOME ?? env.KVCANARY_HOME).toBe(storeMount.mountPath);
  });

  it('no service account token, a startup probe before liveness counts, and a PodDisruptionBudget of one shard at a time', () => {
    const pod = statefulSet.spec.template.spec;
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(container.startupProbe.httpGet).toEqual(container.livenessProbe.httpGet);
    expect(container.startupProbe.periodSeconds * container.startupProbe.failureThreshold).toBeGreaterThanOrEqual(60);
    const pdb = k8s('poddisruptionbudget.yaml');
    expect(pdb.apiVersion).toBe('policy/v1');
    expect(pdb.spec.selector.matchLabels).toEqual(statefulSet.spec.template.metadata.labels);
    expect(pdb.spec.maxUnavailable).toBe(1);
  });

  it('the NetworkPolicy lets in Prometheus on the metrics port, and out only DNS and the discovered model server pods', () => {
    const policy = k8s('networkpolicy.yaml');
    expect(policy.spec.podSelector.matchLabels).toEqual(statefulSet.spec.template.metadata.labels);
    expect([...policy.spec.policyTypes].sort()).toEqual(['Egress', 'Ingress']);
    expect(policy.spec.ingress).toHaveLength(1);
    expect(policy.spec.ingress[0].ports).toEqual([{ port: container.ports[0].name, protocol: 'TCP' }]);
    expect(policy.spec.ingress[0].from[0].podSelector.matchLabels['app.kubernetes.io/name']).toBe('prometheus');
    // Every egress rule names its peers and ports: none allows everything (the metadata address included).
    for (const rule of policy.spec.egress) {
      expect(rule.to?.length).toBeGreaterThan(0);
      expect(rule.ports?.length).toBeGreaterThan(0);
      for (const peer of rule.to) expect(peer.ipBlock).toBeUndefined();
    }
    const dns = policy.spec.egress.find((r: { ports: { port: number }[] }) => r.ports.some((p) => p.port === 53));
    expect(dns.ports).toEqual(expect.arrayContaining([{ port: 53, protocol: 'UDP' }, { port: 53, protocol: 'TCP' }]));
    // The model server: the ConfigMap discovers <service>.<namespace>.svc...:<port>; the headless Service selects its pods.
    const config = parseConfig(configMap.data['kvcanary.yaml'], { knownScenarios: SCENARIO_NAMES, env });
    const source = config.discovery![0]!.spec.source as { kind: 'dns'; host: string; port: number };
    const [service, namespace] = source.host.split('.');
    const headless = k8s('headless-service-example.yaml');
    expect(headless.metadata.name).toBe(service);
    expect(headless.metadata.namespace).toBe(namespace);
    const server = policy.spec.egress.find((r: object) => r !== dns);
    expect(policy.spec.egress).toHaveLength(2);
    expect(server.to).toEqual([{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': namespace } }, podSelector: { matchLabels: headless.spec.selector } }]);
    expect(server.ports).toEqual([{ port: headless.spec.ports[0].targetPort, protocol: 'TCP' }]);
    expect(headless.spec.ports[0].port).toBe(source.port);
  });

  it('the store volume holds a shard of the targets the memory limit holds with every scenario (bench/scale.json), from the per-target figure (bench/markers.json)', () => {
    // The most targets running every scenario that bench:scale measured within the memory limit (docs/fleet.md
    // "Sizing", bench/scale.json: 50); 26 weeks of the kept record.
    const limitMiB = Number(/^(\d+)Mi$/.exec(container.resources.limits.memory as string)![1]);
    const rows = (JSON.parse(readFileSync(join(root, 'bench', 'scale.json'), 'utf8')) as { rows: Array<{ set: string; heap: string; targets: number; rssMaxMiB: number }> }).rows;
    const TARGETS = Math.max(...rows.filter((r) => r.set.startsWith('every scenario') && r.heap === 'image' && r.rssMaxMiB <= limitMiB).map((r) => r.targets));
    expect(TARGETS).toBe(50);
    const WEEKS_KEPT = 26;
    const projection = (JSON.parse(readFileSync(join(root, 'bench', 'markers.json'), 'utf8')) as {
      growth: { projection: { retention: { days: number; intervalMinutes: number }; steadyStatePrunedBytes: number; keptBytesPerRetentionPeriod: number } };
    }).growth.projection;
    const config = parseConfig(configMap.data['kvcanary.yaml'], { knownScenarios: SCENARIO_NAMES, env });
    // The figure was projected for the ConfigMap's own retention and interval.
    expect(config.store.retentionMs).toBe(projection.retention.days * 86_400_000);
    expect(config.schedule.intervalMs).toBe(projection.retention.intervalMinutes * 60_000);
    const perTarget = projection.steadyStatePrunedBytes + projection.keptBytesPerRetentionPeriod * WEEKS_KEPT * 7 / projection.retention.days;
    const claim = statefulSet.spec.volumeClaimTemplates.find((c: { metadata: { name: string } }) => c.metadata.name === 'store');
    const gi = /^(\d+)Gi$/.exec(claim.spec.resources.requests.storage as string);
    expect(gi, 'storage in Gi').not.toBeNull();
    expect(Number(gi![1]) * 2 ** 30).toBeGreaterThanOrEqual(TARGETS * perTarget);
    expect(Number(gi![1]) * 2 ** 30).toBeLessThanOrEqual(1.5 * TARGETS * perTarget);
  });

  it('the Service and ServiceMonitor reach the container\'s metrics port, and the pods they select', () => {
    const service = k8s('service.yaml');
    const monitor = k8s('servicemonitor.yaml');
    const port = container.ports[0];
    expect(service.spec.ports[0].targetPort).toBe(port.name);
    expect(monitor.spec.endpoints[0].port).toBe(service.spec.ports[0].name);
    expect(monitor.spec.endpoints[0].path).toBe('/metrics');
    expect(service.spec.selector).toEqual(statefulSet.spec.template.metadata.labels);
    expect(monitor.spec.selector.matchLabels).toEqual(service.metadata.labels);
  });

  it('the PrometheusRule is exactly dashboards/alerts.yaml and fleet-alerts.yaml (`npx tsx deploy/prometheusrule.ts`)', () => {
    expect(readFileSync(join(root, OUTPUT), 'utf8')).toBe(prometheusRule());
    const groups = k8s('prometheusrule.yaml').spec.groups as unknown[];
    const fromFiles = ['alerts.yaml', 'fleet-alerts.yaml'].flatMap((f) => (parseYaml(readFileSync(join(root, 'dashboards', f), 'utf8')) as { groups: unknown[] }).groups);
    expect(groups).toEqual(fromFiles);
  });
});

describe('deploy/Dockerfile', () => {
  it('is Node 20 slim, production dependencies only, non-root, with the store on a volume', () => {
    const text = readFileSync(join(root, 'deploy', 'Dockerfile'), 'utf8');
    expect(text).toMatch(/^FROM node:20(\.[\d.]+)?-slim$/m);
    expect(text).toMatch(/^RUN npm ci --omit=dev/m);
    expect(text).toMatch(/^USER node$/m);
    expect(text).toMatch(/^VOLUME \["\/var\/lib\/kvcanary"\]$/m);
    const storeMount = container.volumeMounts.find((m: { name: string }) => m.name === 'store');
    expect(storeMount.mountPath).toBe('/var/lib/kvcanary');
    expect(text).toMatch(/EXPOSE 9464/);
  });

  it('runs the compiled build (dist/), not the TypeScript sources under tsx', () => {
    const text = readFileSync(join(root, 'deploy', 'Dockerfile'), 'utf8');
    const stages = text.split(/^FROM /m).slice(1);
    expect(stages.length).toBe(2);
    expect(stages[0]).toMatch(/^RUN npm run build$/m);
    expect(stages[1]).toMatch(/^COPY --from=build \S+\/dist \.\/dist$/m);
    expect(stages[1]).not.toMatch(/\/src\b/);
    expect(stages[1]).toMatch(/^ENTRYPOINT \["node", (?:"--[a-z-]+(?:=\w+)?", )*"bin\/kvcanary\.js"\]$/m);
  });

  it('sizes V8\'s heap for the StatefulSet\'s memory limit, with room for what is not heap', () => {
    const options = imageNodeOptions();
    const oldSpace = sizeFlagMiB(options, '--max-old-space-size');
    const semiSpace = sizeFlagMiB(options, '--max-semi-space-size');
    expect(oldSpace, options).toBeDefined();
    expect(semiSpace, options).toBeDefined();
    const limit = /^(\d+)Mi$/.exec(container.resources.limits.memory as string);
    expect(limit, 'limits.memory in Mi').not.toBeNull();
    // Beside the heap: the node binary's pages, code space, native allocations (measured ~60 MiB in bench/SCALE.md).
    const notHeapMiB = 96;
    expect(oldSpace! + 3 * semiSpace! + notHeapMiB).toBeLessThanOrEqual(Number(limit![1]));
  });
});
