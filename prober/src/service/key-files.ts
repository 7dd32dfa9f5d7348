/**
 * API keys from files (`api_key_file:`), so keys can be rotated without a restart: a Kubernetes Secret
 * mounted as a volume is updated in place, and the next request uses the new key. The file is re-read
 * whenever its modification time or size changes (one stat per lookup); the trimmed content is the key.
 */
import { readFileSync, statSync } from 'node:fs';

export interface KeyFiles {
  /** The key in `file`, or undefined if it cannot be read or is empty. */
  read(file: string): string | undefined;
  /** Every key read so far (old ones too: a rotated key must stay scrubbed from logs). */
  seen(): string[];
}

const MAX_KEY_BYTES = 16 * 1024;

export function createKeyFiles(): KeyFiles {
  const cache = new Map<string, { stamp: string; key: string | undefined }>();
  const all = new Set<string>();
  return {
    read(file) {
      let stamp: string;
      try {
        const st = statSync(file);
        if (st.size > MAX_KEY_BYTES) return undefined;
        stamp = `${st.mtimeMs}:${st.size}:${st.ino}`;
      } catch {
        return undefined;
      }
      const hit = cache.get(file);
      if (hit !== undefined && hit.stamp === stamp) return hit.key;
      let key: string | undefined;
      try {
        key = readFileSync(file, 'utf8').trim() || undefined;
      } catch {
        key = undefined;
      }
      cache.set(file, { stamp, key });
      if (key !== undefined) all.add(key);
      return key;
    },
    seen: () => [...all],
  };
}
