/**
 * `kvcanary run --config FILE --target URL` where URL is a configured target's: the run probes as that target
 * does under `serve`, with its API key (api_key_env or api_key_file), its headers, its tenants (keys and
 * cache_salts) and its model, instead of the anonymous caller with synthetic salt identities. What the
 * command line gives wins: --api-key-env over the target's key, --tenant/--tenant-salt over its tenants,
 * --model over its model, a --header over the configured header of the same name.
 *
 * The config is loaded without requiring secrets (another target's key need not be set for this run), so the
 * adopted target's own are checked here: an unset variable or an unreadable key file is a ConfigError naming
 * the field (exit 64) before anything is sent, never a run without the key.
 */
import { closeSync, constants as fsConstants, fstatSync, openSync } from 'node:fs';
import { ConfigError, type ServiceConfig, type TargetConfig } from '../service/config.js';
import { shownPath } from '../shown-value.js';

export function adoptConfigTarget(run: TargetConfig, config: ServiceConfig, configFile: string, env: Record<string, string | undefined>): TargetConfig {
  const i = config.targets.findIndex((t) => t.name === run.name);
  const conf = config.targets[i];
  if (conf === undefined) return run;
  const usesFlagKey = run.apiKeyEnv !== undefined || run.tenants.some((t) => t.apiKeyEnv !== undefined);
  const flagHeaders = new Set(Object.keys(run.headers).map((h) => h.toLowerCase()));
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(conf.headers)) {
    const lower = name.toLowerCase();
    if (flagHeaders.has(lower) || (lower === 'authorization' && usesFlagKey)) continue;
    headers[name] = value;
  }
  const target: TargetConfig = { ...run, headers: { ...headers, ...run.headers } };
  // A key given on the command line (--api-key-env, or an Authorization --header) replaces the target's.
  const flagKey = run.apiKeyEnv !== undefined || flagHeaders.has('authorization');
  if (!flagKey) {
    if (conf.apiKeyEnv !== undefined) target.apiKeyEnv = conf.apiKeyEnv;
    if (conf.apiKeyFile !== undefined) target.apiKeyFile = conf.apiKeyFile;
  }
  if (run.tenants.length === 0) target.tenants = conf.tenants.map((t) => ({ ...t }));
  if (run.model === undefined && conf.model !== undefined) target.model = conf.model;
  checkSecrets(target, `targets[${i}]`, configFile, env, { key: !flagKey, tenants: run.tenants.length === 0 });
  return target;
}

/** The adopted key variables are set and key files readable, each problem naming its field. */
function checkSecrets(target: TargetConfig, at: string, file: string, env: Record<string, string | undefined>, adopted: { key: boolean; tenants: boolean }): void {
  const issues: Array<{ path: string; message: string }> = [];
  const fromConfig = (p: string, name: string | undefined, keyFile: string | undefined): void => {
    if (name !== undefined && !env[name]) issues.push({ path: `${p}.api_key_env`, message: `environment variable ${name} is not set (the run probes as target ${target.name}: its keys are needed)` });
    if (keyFile !== undefined) {
      const problem = keyFileProblem(keyFile);
      if (problem !== undefined) issues.push({ path: `${p}.api_key_file`, message: `${shownPath(keyFile)} ${problem} (the run probes as target ${target.name}: its keys are needed)` });
    }
  };
  if (adopted.key) fromConfig(at, target.apiKeyEnv, target.apiKeyFile);
  if (adopted.tenants) for (const t of target.tenants) fromConfig(`${at}.tenants.${t.name}`, t.apiKeyEnv, t.apiKeyFile);
  if (issues.length > 0) throw new ConfigError('KVC_CONFIG_INVALID', issues, { file });
}

/** Why a key file cannot be used (missing, not a regular file, empty, writable by others), or undefined. Its content is never read here. */
function keyFileProblem(file: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
  } catch (err) {
    return `cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return 'is not a regular file';
    if (st.size === 0) return 'is empty';
    // As serve refuses it: whoever can write the file chooses the key sent.
    if ((st.mode & 0o022) !== 0) return `is writable by ${(st.mode & 0o002) !== 0 ? 'anyone' : 'its group'} (mode ${(st.mode & 0o777).toString(8)}): chmod go-w it`;
    return undefined;
  } finally {
    closeSync(fd);
  }
}
