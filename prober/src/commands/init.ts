/**
 * `kvcanary init [FILE] [--force]`: write a commented example serve config to copy from (default
 * ./kvcanary.yaml). It passes `check-config` as written; every optional key is shown with its default.
 */
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { DEFAULT_SCENARIO_INTERVALS } from '../service/scenario-schedule.js';
import { writeOutputFile } from './output-file.js';
import { UsageError } from './usage.js';
import { shownPath } from '../shown-value.js';

const USAGE = `usage: kvcanary init [FILE] [--force]

  FILE     where to write the example config (default ./kvcanary.yaml)
  --force  overwrite FILE if it exists (a regular file: never a symbolic link, FIFO or device)`;

export function exampleConfig(): string {
  const tiers = Object.entries(DEFAULT_SCENARIO_INTERVALS).map(([s, d]) => `    ${s}: ${d}`).join('\n');
  return `# kvcanary serve config: \`kvcanary check-config kvcanary.yaml\`, then \`kvcanary serve --config kvcanary.yaml\`.
# Every key is optional unless marked required; the values shown are the defaults unless noted.
# Reload without a restart: SIGHUP (a bad new config keeps the old one and logs why).

listen: 127.0.0.1:9464            # /metrics, /healthz, the status page and /api; bind 0.0.0.0:9464 in a container
# external_url: https://kvcanary-{shard}.example.com/   # the status page as on-call reaches it ({shard}: the
#                                   # shard index); alerts link to it (docs/operations.md "Metrics")
store:
  path: ./kvcanary.sqlite         # evidence database (relative to this file); "{shard}" becomes the shard index
  retention: 7d                   # requests and markers older than this are pruned; runs and findings are kept
log:
  level: info

schedule:
  interval: 5m                    # a cycle of every target this often
  timeout: 2m                     # a cycle still running after this is aborted (inconclusive); below interval
  jitter: 30s
  # Cost tiers (the defaults): each scenario listed runs once per its interval, the others (capacity-audit,
  # which sends no prompts) every cycle. A key given overrides its default; \`NAME: every_cycle\` drops one
  # tier, \`scenarios: every_cycle\` all of them: every scenario every cycle (docs/cost.md "Cost tiers (the default)").
  scenarios:
${tiers}

budget:
  tokens_per_hour: auto           # per target; auto: from the tiers and the endpoint's advertised sizes
concurrency:
  global: 4
  per_target: 2

targets:                          # required: at least one
  - name: my-endpoint             # required; the \`target\` label
    base_url: http://127.0.0.1:8000   # the server root, with or without /v1
    # model: glm-5.3              # default: the first of /v1/models
    # api_key_env: MY_KEY         # the NAME of an environment variable holding the key (never the key)
    # api_key_file: /run/secrets/kvcanary/key   # or a file; re-read when it changes (key rotation)
    # tenants:                    # two identities for the cross-tenant scenarios
    #   a: { api_key_env: KEY_A }
    #   b: { api_key_env: KEY_B, cache_salt: s2 }
    # schedule: { interval: 10m } # per-target overrides
    # budget: { tokens_per_hour: 500000 }

  # Fleet mode: probe every replica of a deployment. Each address found becomes target NAME/HOST:PORT with
  # everything above but the URL. Run several \`serve --shard INDEX/COUNT\` replicas to split them.
  # - name: glm
  #   discover:
  #     file_sd: ./replicas.json  # Prometheus file_sd JSON/YAML, re-read when it changes
  #     # dns: glm-headless.default.svc.cluster.local:8000   # every A/AAAA address (a headless Service)
  #     # dns_srv: _http._tcp.glm.default.svc.cluster.local  # SRV records
  #     refresh: 30s
  #     scheme: http
  #     path_prefix: /v1
  #     allow: []               # also probe link-local, metadata or unspecified addresses (docs/security.md)

# Acknowledged findings: still recorded and shown, but they fail no run and page no one until they expire.
# \`kvcanary ack\` adds silences to the store; \`kvcanary report\` lists both.
# silences:
#   - target: glm/*               # a name, or a pattern with *
#     kind: pool-below-context    # a finding kind, or *
#     expires: 2026-12-31T00:00:00Z   # at most 90 days ahead
#     reason: "pool resize scheduled, TICKET-123"
`;
}

export async function initMain(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args, strict: true, allowPositionals: true, options: { force: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h', default: false } } });
    if (parsed.positionals.length > 1) throw new Error(`expected at most one FILE, got ${parsed.positionals.length}`);
  } catch (err) {
    process.stderr.write(`kvcanary init: ${(err as Error).message}\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  if (parsed.values.help) {
    process.stderr.write(USAGE + '\n');
    return EXIT.pass;
  }
  const file = parsed.positionals[0] ?? 'kvcanary.yaml';
  // Never through a link (a dangling one would create its target), never over a FIFO or device, a missing
  // folder is the operator's to create: each a usage error naming FILE.
  try {
    writeOutputFile(file, exampleConfig(), { what: 'init', overwrite: parsed.values.force, existsHint: 'exists; pass --force to overwrite it', protect: [] });
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`kvcanary ${err.message}\n`);
    return EXIT.usage;
  }
  process.stdout.write(`wrote ${shownPath(file)}: edit the target, then \`kvcanary check-config FILE\`\n`);
  return EXIT.pass;
}
