/**
 * `kvcanary report [--store FILE... | --config FILE] [--since WHEN] [--target NAME] [--json]`: run outcomes,
 * skipped cycles, findings and silences from one or more evidence stores (several shards' stores merge into one report),
 * each opened read-only. Evidence printed is what the stores hold: bounded and redacted. Usage, config and
 * store problems are thrown to the CLI's error boundary (exit 64).
 */
import { jsonText } from '../json-text.js';
import { existsSync, statSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { DEFAULTS, loadConfig, type TargetConfig } from '../service/config.js';
import { freshnessMs } from '../service/scenario-schedule.js';
import { targetVerdict, type ScenarioStanding } from '../service/target-verdict.js';
import type { TargetStanding } from './report-text.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import type { Silence } from '../service/silences.js';
import { openStore, type RunSummary, type SkipSummary, type StoredFinding } from '../service/store.js';
import { parseArgsMessage, UsageError } from './usage.js';
import { reportText } from './report-text.js';
import { parseSince, SinceError } from '../since.js';
import { shownString } from '../shown-value.js';
import { storePathsOf } from './store-paths.js';

const USAGE = `usage: kvcanary report [--store FILE... | --config FILE] [--since WHEN] [--target NAME] [--json]

  --store FILE      evidence database (default ${DEFAULTS.storePath}); repeat it to merge several shards'
                    stores into one report. Opened read-only: report never creates, migrates, chmods or
                    changes the journal of a store; a file that is not a kvcanary store (schema 4 or later)
                    is refused (exit 64)
  --config FILE     take the store path from a serve config (with {shard}: every shard's store found there;
                    api_key_env variables need not be set)
  --since WHEN      only runs, skips and findings newer than this (default 24h): a duration (30m, 7d) or a
                    date/time (2026-12-01, 2026-12-01T09:30Z)
  --target NAME     only this target (a name the stores or the config know; anything else is an error)
  --json            one JSON document on stdout

exit codes: 0 no failed run in the window, 1 at least one failed run, 64 bad usage or not a kvcanary store,
70 internal error`;

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
    process.stderr.write(`kvcanary report: ${err instanceof UsageError ? err.message : parseArgsMessage(err)}\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  if (v.help) {
    process.stderr.write(USAGE + '\n');
    return EXIT.pass;
  }
  let since: number;
  try {
    since = parseSince(v.since, Date.now());
  } catch (err) {
    if (!(err instanceof SinceError)) throw err;
    throw new UsageError(`--since: ${err.message}`);
  }
  let paths = v.store ?? [DEFAULTS.storePath];
  let configured: string[] = [];
  let schedules = new Map<string, TargetConfig>();
  if (v.config !== undefined) {
    // report reads no target: the keys' variables need only be named, not set.
    const config = await loadConfig(v.config, { knownScenarios: SCENARIO_NAMES, requireSecrets: false });
    paths = storePathsOf(config.store.path);
    configured = config.targets.map((t) => t.name);
    schedules = new Map(config.targets.map((t) => [t.name, t]));
  }
  for (const path of paths) {
    if (!existsSync(path)) throw new UsageError(`no evidence store at ${path} (run \`kvcanary serve\` first, or pass --store)`);
    if (statSync(path).isDirectory()) throw new UsageError(`--store: ${path} is a directory, not an evidence store file`);
  }
  const filter = { since, ...(v.target !== undefined ? { target: v.target } : {}) };
  const read = readStores(paths, filter);
  if (v.target !== undefined) {
    const known = new Set([...configured, ...read.targets]);
    if (!known.has(v.target)) {
      throw new UsageError(`--target: no target named ${shownString(v.target)} in ${paths.join(', ')}${known.size > 0 ? ` (known: ${[...known].sort().join(', ')})` : ' (it holds no runs yet)'}`);
    }
  }
  const { runs, skips, findings, silences } = read;
  const targets = standings(read.latest, schedules, v.target, Date.now());
  if (v.json) {
    process.stdout.write(jsonText({ store: paths.length === 1 ? paths[0] : paths, since: new Date(since).toISOString(), targets, runs, skips, findings, silences }, 2) + '\n');
  } else {
    process.stdout.write(reportText({ since, targets, runs, skips, findings, silences, now: Date.now() }) + '\n');
  }
  return runs.some((r) => r.outcome === 'fail') ? EXIT.fail : EXIT.pass;
}

interface StoresRead {
  runs: RunSummary[];
  /** Per target and reason, summed over the stores; latest first. */
  skips: SkipSummary[];
  findings: (StoredFinding & { store?: string })[];
  silences: Silence[];
  /** Every target any of the stores knows (for the --target check). */
  targets: Set<string>;
  /** Each target's latest result per scenario, the newest over all stores. */
  latest: Map<string, Map<string, ScenarioStanding>>;
}

/**
 * Each target's standing now, by the overall rule (service/target-verdict.ts). With --config the target's
 * scenarios and schedule date its passes; without, every stored scenario counts and freshness is not known.
 */
