/**
 * The house's layering, checked on the sources (ARCHITECTURE.md, "Layout"): the probing core
 * (prober/src/probe/) and the installation (prober/src/installation/, what `run` and `serve` share) import
 * nothing from the service, the commands or the CLI — directly or through any module they import. Every
 * import, re-export and dynamic import() is read with TypeScript's own pre-processor.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../prober/src');

function sourcesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? sourcesUnder(p) : /\.ts$/.test(name) ? [p] : [];
  });
}

/** The files a module imports by relative path, resolved (`./x.js` is the source `./x.ts`). */
function importsOf(file: string): string[] {
  const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
  return importedFiles.map((f) => f.fileName).filter((s) => s.startsWith('.'))
    .map((s) => path.resolve(path.dirname(file), s).replace(/\.js$/, '.ts'));
}

/** Every module reachable from `roots` by relative imports, each with the chain that reached it. */
function reachable(roots: string[]): Map<string, string[]> {
  const seen = new Map<string, string[]>(roots.map((r) => [r, [r]]));
  const queue = [...roots];
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    for (const next of importsOf(file)) {
      if (seen.has(next)) continue;
      seen.set(next, [...seen.get(file)!, next]);
      queue.push(next);
    }
  }
  return seen;
}

const rel = (p: string): string => path.relative(SRC, p);

describe('import graph', () => {
  for (const layer of ['probe', 'installation']) {
    it(`prober/src/${layer}/ reaches nothing in service/, commands/ or the CLI`, () => {
      const roots = sourcesUnder(path.join(SRC, layer));
      expect(roots.length).toBeGreaterThan(0);
      const graph = reachable(roots);
      const above = [...graph.entries()]
        .filter(([f]) => /^(service|commands)\//.test(rel(f)) || rel(f) === 'cli.ts')
        .map(([, chain]) => chain.map(rel).join(' -> '));
      expect(above).toEqual([]);
    });
  }

  it('sees an import when there is one (the check itself)', () => {
    const graph = reachable([path.join(SRC, 'commands', 'serve.ts')]);
    expect([...graph.keys()].map(rel)).toContain('service/service.ts');
    expect([...graph.keys()].map(rel)).toContain('installation/registry.ts');
  });
});
