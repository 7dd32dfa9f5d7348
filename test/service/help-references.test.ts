/**
 * Help text names README sections (`README "Production use"`) and docs pages (`docs/operations.md "Alerts"`):
 * every one named must exist, as a heading, or as a bold run-in heading (`**Token cost.**`) where the
 * text names one inside a section. Read from what a user sees: each command's --help and the config `init`
 * writes.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const COMMANDS = ['run', 'serve', 'check-config', 'report', 'ack', 'init', 'engine'];
const tmp = mkdtempSync(path.join(tmpdir(), 'kvc-help-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Section titles of a Markdown file: headings, and bold run-in headings ("**Token cost.** ..."). */
function sectionsOf(file: string): Set<string> {
  const text = readFileSync(path.join(ROOT, file), 'utf8');
  const out = new Set<string>();
  for (const m of text.matchAll(/^#{1,6} +(.+?) *$/gm)) out.add(m[1]!.replace(/`/g, ''));
  for (const m of text.matchAll(/^\*\*([^*]+?)\.?\*\*/gm)) out.add(m[1]!);
  return out;
}

/** `README "Section"` or `docs/x.md "Section"`, optionally followed by `, Run-in heading`. */
function referencesIn(text: string): { file: string; section: string; sub?: string }[] {
  return [...text.matchAll(/(README|docs\/[\w.-]+\.md)(?:'s)? "([^"]+)"(?:, ([A-Z][\w -]*[\w]))?/g)]
    .map((m) => ({ file: m[1] === 'README' ? 'README.md' : m[1]!, section: m[2]!, ...(m[3] === undefined ? {} : { sub: m[3] }) }));
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
        expect(sections.has(ref.section), `${where} names ${ref.file} "${ref.section}"; sections: ${[...sections].join(' | ')}`).toBe(true);
        if (ref.sub !== undefined) expect(sections.has(ref.sub), `${where} names ${ref.file} "${ref.section}", ${ref.sub}`).toBe(true);
      }
    }
    expect(named).toBeGreaterThanOrEqual(2);
  }, 120_000);
});