function standings(latest: StoresRead['latest'], schedules: ReadonlyMap<string, TargetConfig>, only: string | undefined, now: number): TargetStanding[] {
  const names = [...new Set([...latest.keys(), ...schedules.keys()])].filter((n) => only === undefined || n === only).sort();
  return names.map((target) => {
    const t = schedules.get(target);
    const v = targetVerdict({
      scenarios: t?.scenarios ?? [], latest: [...(latest.get(target)?.values() ?? [])], now,
      freshForMs: (s) => (t === undefined ? Infinity : freshnessMs(t, s)),
    });
    return { target, verdict: v.outcome, reasons: t === undefined ? [...v.reasons, 'freshness not judged (give --config)'] : v.reasons };
  });
}

/** Runs, skips, findings and silences of one or more stores (shards), each opened read-only, merged newest first. */
function readStores(paths: readonly string[], filter: { since: number; target?: string }): StoresRead {
  const runs: RunSummary[] = [];
  const skips: SkipSummary[] = [];
  const findings: (StoredFinding & { store?: string })[] = [];
  const silences = new Map<string, Silence>();
  const targets = new Set<string>();
  const latest: StoresRead['latest'] = new Map();
  for (const path of paths) {
    const store = openStore({ path, retentionMs: Number.MAX_SAFE_INTEGER, readonly: true });
    try {
      for (const t of store.latestPerTarget()) {
        targets.add(t.target);
        const per = latest.get(t.target) ?? new Map<string, ScenarioStanding>();
        for (const s of t.scenarios) {
          const seen = per.get(s.scenario);
          if (seen === undefined || s.at > seen.at) per.set(s.scenario, { scenario: s.scenario, outcome: s.outcome, at: s.at });
        }
        latest.set(t.target, per);
      }
      // A target every scheduled run of which was skipped (its budget never fits) has skips and no run.
      for (const s of store.skipSummary()) targets.add(s.target);
      runs.push(...store.recentRuns({ ...filter, limit: 1000 }));
      skips.push(...store.skipSummary(filter));
      // Finding ids are per store: with several, each finding says which store holds it.
      findings.push(...store.findings({ ...filter, limit: 1000 }).map((f) => (paths.length > 1 ? { ...f, store: path } : f)));
      for (const s of store.silences()) silences.set(JSON.stringify([s.target, s.kind, s.scenario, s.expiresAt, s.reason]), s);
    } finally {
      store.close();
    }
  }
  resolvePlanters(paths, findings);
  const seen = new Set<string>();
  const uniqueRuns = runs.filter((r) => (seen.has(r.runId) ? false : (seen.add(r.runId), true)));
  uniqueRuns.sort((a, b) => b.startedAt.localeCompare(a.startedAt));
  findings.sort((a, b) => b.at.localeCompare(a.at));
  return { runs: uniqueRuns.slice(0, 1000), skips: mergeSkips(skips), findings: findings.slice(0, 1000), silences: [...silences.values()], targets, latest };
}

/**
 * A finding whose marker decrypted but whose planting row its own store did not hold (planted through another
 * shard, or before a store was replaced) names only the request number: any of the stores read may hold that
 * row. The first that does names the planter (and is named in `resolvedFrom`).
 */
function resolvePlanters(paths: readonly string[], findings: (StoredFinding & { store?: string })[]): void {
  const open = findings.filter((f) => f.evidence.planted?.runId === undefined && f.evidence.planted?.requestNo !== undefined);
  if (open.length === 0) return;
  for (const path of paths) {
    const store = openStore({ path, retentionMs: Number.MAX_SAFE_INTEGER, readonly: true });
    try {
      for (const f of open) {
        const p = f.evidence.planted!;
        if (p.runId !== undefined) continue;
        const row = store.findPlanting(p.requestNo!);
        if (row === undefined) continue;
        f.evidence = {
          ...f.evidence,
          planted: {
            requestNo: row.requestNo, runId: row.runId, requestId: row.requestId, role: row.role, tenant: row.tenant, at: row.plantedAt,
            by: 'earlier-run', ...(row.target !== undefined ? { target: row.target } : {}), resolvedFrom: path,
          },
        };
      }
    } finally {
      store.close();
    }
  }
}

/** One entry per target and reason: counts added (each store holds its own skips), the earliest first and the latest latest. */
function mergeSkips(all: readonly SkipSummary[]): SkipSummary[] {
  const merged = new Map<string, SkipSummary>();
  for (const s of all) {
    const key = JSON.stringify([s.target, s.reason]);
    const m = merged.get(key);
    if (m === undefined) { merged.set(key, { ...s }); continue; }
    m.count += s.count;
    if (s.firstAt < m.firstAt) m.firstAt = s.firstAt;
    if (s.latest.at > m.latest.at) m.latest = s.latest;
  }
  return [...merged.values()].sort((a, b) => b.latest.at.localeCompare(a.latest.at) || a.target.localeCompare(b.target) || a.reason.localeCompare(b.reason));
}
