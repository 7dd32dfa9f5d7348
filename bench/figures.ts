/**
 * The figures docs/measured.md, docs/fleet.md and engine-under-test/README.md quote, rendered from the stored
 * JSON of the run that measured them (bench/report.json, bench/timing.json, bench/scale.json,
 * engine-under-test/bench/results/*.json). Each document
 * holds the rendering between `<!-- figures:NAME:start -->` and `<!-- figures:NAME:end -->` markers, and
 * test/e2e/bench-report.test.ts checks that what is there is exactly what these functions render from the
 * JSON, so a figure cannot drift from its run. Pure: no I/O.
 */
import type { CopyFidelityResult, FidelityRow } from './copy-fidelity.js';
import { faultHeadlines, timingFalseAlarms, totalFalsePositives, type BenchReport } from './report.js';
import { formatDuration } from '../prober/src/service/config.js';

export interface TimingFigures {
  command: string;
  generatedAt: string;
  scale: number;
  cycles: number;
  rows: {
    setting: string;
    engine: string;
    /** The engine's prefix cache really shares across salts (the test should fire). */
    shared: boolean;
    cycles: number;
    fired: number;
    medianEffect: number | null;
    medianP: number | null;
    secondsPerCycle: number;
  }[];
}

export interface TtftFigures {
  command: string;
  generatedAt: string;
  preset: string;
  scale: number;
  promptTokens: number;
  rounds: number;
  miss: { medianTtftMs: number; prefilledTokens: number; cachedTokens: number };
  hit: { medianTtftMs: number; prefilledTokens: number; cachedTokens: number };
}

