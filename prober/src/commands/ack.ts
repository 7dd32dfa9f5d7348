/**
 * `kvcanary ack`: acknowledge a known finding for a while (a silence in the evidence store). A running
 * `serve` on that store picks it up at its next probe call: matching findings are still recorded and shown,
 * marked acknowledged, but no longer fail runs or count in kvcanary_findings_total (so they do not page).
 * `kvcanary run --store FILE` applies the silences of its store the same way (a run is named by its endpoint: its config target's name, else HOST:PORT).
 */
import { existsSync } from 'node:fs';
import { userInfo } from 'node:os';
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { ConfigError, DEFAULTS, loadConfig, parseDuration } from '../service/config.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import { parseSilence } from '../service/silences.js';
import { openStore } from '../service/store.js';
import { UsageError } from './usage.js';
import { storePathsOf } from './store-paths.js';

const USAGE = `usage: kvcanary ack [--store FILE... | --config FILE] --target NAME --kind KIND [--scenario NAME]
                    --expires WHEN --reason TEXT

  --store FILE      evidence database (default ${DEFAULTS.storePath}); repeat it for every shard's store
  --config FILE     take the store path from a serve config (with {shard}: every shard's store found there)
  --target NAME     the target, or a pattern with * (glm/* is every discovered replica of glm)
  --kind KIND       the finding kind (cross-request-leak, rejection-not-enforced, ...) or *
  --scenario NAME   only findings of this scenario
  --expires WHEN    a duration from now (7d, 12h) or an ISO time; at most 90 days
  --reason TEXT     why (shown wherever the finding is: status page, report, logs)`;

export async function ackMain(args: string[]): Promise<number> {
  let v;
  try {
    v = parseArgs({ args, strict: true, allowPositionals: false, options: {
      store: { type: 'string', multiple: true }, config: { type: 'string' }, target: { type: 'string' }, kind: { type: 'string' },
      scenario: { type: 'string' }, expires: { type: 'string' }, reason: { type: 'string' }, help: { type: 'boolean', short: 'h', default: false },
    } }).values;
    if (v.store !== undefined && v.config !== undefined) throw new UsageError('give --store or --config, not both');
  } catch (err) {
    process.stderr.write(`kvcanary ack: ${(err as Error).message}\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  if (v.help) {
    process.stderr.write(USAGE + '\n');
    return EXIT.pass;
  }
  const raw = { target: v.target, kind: v.kind, expires: v.expires, reason: v.reason, ...(v.scenario === undefined ? {} : { scenario: v.scenario }) };
  const createdBy = safeUser();
  const parsed = parseSilence(raw, 'ack', { now: Date.now(), knownScenarios: SCENARIO_NAMES, durationOf: parseDuration, id: '', createdBy });
  if (parsed.silence === undefined) {
    const lines = parsed.issues.map((i) => `  --${i.path.replace(/^ack\.?/, '') || 'options'}: ${i.message}`);
    process.stderr.write(`kvcanary ack: ${parsed.issues.length} problem(s)\n${lines.join('\n')}\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  let paths = v.store ?? [DEFAULTS.storePath];
  if (v.config !== undefined) {
    try {
      // ack reads only the store path: the keys' variables and files need only be named.
      paths = storePathsOf((await loadConfig(v.config, { knownScenarios: SCENARIO_NAMES, requireSecrets: false })).store.path);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      process.stderr.write(err.message + '\n');
      return EXIT.usage;
    }
  }
  const missing = paths.filter((p) => !existsSync(p));
  if (missing.length > 0) {
    process.stderr.write(`kvcanary ack: no evidence store at ${missing.join(', ')} (run \`kvcanary serve\` first, or pass --store)\n`);
    return EXIT.usage;
  }
  const { id: _id, ...silence } = parsed.silence;
  for (const path of paths) {
    const store = openStore({ path, retentionMs: Number.MAX_SAFE_INTEGER });
    try {
      const saved = store.addSilence(silence);
      process.stdout.write(`${path}: silence ${saved.id}: target=${saved.target} kind=${saved.kind}${saved.scenario === undefined ? '' : ` scenario=${saved.scenario}`} until ${saved.expiresAt}\n`);
    } finally {
      store.close();
    }
  }
  return EXIT.pass;
}

function safeUser(): string {
  try {
    const name = process.env.USER ?? userInfo().username;
    return /^[\w.@-]{1,64}$/.test(name) ? name : 'unknown';
  } catch {
    return 'unknown';
  }
}
