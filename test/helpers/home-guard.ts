/**
 * vitest globalSetup (both configs): the suite fails if the user's own kvcanary installation changed while it
 * ran. Every spawned kvcanary must get its own KVCANARY_HOME (a temporary folder); a test that forgets writes
 * `marker.key` or `runs.sqlite` into `$XDG_CONFIG_HOME/kvcanary` or `~/.config/kvcanary`, and this catches it.
 * The folders are fingerprinted (every file's path, size, mode and SHA-256, or absence) before and after.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

function installationDirs(): string[] {
  const dirs = [path.join(homedir(), '.config', 'kvcanary')];
  if (process.env['XDG_CONFIG_HOME']) dirs.push(path.join(process.env['XDG_CONFIG_HOME'], 'kvcanary'));
  return [...new Set(dirs)];
}

function fingerprint(dir: string): string {
  if (!existsSync(dir)) return `${dir}: absent`;
  const lines: string[] = [];
  const walk = (d: string): void => {
    for (const name of readdirSync(d).sort()) {
      const p = path.join(d, name);
      const st = statSync(p);
      if (st.isDirectory()) walk(p);
      else lines.push(`${p} ${st.size} ${st.mode.toString(8)} ${createHash('sha256').update(readFileSync(p)).digest('hex')}`);
    }
  };
  walk(dir);
  return `${dir}:\n${lines.join('\n')}`;
}

export default function setup(): () => void {
  const before = installationDirs().map(fingerprint);
  return () => {
    const after = installationDirs().map(fingerprint);
    const changed = after.filter((f, i) => f !== before[i]);
    if (changed.length > 0) {
      // vitest only logs an error thrown here ("error during close") and keeps its exit code: set ours.
      process.exitCode = 1;
      process.stderr.write(
        `FAIL home-guard: the tests changed the user's kvcanary installation (every spawned kvcanary needs its own KVCANARY_HOME):\nbefore:\n${before.join('\n')}\nafter:\n${after.join('\n')}\n`,
      );
    }
  };
}
