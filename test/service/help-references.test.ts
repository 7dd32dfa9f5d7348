/**
 * Help text names README sections (`README "Tenants and keys"`) and docs pages (`docs/operations.md "Alerts"`):
 * every one named must exist, as a heading, or as a bold run-in heading (`**Token cost.**`) where the
 * text names one inside a section. Read from what a user sees: each command's --help and the config `init`
 * writes. The same holds for the references in the sources, the deployment files and the documents, and every
 * relative link in README.md and docs/ must reach a file (and a heading of it, for an anchor): reference
 * material moves between README and docs/, and a reference left behind would point at nothing.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const COMMANDS = ['run', 'serve', 'check-config', 'report', 'ack', 'init', 'engine'];
const tmp = mkdtempSync(path.join(tmpdir(), 'kvc-help-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Heading lines of a Markdown file, outside code fences, backticks dropped. */
function headingsOf(text: string): string[] {
  const out: string[] = [];
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const m = fenced ? null : /^#{1,6} +(.+?) *$/.exec(line);
    if (m) out.push(m[1]!.replace(/`/g, ''));
  }
  return out;
}

/** Section titles of a Markdown file: headings, and bold run-in headings ("**Token cost.** ..."). */
function sectionsOf(file: string): Set<string> {
  const text = readFileSync(path.join(ROOT, file), 'utf8');
  const out = new Set(headingsOf(text));
  for (const m of text.matchAll(/^\*\*([^*]+?)\.?\*\*/gm)) out.add(m[1]!);
  return out;
}

/** A named section exists: a title equal to it, or one that adds only a parenthesis ("Race recall (`npm run bench:races`) ..."). */
function hasSection(sections: Set<string>, name: string): boolean {
  return sections.has(name) || [...sections].some((s) => s.startsWith(`${name} (`));
}

/** `README "Section"` or `docs/x.md "Section"`, optionally followed by `, Run-in heading`. */
function referencesIn(text: string): { file: string; section: string; sub?: string }[] {
  return [...text.matchAll(/(README|docs\/[\w.-]+\.md)(?:'s)? "([^"]+)"(?:, ([A-Z][\w -]*[\w]))?/g)]
    .map((m) => ({ file: m[1] === 'README' ? 'README.md' : m[1]!, section: m[2]!, ...(m[3] === undefined ? {} : { sub: m[3] }) }));
}

/** Repository-relative paths of the files under `dir` (recursively) whose names end in one of `exts`. */
function filesUnder(dir: string, exts: string[]): string[] {
  const abs = path.join(ROOT, dir);
  if (!statSync(abs).isDirectory()) return [dir];
  return (readdirSync(abs, { recursive: true }) as string[])
    .filter((f) => exts.some((e) => f.endsWith(e)) && !f.split(path.sep).includes('node_modules'))
    .map((f) => path.posix.join(dir, f.split(path.sep).join('/')));
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
function anchorOf(heading: string): string {
  return heading.toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-');
}

describe('README sections named in help text', () => {
  it('exist, for every command\'s --help and the config init writes', async () => {
    const texts: [string, string][] = [];
    const top = await runCli(['--help']);
    texts.push(['kvcanary --help', top.stdout + top.stderr]);
    for (const c of COMMANDS) {
      const r = await runCli([c, '--help']);
      expect(r.code, `${c} --help`).toBe(0);
      texts.push([`${c} --help`, r.stdout + r.stderr]);
    }
    const file = path.join(tmp, 'kvcanary.yaml');
    expect((await runCli(['init', file])).code).toBe(0);
    texts.push(['init', readFileSync(file, 'utf8')]);
    let named = 0;
    for (const [where, text] of texts) {
      // A bare "see README" is fine; a README mention that looks like a section name but is not quoted is not.
      expect(text, where).not.toMatch(/README's [A-Z]/);
      for (const ref of referencesIn(text)) {
        named++;
        const sections = sectionsOf(ref.file);
        expect(hasSection(sections, ref.section), `${where} names ${ref.file} "${ref.section}"; sections: ${[...sections].join(' | ')}`).toBe(true);
        if (ref.sub !== undefined) expect(sections.has(ref.sub), `${where} names ${ref.file} "${ref.section}", ${ref.sub}`).toBe(true);
      }
    }
    expect(named).toBeGreaterThanOrEqual(2);
  }, 120_000);
});

describe('sections and links in the repository', () => {
  it('every README "Section" or docs/x.md "Section" named in the sources, deployment files and documents exists', () => {
    const files = [
      ...filesUnder('prober/src', ['.ts']),
      ...filesUnder('engine-under-test/src', ['.ts']),
      ...filesUnder('bench', ['.ts', '.sh']),
      ...filesUnder('deploy', ['.ts', '.yaml', 'Dockerfile']),
      ...filesUnder('scripts', ['.sh', '.mjs', '.ts']),
      ...filesUnder('docs', ['.md']),
      'README.md', 'engine-under-test/README.md', 'dashboards/README.md',
    ];
    let named = 0;
    for (const file of files) {
      for (const ref of referencesIn(readFileSync(path.join(ROOT, file), 'utf8'))) {
        named++;
        const sections = sectionsOf(ref.file);
        expect(hasSection(sections, ref.section), `${file} names ${ref.file} "${ref.section}"`).toBe(true);
        if (ref.sub !== undefined) expect(sections.has(ref.sub), `${file} names ${ref.file} "${ref.section}", ${ref.sub}`).toBe(true);
      }
    }
    expect(named).toBeGreaterThanOrEqual(5);
  });

  it('every relative link in README.md, docs/ and engine-under-test/README.md reaches a file, and its anchor a heading there', () => {
    const docs = ['README.md', 'engine-under-test/README.md', ...filesUnder('docs', ['.md'])];
    let links = 0;
    const broken: string[] = [];
    for (const doc of docs) {
      const text = readFileSync(path.join(ROOT, doc), 'utf8');
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
        links++;
        const [rel, anchor] = target.split('#', 2) as [string, string | undefined];
        const file = rel === '' ? doc : path.posix.normalize(path.posix.join(path.posix.dirname(doc), rel));
        if (!existsSync(path.join(ROOT, file))) broken.push(`${doc} links to ${target}: no ${file}`);
        else if (anchor !== undefined && file.endsWith('.md') && !headingsOf(readFileSync(path.join(ROOT, file), 'utf8')).map(anchorOf).includes(anchor)) {
          broken.push(`${doc} links to ${target}: no such heading in ${file}`);
        }
      }
    }
    expect(broken).toEqual([]);
    expect(links).toBeGreaterThan(20);
  });
});
