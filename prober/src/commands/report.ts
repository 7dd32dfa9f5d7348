/**
 * `kvcanary report [--store FILE | --config FILE] [--since DURATION] [--target NAME] [--json]`: run outcomes
 * and findings from the evidence store. Evidence printed is what the store holds: bounded and redacted.
 */
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { ConfigError, DEFAULTS, loadConfig, parseDuration } from '../service/config.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import { openStore, type RunSummary, type StoredFinding } from '../service/store.js';
import { isActive, type Silence } from '../service/silences.js';
import { UsageError } from './usage.js';
import { storePathsOf } from './store-paths.js';

const USAGE = `usage: kvcanary report [--store FILE... | --config FILE] [--since DURATION] [--target NAME] [--json]

  --store FILE      evidence database (default ${DEFAULTS.storePath}); repeat it to merge several
                    shards' stores into one report
  --config FILE     take the store path from a serve config (with {shard}: every shard's store found there)
  --since DURATION  only runs and findings newer than this (default 24h), e.g. 30m, 7d
  --target NAME     only this target
  --json            one JSON document on stdout`;

export async function reportMain(args: string[]): Promise<number> {
  let v;
  try {
    v = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        store: { type: 'string', multiple: true },
        config: { type: 'string' },
        since: { type: 'string', default: '24h' },
        target: { type: 'string' },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }).values;
    if (v.store !== undefined && v.config !== undefined) throw new UsageError('give --store or --config, not both');
  } catch (err) {
    process.stderr.write(`kvcanary report: ${(err as Error).message}\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  if (v.help) {
    process.stderr.write(USAGE + '\n');
    return EXIT.pass;
  }
  const sinceMs = parseDuration(v.since);
  if (sinceMs === undefined) {
    process.stderr.write(`kvcanary report: --since: expected a duration like 30m or 7d, got '${v.since}'\n`);
    return EXIT.usage;
  }
  let paths = v.store ?? [DEFAULTS.storePath];
  if (v.config !== undefined) {
    try {
      paths = storePathsOf((await loadConfig(v.config, { knownScenarios: SCENARIO_NAMES })).store.path);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      process.stderr.write(err.message + '\n');
      return EXIT.usage;
    }
  }
  const missing = paths.filter((p) => !existsSync(p));
  if (missing.length > 0) {
    process.stderr.write(`kvcanary report: no evidence store at ${missing.join(', ')} (run \`kvcanary serve\` first, or pass --store)\n`);
    return EXIT.usage;
  }
  {
    const since = Date.now() - sinceMs;
    const filter = { since, ...(v.target !== undefined ? { target: v.target } : {}) };
    const { runs, findings, silences } = readStores(paths, filter);
    if (v.json) {
      process.stdout.write(JSON.stringify({ store: paths.length === 1 ? paths[0] : paths, since: new Date(since).toISOString(), runs, findings, silences }, null, 2) + '\n');
    } else {
      const out: string[] = [`runs since ${new Date(since).toISOString()} (${runs.length}):`];
      for (const r of runs) {
        out.push(`  ${r.finishedAt}  ${r.target.padEnd(16)} ${r.outcome.toUpperCase().padEnd(12)} ${r.scenarios.map((s) => `${s.name}=${s.outcome}`).join(' ')}`);
      }
      out.push(`findings (${findings.length}):`);
      for (const f of findings) {
        out.push(`  ${f.at}  ${f.target.padEnd(16)} ${f.kind} [${f.severity}] ${f.scenario}${f.evidence.match !== undefined ? `: ${f.evidence.match}` : ''}${f.chance > 0 ? ` (chance ≤ ${f.chance.toExponential(1)})` : ''}${f.acknowledged !== undefined ? ` ACKNOWLEDGED by ${f.acknowledged}` : ''}`);
      }
      out.push(`silences (${silences.length}):`);
      for (const s of silences) {
        out.push(`  ${isActive(s, Date.now()) ? 'active ' : 'expired'}  until ${s.expiresAt}  target=${s.target} kind=${s.kind}${s.scenario === undefined ? '' : ` scenario=${s.scenario}`}  by ${s.createdBy}: ${s.reason}`);
      }
      process.stdout.write(out.join('\n') + '\n');
    }
    const worst = runs.some((r) => r.outcome === 'fail') ? EXIT.fail : 0;
    return worst;
  }
}

/** Runs, findings and silences of one or more stores (shards), merged newest first. */
function readStores(paths: readonly string[], filter: { since: number; target?: string }): { runs: RunSummary[]; findings: (StoredFinding & { store?: string })[]; silences: Silence[] } {
  const runs: RunSummary[] = [];
  const findings: (StoredFinding & { store?: string })[] = [];
  const silences = new Map<string, Silence>();
  for (const path of paths) {
    const store = openStore({ path, retentionMs: Number.MAX_SAFE_INTEGER });
    try {
      runs.push(...store.recentRuns({ ...filter, limit: 1000 }));
      // Finding ids are per store: with several, each finding says which store holds it.
      findings.push(...store.findings({ ...filter, limit: 1000 }).map((f) => (paths.length > 1 ? { ...f, store: path } : f)));
      for (const s of store.silences()) silences.set(JSON.stringify([s.target, s.kind, s.scenario, s.expiresAt, s.reason]), s);
    } finally {
      store.close();
    }
  }
  const seen = new Set<string>();
  const uniqueRuns = runs.filter((r) => (seen.has(r.runId) ? false : (seen.add(r.runId), true)));
  uniqueRuns.sort((a, b) => b.startedAt.localeCompare(a.startedAt));
  findings.sort((a, b) => b.at.localeCompare(a.at));
  return { runs: uniqueRuns.slice(0, 1000), findings: findings.slice(0, 1000), silences: [...silences.values()] };
}
