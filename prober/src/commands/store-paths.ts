/** A config's store path may hold `{shard}` (one store per shard): the stores of every shard found beside it. */
import { readdirSync } from 'node:fs';
import path from 'node:path';

export function storePathsOf(file: string): string[] {
  if (!file.includes('{shard}')) return [file];
  const dir = path.dirname(file);
  const escaped = path.basename(file).split('{shard}').map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const re = new RegExp(`^${escaped.join('\\d+')}$`);
  let names: string[] = [];
  try {
    names = readdirSync(dir).filter((n) => re.test(n)).sort();
  } catch {
    // reported by the caller as "no store"
  }
  return names.length > 0 ? names.map((n) => path.join(dir, n)) : [file];
}
