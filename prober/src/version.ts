/** kvcanary's version, from package.json (for `--version` and kvcanary_build_info). */
import { readFileSync } from 'node:fs';

// The package root is two folders up from the sources (prober/src) and three from the build (dist/prober/src).
const CANDIDATES = ['../../package.json', '../../../package.json'];

export function kvcanaryVersion(): string {
  for (const candidate of CANDIDATES) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(candidate, import.meta.url), 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === 'kvcanary') return typeof pkg.version === 'string' ? pkg.version : 'unknown';
    } catch {
      // not at this level
    }
  }
  return 'unknown';
}
