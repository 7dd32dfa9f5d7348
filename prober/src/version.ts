/** kvcanary's version, from package.json (for `--version` and kvcanary_build_info). */
import { readFileSync } from 'node:fs';

export function kvcanaryVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}