export interface PrefixFaultFigures {
  command: string;
  generatedAt: string;
  cycles: number;
  rows: { configuration: string; faults: string[]; defenses: string[]; measured: string; cycles: number; hits: number; foreignPageReads: number; blocks?: number }[];
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US');
const pct = (x: number | null): string => (x === null ? '–' : `${Math.round(x * 100)}%`);

/** The marked block `name` of a document, or undefined. */
export function markedBlock(doc: string, name: string): string | undefined {
  const m = new RegExp(`<!-- figures:${name}:start -->\\n([\\s\\S]*?)<!-- figures:${name}:end -->`).exec(doc);
  return m?.[1];
}

/** docs/measured.md's headline, from report.json. */
export function measuredHeadline(r: BenchReport): string {
  const m = r.sections.matrix?.result;
  const lines: string[] = [];
  if (m !== undefined) {
    const cells = new Map<string, { cycle: number | null; scenario: string | null }>();
    for (const h of faultHeadlines(m)) {
      const best = cells.get(h.cell);
      if (h.firstCycle !== null && (best === undefined || best.cycle === null || h.firstCycle < best.cycle)) cells.set(h.cell, { cycle: h.firstCycle, scenario: h.scenario });
      else if (best === undefined) cells.set(h.cell, { cycle: null, scenario: null });
    }
    const caught = [...cells].map(([cell, x]) => (x.cycle === null ? `\`${cell}\` not caught in ${m.cycles} cycles` : `\`${cell}\` in cycle ${x.cycle} (${x.scenario})`));
    lines.push(`first detection per fault cell, ${m.cycles} cycles a cell, by the scenario aimed at it: ${caught.join(', ')}`);
    const inc = faultHeadlines(m).filter((h) => h.cell === 'incident' && h.firstCycle !== null);
    if (inc.length > 0) lines.push(`the incident's leak and its unenforced rejection: cycle ${Math.min(...inc.map((h) => h.firstCycle!))}, ${int(Math.min(...inc.map((h) => h.firstTokens ?? 0)))} prompt tokens at 1/${m.scale} scale`);
  }
  const fp = r.sections.falsePositives?.result;
  if (fp !== undefined) {
    const t = totalFalsePositives(fp);
    lines.push(`**${t.findings} false positives in ${int(t.pairs)} probe pairs** against ${fp.targets.filter((x) => x.available).map((x) => x.target).join(', ')}`);
    const timing = timingFalseAlarms(fp);
    if (timing.runs > 0) lines.push(`${timing.alarms} timing false alarms in ${int(timing.runs)} \`prefix-isolation\` runs`);
  }
  const serve = r.sections.overhead?.result?.serve;
  if (serve !== undefined && serve.cpuSecondsPerCycle !== null) lines.push(`${serve.cpuSecondsPerCycle.toFixed(2)} CPU s per cycle with ${serve.targets} targets in \`serve\``);
  const cf = r.sections.copyFidelity?.result;
  if (cf !== undefined) lines.push(copyFidelityHeadline(cf));
  return `The headlines: ${lines.join('; ')}.\n`;
}

/** One clause on the copy-fidelity curve: how far the marker signal falls with each planter layout. */
export function copyFidelityHeadline(cf: CopyFidelityResult): string {
  const of = (layout: string): FidelityRow[] => cf.rows.filter((x) => x.layout === layout && x.cycles > 0);
  const full = (rows: FidelityRow[]): string => `${rows.filter((x) => x.markerRecall === 1).length} of ${rows.length}`;
  const dense = of('dense');
  const repeated = of('repeated');
  const min = (rows: FidelityRow[]): string => (rows.length === 0 ? '–' : Math.min(...rows.map((x) => x.markerRecall)).toFixed(2));
  return (
    `against weaker copiers (${cf.rows.length / 2} model settings, ${cf.cyclesPerRow} cycles each, bench section 6) the marker signal caught every incident cycle in ${full(dense)} settings with the default dense planters (lowest ${min(dense)}) ` +
    `and ${full(repeated)} with repeated planters (lowest ${min(repeated)}); the rejection signal in ${cf.rows.filter((x) => x.cycles > 0 && x.rejectionRecall === 1).length} of ${cf.rows.length} rows`
  );
}

/** docs/measured.md's timing paragraph, from bench/timing.json. */
export function timingParagraph(t: TimingFigures): string {
  const row = (setting: string, shared: boolean) => t.rows.find((x) => x.setting.startsWith(setting) && x.shared === shared);
  const d = row('default', true);
  const e = row('escalated', true);
  const negatives = t.rows.filter((x) => !x.shared);
  const fired = (x: TimingFigures['rows'][number] | undefined): string => (x === undefined ? 'not measured' : `${x.fired} of ${x.cycles} cycles (median effect ${pct(x.medianEffect)})`);
  return (
    `The timing side channel is measured on its own by \`${t.command}\` (${t.cycles} cycles a row, scale 1/${t.scale}; stored in ` +
    `[bench/timing.json](bench/timing.json)): on a prefix cache that ignores \`cache_salt\`, the default test (12 pairs over 512-token prefixes) ` +
    `fired in ${fired(d)} and the escalated one (24 pairs over 2,048 tokens, used when the endpoint reports no \`cached_tokens\`) in ${fired(e)}; ` +
    `on the salted cache, ${negatives.reduce((a, x) => a + x.fired, 0)} of ${negatives.reduce((a, x) => a + x.cycles, 0)}.\n`
  );
}

/** engine-under-test/README.md's TTFT sentence, from results/prefix-ttft.json. */
export function ttftSentence(t: TtftFigures): string {
  return (
    `Time to first token (\`${t.command}\`, ${t.preset === 'single' ? 'single node' : t.preset}, scale ${t.scale}, a ${int(t.promptTokens)}-token ` +
    `prompt, ${t.rounds} interleaved rounds; stored in [bench/results/prefix-ttft.json](engine-under-test/bench/results/prefix-ttft.json)): miss ${t.miss.medianTtftMs.toFixed(1)} ms median with ` +
    `${int(t.miss.prefilledTokens)} tokens prefilled; hit ${t.hit.medianTtftMs.toFixed(1)} ms with ${int(t.hit.prefilledTokens)} tokens prefilled ` +
    `(\`cached_tokens\` ${int(t.hit.cachedTokens)}), ${(t.miss.medianTtftMs / t.hit.medianTtftMs).toFixed(1)}x.\n`
  );
}

/** engine-under-test/README.md's prefix-fault table, from results/prefix-fault-rates.json. */
export function prefixFaultTable(f: PrefixFaultFigures): string {
  const rows = f.rows.map((r) => {
    const name = r.defenses.length > 0 ? `+ \`${r.defenses.join('`, `')}\`` : `\`${r.faults.join('`, `')}\``;
    return `| ${name} | ${r.measured} in ${r.hits} of ${r.cycles} | ${r.foreignPageReads > 0 ? '> 0' : '0'} | ${r.blocks === undefined ? '–' : int(r.blocks)} |`;
  });
  return ['| configuration | measured over the cycles | foreign page reads | blocks counted |', '|---|---|---|---|', ...rows].join('\n') + '\n';
}

export interface ScaleFigures {
  /** How the replica ran Node (the image's ENTRYPOINT flags and ENV). */
  runtime: string;
  rows: { set: string; heap: 'image' | 'Node defaults'; targets: number; cpuPerTargetCycle: number; rssMaxMiB: number; rssAfterMiB: number }[];
}

/** The memory goals for one replica: [targets, RSS limit in MB (10^6 bytes)]. */
export const RSS_GOALS: ReadonlyArray<readonly [number, number]> = [[50, 120], [1000, 256]];

const mb = (mib: number): string => (mib * 2 ** 20 / 1e6).toFixed(1);

/**
 * docs/fleet.md's sizing table, and whether the goals are met, from bench/scale.json: by every scenario
 * set measured at a goal's size with the image's runtime (a replica's first cycle, and each cycle where the
 * hourly tiers fall due, runs every scenario; the others only the cheap tier).
 */
export function sizingTable(s: ScaleFigures): string {
  const rows = s.rows.map((r) => `| ${r.set} | ${int(r.targets)} | ${r.heap === 'image' ? 'the image\'s' : 'Node\'s defaults'} | ${r.cpuPerTargetCycle} | ${r.rssMaxMiB} MiB (${mb(r.rssMaxMiB)} MB) | ${r.rssAfterMiB} MiB |`);
  const goals = RSS_GOALS.map(([targets, limitMB]) => {
    const measured = s.rows.filter((r) => r.heap === 'image' && r.targets === targets);
    if (measured.length === 0) return `${int(targets)} targets ≤ ${limitMB} MB: not measured`;
    return `${int(targets)} targets ≤ ${limitMB} MB: ${measured.map((r) => {
      const got = Number(mb(r.rssMaxMiB));
      return `${r.set.replace(/ \(.*\)$/, '')} **${got <= limitMB ? 'met' : 'not met'}** (${got} MB)`;
    }).join(', ')}`;
  });
  return [
    '| scenarios per cycle | targets | Node runtime | CPU s per target-cycle | RSS max | RSS a second after the run |',
    '|---|---|---|---|---|---|',
    ...rows,
    '',
    `Sizing goals, RSS max with the image's runtime (\`${s.runtime.replace(/; serve on .*$/, '')}\`): ${goals.join('; ')}.`,
  ].join('\n') + '\n';
}
