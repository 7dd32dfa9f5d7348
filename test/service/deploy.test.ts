/**
 * deploy/ kept consistent with the code: the ConfigMap's config passes check-config's validation, the
 * PrometheusRule is exactly the rules files, the StatefulSet's args are flags `serve` accepts and its ports,
 * Service, ServiceMonitor and shard environment agree, and the Dockerfile is what the README promises.
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
import { imageNodeOptions, sizeFlagMiB } from '../../deploy/image-runtime.js';
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
