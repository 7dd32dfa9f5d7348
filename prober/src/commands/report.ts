/**
 * `kvcanary report [--store FILE | --config FILE] [--since WHEN] [--target NAME] [--json]`: run outcomes
 * and findings from the evidence store, opened read-only. Evidence printed is what the store holds: bounded
 * and redacted. Usage, config and store problems are thrown to the CLI's error boundary (exit 64).
 */
import { existsSync, statSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { DEFAULTS, loadConfig } from '../service/config.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import { openStore } from '../service/store.js';
import { parseArgsMessage, UsageError } from './usage.js';
import { reportText } from './report-text.js';
import { parseSince, SinceError } from '../since.js';
import { shownString } from '../shown-value.js';

const USAGE = `usage: kvcanary report [--store FILE | --config FILE] [--since WHEN] [--target NAME] [--json]

  --store FILE      evidence database (default ${DEFAULTS.storePath}); opened read-only: report never
                    creates, migrates, chmods or changes the journal of it; a file that is not a kvcanary
                    store is refused (exit 64)
  --config FILE     take the store path from a serve config (api_key_env variables need not be set)
  --since WHEN      only runs and findings newer than this (default 24h): a duration (30m, 7d) or a
                    date/time (2026-12-01, 2026-12-01T09:30Z)
  --target NAME     only this target (a name the store or the config knows; anything else is an error)
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
        store: { type: 'string' },
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
  let path = v.store ?? DEFAULTS.storePath;
  let configured: string[] = [];
  if (v.config !== undefined) {
    // report reads no target: the keys' variables need only be named, not set.
    const config = await loadConfig(v.config, { knownScenarios: SCENARIO_NAMES, requireSecrets: false });
    path = config.store.path;
    configured = config.targets.map((t) => t.name);
  }
  if (!existsSync(path)) throw new UsageError(`no evidence store at ${path} (run \`kvcanary serve\` first, or pass --store)`);
  if (statSync(path).isDirectory()) throw new UsageError(`--store: ${path} is a directory, not an evidence store file`);
  const store = openStore({ path, retentionMs: Number.MAX_SAFE_INTEGER, readonly: true });
  try {
    if (v.target !== undefined) {
      const known = new Set([...configured, ...store.latestPerTarget().map((t) => t.target)]);
      if (!known.has(v.target)) {
        throw new UsageError(`--target: no target named ${shownString(v.target)} in ${path}${known.size > 0 ? ` (known: ${[...known].sort().join(', ')})` : ' (it holds no runs yet)'}`);
      }
    }
    const filter = { since, ...(v.target !== undefined ? { target: v.target } : {}) };
    const runs = store.recentRuns({ ...filter, limit: 1000 });
    const findings = store.findings({ ...filter, limit: 1000 });
    if (v.json) {
      process.stdout.write(JSON.stringify({ store: path, since: new Date(since).toISOString(), runs, findings }, null, 2) + '\n');
    } else {
      process.stdout.write(reportText(since, runs, findings) + '\n');
    }
    return runs.some((r) => r.outcome === 'fail') ? EXIT.fail : EXIT.pass;
  } finally {
    store.close();
  }
}
