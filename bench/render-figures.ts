/**
 * `npx tsx bench/render-figures.ts [--check]`: writes the figures the documents quote (docs/measured.md,
 * docs/cost.md, docs/fleet.md, engine-under-test/README.md) into their marked blocks, rendered
 * (bench/figures.ts) from the stored JSON of the runs that measured them. Renderers write link targets
 * relative to the repository root; each is rewritten relative to the document holding the block. With
 * --check it changes nothing and exits 1 if a block differs (what test/e2e/bench-report.test.ts asserts
 * too). Rerun it after refreshing a JSON.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { REPO_ROOT } from './child.js';
import { markedBlock, measuredHeadline, prefixFaultTable, sizingTable, timingParagraph, ttftSentence, type PrefixFaultFigures, type ScaleFigures, type TimingFigures, type TtftFigures } from './figures.js';
import type { BenchReport } from './report.js';
import { fullScaleTable, type FullScaleFigures } from './full-scale-figures.js';
import { defaultRunsTable, raceCalibrationTable, raceTable, type DefaultRunFigures, type RaceCalibrationFigures, type RaceFigures } from './race-figures.js';
import { realLlamaTable, type RealLlamaFigures } from './real-llamacpp-figures.js';

export interface FigureBlock {
  /** Repository-relative document holding the block (its links are rewritten relative to it). */
  doc: string;
  name: string;
  /** Repository-relative JSON the block is rendered from. */
  source: string;
  /** The block's Markdown, link targets relative to the repository root. */
  render(json: unknown): string;
}

export const FIGURE_BLOCKS: readonly FigureBlock[] = [
  { doc: 'docs/measured.md', name: 'measured', source: 'bench/report.json', render: (j) => measuredHeadline(j as BenchReport) },
  { doc: 'docs/cost.md', name: 'daily-cost', source: 'bench/full-scale.json', render: (j) => fullScaleTable(j as FullScaleFigures) },
  { doc: 'docs/measured.md', name: 'timing', source: 'bench/timing.json', render: (j) => timingParagraph(j as TimingFigures) },
  { doc: 'docs/measured.md', name: 'races', source: 'bench/races-fresh.json', render: (j) => raceTable(j as RaceFigures) },
  { doc: 'docs/measured.md', name: 'race-calibration', source: 'bench/race-calibration.json', render: (j) => raceCalibrationTable(j as RaceCalibrationFigures) },
  {
    doc: 'docs/measured.md',
    name: 'race-calibration-interleave',
    source: 'bench/race-calibration-interleave.json',
    render: (j) => raceCalibrationTable(j as RaceCalibrationFigures, 'bench/race-calibration-interleave.json'),
  },
  { doc: 'docs/measured.md', name: 'default-runs', source: 'bench/default-runs.json', render: (j) => defaultRunsTable(j as DefaultRunFigures) },
  { doc: 'docs/measured.md', name: 'real-llamacpp', source: 'bench/real-llamacpp.json', render: (j) => realLlamaTable(j as RealLlamaFigures) },
  { doc: 'docs/fleet.md', name: 'sizing', source: 'bench/scale.json', render: (j) => sizingTable(j as ScaleFigures) },
  { doc: 'engine-under-test/README.md', name: 'prefix-ttft', source: 'engine-under-test/bench/results/prefix-ttft.json', render: (j) => ttftSentence(j as TtftFigures) },
  { doc: 'engine-under-test/README.md', name: 'prefix-fault-rates', source: 'engine-under-test/bench/results/prefix-fault-rates.json', render: (j) => prefixFaultTable(j as PrefixFaultFigures) },
];

/**
 * `markdown` with every relative link target (repository-relative, as renderers write them) rewritten
 * relative to the document `doc`: `bench/x.json` is `../bench/x.json` from docs/, and a link into `doc`
 * itself keeps only its anchor. Absolute URLs and bare anchors are left alone.
 */
export function linksRelativeTo(doc: string, markdown: string): string {
  const from = posix.dirname(doc);
  return markdown.replace(/\]\(([^)\s]+)\)/g, (whole, target: string) => {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('#') || target.startsWith('/')) return whole;
    const [path, anchor] = target.split('#', 2) as [string, string | undefined];
    const suffix = anchor === undefined ? '' : `#${anchor}`;
    if (path === doc) return `](${suffix === '' ? '#' : suffix})`;
    return `](${posix.relative(from, path)}${suffix})`;
  });
}

/** Each block as the document has it and as its JSON renders it. */
export function figureBlocks(root = REPO_ROOT): { block: FigureBlock; documented: string | undefined; rendered: string }[] {
  return FIGURE_BLOCKS.map((block) => ({
    block,
    documented: markedBlock(readFileSync(join(root, block.doc), 'utf8'), block.name),
    rendered: linksRelativeTo(block.doc, block.render(JSON.parse(readFileSync(join(root, block.source), 'utf8')))),
  }));
}

function main(argv: string[]): number {
  const check = argv.includes('--check');
  let stale = 0;
  for (const { block, documented, rendered } of figureBlocks()) {
    if (documented === undefined) {
      process.stderr.write(`${block.doc}: no <!-- figures:${block.name}:start/end --> block\n`);
      stale++;
      continue;
    }
    if (documented === rendered) continue;
    stale++;
    if (check) {
      process.stderr.write(`${block.doc}: block ${block.name} differs from ${block.source}\n`);
      continue;
    }
    const path = join(REPO_ROOT, block.doc);
    const doc = readFileSync(path, 'utf8');
    const start = `<!-- figures:${block.name}:start -->\n`;
    const at = doc.indexOf(start) + start.length;
    writeFileSync(path, doc.slice(0, at) + rendered + doc.slice(at + documented.length));
    process.stderr.write(`${block.doc}: block ${block.name} rewritten from ${block.source}\n`);
  }
  return check && stale > 0 ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) process.exitCode = main(process.argv.slice(2));
