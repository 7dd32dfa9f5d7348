/**
 * The benchmark's two outputs from one document: report.json (BenchReport, for machines) and REPORT.md
 * (renderMarkdown, for people). Rendering is pure — no I/O, no clock — so it is tested on synthetic
 * reports, and every table says how to read it and which command reproduces it.
 */
import type { MatrixCell, MatrixResult } from './detection.js';
import type { ComponentRun } from './components.js';
import type { CopyFidelityResult, FidelityRow } from './copy-fidelity.js';
import { DETECTION_GOAL, type CostResult, type PlanterPoint } from './cost.js';
import { defaultSchedule, everyCycleSchedule, scheduleCost } from './schedule-cost.js';
import { formatDuration } from '../prober/src/service/config.js';
import type { FalsePositiveResult } from './false-positives.js';
import type { LoadResult, LoadSweep } from './load.js';
import type { BenchOptions } from './options.js';
import type { OverheadResult } from './overhead.js';
import { formatProportion, type Proportion } from './proportion.js';
import type { SeriesResult } from './series.js';
import type { SignalSummary } from './summary.js';
import { MARKER_SIGNAL, REJECTION_SIGNAL } from './ground-truth.js';

export interface SectionRun<T> {
  command: string;
  seconds: number;
  result?: T;
  error?: string;
}

export interface BenchReport {
  version: 1;
  generatedAt: string;
  command: string;
  options: BenchOptions;
  machine: { cpus: number; node: string; platform: string; loadAverageStart: number[]; loadAverageEnd: number[] };
  seconds: number;
  sections: {
    components?: { scanner: SectionRun<ComponentRun>; engine: SectionRun<ComponentRun> };
    overhead?: SectionRun<OverheadResult>;
    matrix?: SectionRun<MatrixResult>;
    load?: SectionRun<LoadResult>;
    falsePositives?: SectionRun<FalsePositiveResult>;
    cost?: SectionRun<CostResult>;
    copyFidelity?: SectionRun<CopyFidelityResult>;
  };
}

// ---------------------------------------------------------------------------------------------- helpers

export function table(head: readonly string[], rows: readonly (readonly string[])[]): string {
  const esc = (c: string): string => c.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  return [`| ${head.map(esc).join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.map(esc).join(' | ')} |`)].join('\n');
}

export const int = (n: number): string => Math.round(n).toLocaleString('en-US');
export const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
const fixed = (n: number | null | undefined, d = 2): string => (n === null || n === undefined || !Number.isFinite(n) ? '–' : n.toFixed(d));

/** "0.98 (0.93–1.00)" or "–". */
export function pci(p: Proportion | undefined): string {
  if (p === undefined || p.p === null) return '–';
  return formatProportion(p).replace(/ \[(.*), (.*)\]/, ' ($1–$2)');
}

export function first(s: SignalSummary): string {
  return s.first === null ? 'never' : `cycle ${s.first.cycle}, ${int(s.first.tokensSent)} tok`;
}

const cmd = (c: string): string => `\`${c}\``;

// ------------------------------------------------------------------------------------------- headlines

export interface FaultHeadline {
  cell: string;
  fault: string;
  /** A finding kind: the marker signal, the rejection signal, or another isolation finding the cell raised. */
  signal: string;
  scenario: string | null;
  firstCycle: number | null;
  firstTokens: number | null;
  perCycle: Proportion | null;
  cyclesPerDetection: number | null;
  /** Scenarios run on the cell. */
  scenarios: string[];
}

const FAULT_OF: Record<string, string> = { incident: 'admission-checks-finished' };
/** A configuration finding, true of the capacities rather than caused by the fault. */
const NOT_ISOLATION = new Set(['pool-below-context']);

function signalOf(s: SeriesResult, kind: string): SignalSummary | undefined {
  const x = s.summary!;
  if (kind === MARKER_SIGNAL) return x.marker;
  if (kind === REJECTION_SIGNAL) return x.rejection;
  return x.other.find((o) => o.kind === kind);
}

/**
 * For every positive cell and each isolation signal it raised (the marker and rejection signals always):
 * the scenario that detects soonest, then most often.
 */
export function faultHeadlines(matrix: MatrixResult): FaultHeadline[] {
  const out: FaultHeadline[] = [];
  for (const c of matrix.cells) {
    if (!c.available || c.cell.role !== 'positive') continue;
    const fault = c.cell.faults.length > 0 ? c.cell.faults.join('+') : FAULT_OF[c.cell.preset] ?? c.cell.preset;
    const others = new Set(c.series.flatMap((s) => s.summary!.other.map((o) => o.kind)).filter((k) => !NOT_ISOLATION.has(k)));
    for (const signal of [MARKER_SIGNAL, REJECTION_SIGNAL, ...[...others].sort()]) {
      let best: { scenario: string; s: SignalSummary } | undefined;
      for (const series of c.series) {
        const sig = signalOf(series, signal);
        if (sig === undefined || sig.first === null) continue;
        if (
          best === undefined ||
          sig.first.cycle < best.s.first!.cycle ||
          (sig.first.cycle === best.s.first!.cycle && (sig.detected.p ?? 0) > (best.s.detected.p ?? 0))
        ) {
          best = { scenario: series.scenario, s: sig };
        }
      }
      out.push({
        cell: c.cell.id,
        fault,
        signal,
        scenario: best?.scenario ?? null,
        firstCycle: best?.s.first?.cycle ?? null,
        firstTokens: best?.s.first?.tokensSent ?? null,
        perCycle: best?.s.detected ?? null,
        cyclesPerDetection: best?.s.cyclesPerDetection ?? null,
        scenarios: c.series.map((x) => x.scenario),
      });
    }
  }
  return out;
}

export function totalFalsePositives(fp: FalsePositiveResult): { findings: number; pairs: number } {
  let findings = 0;
  let pairs = 0;
  for (const t of fp.targets) {
    if (!t.available) continue;
    pairs += t.pairs;
    findings += Object.values(t.falsePositives).reduce((a, b) => a + b, 0);
  }
  return { findings, pairs };
}

// ------------------------------------------------------------------------------------------- sections

function methodSection(r: BenchReport): string {
  const o = r.options;
  return `## How these figures were made

- Command: ${cmd(r.command)} — ${int(r.seconds)} s on ${r.machine.cpus} CPU(s), Node ${r.machine.node}, ${r.machine.platform};
  load average ${r.machine.loadAverageStart.map((x) => x.toFixed(2)).join('/')} at the start, ${r.machine.loadAverageEnd.map((x) => x.toFixed(2)).join('/')} at the end
  (other work shared this machine). Generated ${r.generatedAt}.
- Engines are the bundled \`engine-under-test\` at \`--scale ${o.scale}\` (every capacity divided by ${o.scale}), started in
  the benchmark's process on 127.0.0.1. The prober is the product's own \`runProbe\` (what \`kvcanary run\` and
  \`serve\` call) with default tuning, one scenario per cycle.
- **A cycle** is one scenario run. **Engine state between cycles:** every (cell, scenario) series starts on a
  fresh engine; between its cycles the engine is drained (nothing waiting or running, every page back on the
  free list) but not restarted and not cleaned, so stale page contents carry over as they do in production.
  The prober keeps one marker registry for the series, as \`serve\` does (it reloads earlier runs' markers),
  so a marker planted in cycle 3 that surfaces in cycle 7 counts in cycle 7.
- **Ground truth** comes from the engine: its exposure log (every attention read covering pages another
  request wrote, by reader and writer request id) and, watched at its \`submit\`, which request ids carried
  canary markers. A recording pass-through proxy in front of the engine joins engine request ids to the
  responses the prober scanned. Nothing the prober sees depends on either.
- **Scheduling:** series run ${o.jobs} at a time in one process, except those of timing-sensitive scenarios
  (abort-race) on cells with something to detect, which run one at a time with nothing else of ours in
  flight: sharing the process made the same race cells miss most of the cycles they catch alone.
- Proportions show the 95% Wilson interval in parentheses: 50 detections in 50 cycles is "1.00 (0.93–1.00)",
  not a certainty. Timing figures are counts or ratios from this one run; the machine is shared and noisy.
- Each section names the command that reproduces it; add \`--cell ID\` / \`--scenario NAME\` to narrow it.`;
}

function unavailableList(cells: readonly MatrixCell[]): string {
  const un = cells.filter((c) => !c.available);
  if (un.length === 0) return '';
  return `\nNot measured, because this engine build cannot provide them (they appear as soon as it can):\n\n${un.map((c) => `- \`${c.cell.id}\`: ${c.reason}`).join('\n')}\n`;
}

function otherKinds(s: SeriesResult): string {
  const other = s.summary!.other;
  if (other.length === 0) return '–';
  return other.map((o) => `${o.kind} ${o.detected.successes}/${o.detected.trials}`).join(', ');
}

function matrixSection(run: SectionRun<MatrixResult>): string {
  if (run.result === undefined) return `## 1. Detection matrix\n\nNot measured: ${run.error ?? 'skipped'}.`;
  const m = run.result;
  const rows: string[][] = [];
  const truthRows: string[][] = [];
  for (const c of m.cells) {
    if (!c.available) continue;
    for (const s of c.series) {
      const x = s.summary!;
      rows.push([
        c.cell.id,
        s.scenario,
        `${x.outcomes.pass}/${x.outcomes.fail}/${x.outcomes.inconclusive}`,
        pci(x.marker.detected),
        first(x.marker),
        pci(x.rejection.detected),
        first(x.rejection),
        otherKinds(s),
        `${int(x.tokens.sentPerCycle)} / ${int(x.tokens.billedPerCycle)}`,
      ]);
      const t = x.truth;
      if (t !== undefined && (t.exposedResponses > 0 || t.foreignPageReads > 0)) {
        truthRows.push([
          c.cell.id,
          s.scenario,
          int(t.foreignPageReads),
          int(t.exposedResponses),
          pci(t.recallMarker),
          pci(t.recallRejection),
          pci(t.recallAny),
          int(t.wholeMarkerCopies),
          `${t.unmatched}/${t.ambiguous}/${t.overflowPolls}/${t.uncertainWriters ?? 0}`,
        ]);
      }
    }
  }
  const whys = m.cells.filter((c) => c.available).map((c) => `- \`${c.cell.id}\` (${c.cell.role}): ${c.cell.why}`);
  const stopped = m.cells.flatMap((c) => c.series.filter((s) => s.stoppedEarly !== undefined).map((s) => `- \`${c.cell.id}\` × ${s.scenario}: ${s.summary?.cycles ?? 0} cycles; ${s.stoppedEarly}${s.summary?.inconclusiveNote !== undefined ? ` (${s.summary.inconclusiveNote})` : ''}.`));
  return `## 1. Detection matrix

${m.cycles} cycles per cell and scenario, scale 1/${m.scale}. Reproduce: ${cmd(run.command)} (${int(run.seconds)} s).

Cells (engine preset, plus faults and defenses named after it; \`/lifo\` = lifo free list). The presets run
every scenario; a fault's cells and the cells of the defenses that address it run the scenarios aimed at
that fault (\`--full\` runs every scenario everywhere):

${whys.join('\n')}

**How to read it.** One row per cell and scenario. *P/F/I* counts cycles that passed, failed (a finding),
or were inconclusive. *Marker* is the per-cycle probability that the cycle raised \`cross-request-leak\` (a
marker planted by another request came back); *rejection* that it raised \`rejection-not-enforced\` (a prompt
that had to be rejected was answered). *First* is the cycle of the series (fresh engine) where the signal
first fired and the prompt tokens sent up to then. *Other* lists other finding kinds (\`pool-below-context\`
is a configuration finding, true on every preset with the incident's capacities). Tokens are prompt tokens
sent (the prober's estimate) / tokens billed (the endpoint's usage), per cycle. On a negative cell every
signal should be 0; on a positive one, the scenario aimed at the fault should fire.

${table(['cell', 'scenario', 'P/F/I', 'marker p (95% CI)', 'marker first', 'rejection p (95% CI)', 'rejection first', 'other', 'tokens sent / billed per cycle'], rows)}
${stopped.length > 0 ? `\nSeries that stopped before ${m.cycles} cycles (an inconclusive cycle raises nothing and establishes nothing, so a scenario that cannot conclude against an engine is not run on to ${m.cycles}; \`--full\` runs every cycle):\n\n${stopped.join('\n')}\n` : ''}${unavailableList(m.cells)}
### Recall against the engine's ground truth

**How to read it.** Only rows where the engine recorded foreign page reads. *Foreign page reads* is the
engine's counter over the series. *Exposed responses* are the prober's responses that really attended over
pages written by a request whose prompt held markers (planted content). *Recall* is the fraction of those
the prober flagged: by the marker signal, by the rejection signal, by any finding. A response can be
exposed without any planted text reaching its output (the model copies what the attention favours), so
marker recall below 1 is expected; *whole-marker copies* counts exposed responses whose text held a
complete planted marker (the proxy's own check, independent of the prober: the prober also finds
fragments). The last column counts responses the join could not match / matched ambiguously / exposure-log
polls that may have missed entries / aborted requests without markers whose engine ids the proxy never
learnt (a request aborted before its first response byte shows no id; such ids count as planted only while
every id-less request was a planter). 0/0/0/0 means the truth is complete.

${truthRows.length > 0 ? table(['cell', 'scenario', 'foreign page reads', 'exposed responses', 'recall marker', 'recall rejection', 'recall any', 'whole-marker copies', 'unmatched/ambiguous/overflow/uncertain'], truthRows) : '_No foreign page reads in any series: no exposure to recall._'}`;
}

function loadSweepTable(sweep: LoadSweep): string {
  const rows = sweep.points.map((p) => {
    const s = p.summary!;
    const perCycle = p.load === undefined ? 0 : (p.load.achievedTurnoversPerSecond * s.msPerCycle) / 1000;
    return [
      p.policy,
      `${p.level}`,
      p.load === undefined ? '–' : `${p.load.achievedTurnoversPerSecond.toFixed(2)} (${int(p.load.requestsPerSecond)} req/s${p.load.shed > 0 ? `, ${p.load.shed} shed` : ''})`,
      perCycle.toFixed(2),
      pci(s.marker.detected),
      pci(s.rejection.detected),
      s.truth === undefined ? '–' : int(s.truth.exposedResponses),
      s.truth === undefined ? '–' : pci(s.truth.recallMarker),
      `${s.outcomes.pass}/${s.outcomes.fail}/${s.outcomes.inconclusive}`,
    ];
  });
  return table(['free list', 'load asked (pools/s)', 'achieved pools/s (requests/s)', 'turnovers per cycle', 'marker p (95% CI)', 'rejection p (95% CI)', 'exposed responses', 'marker recall', 'P/F/I'], rows);
}

/** What the sweep says an operator should expect, from the idle and the busiest points. */
export function loadVerdict(sweep: LoadSweep): string {
  const lines: string[] = [];
  for (const policy of new Set(sweep.points.map((p) => p.policy))) {
    const pts = sweep.points.filter((p) => p.policy === policy && p.summary !== undefined).sort((a, b) => a.level - b.level);
    const idle = pts[0];
    const busy = pts[pts.length - 1];
    if (idle === undefined || busy === undefined || idle === busy) continue;
    const f = (p: Proportion): string => fixed(p.p);
    lines.push(
      `under ${policy}, from idle to ${busy.level} pool turnovers/s the marker signal went ${f(idle.summary!.marker.detected)} → ${f(busy.summary!.marker.detected)} ` +
        `and the rejection signal ${f(idle.summary!.rejection.detected)} → ${f(busy.summary!.rejection.detected)} per cycle`,
    );
  }
  return lines.length === 0 ? '' : `Measured: ${lines.join('; ')}.`;
}

/** Idle and busiest point of one policy in a sweep. */
function ends(sweep: LoadSweep, policy: string): { idle: LoadSweep['points'][number]; busy: LoadSweep['points'][number] } | undefined {
  const pts = sweep.points.filter((p) => p.policy === policy && p.summary !== undefined).sort((a, b) => a.level - b.level);
  const idle = pts[0];
  const busy = pts[pts.length - 1];
  return idle === undefined || busy === undefined || idle === busy ? undefined : { idle, busy };
}

/** The paragraph an operator reads: what the measured sweeps say about a busy endpoint. */
export function operatorExpectation(l: LoadResult): string {
  const out: string[] = ['**What an operator should expect on a busy production endpoint.**'];
  const measured = l.sweeps.filter((s) => s.available && s.points.length > 0);
  if (measured.length === 0) return `${out[0]} Not measured in this run.`;
  const overlimit = measured.find((s) => s.cell.scenario === 'overlimit-handoff');
  if (overlimit !== undefined) {
    const rows = l.policies.map((policy) => ({ policy, e: ends(overlimit, policy) })).filter((x) => x.e !== undefined);
    const rej = rows.map((x) => x.e!.busy.summary!.rejection.detected.p ?? 0);
    const mk = rows.map((x) => `${fixed(x.e!.idle.summary!.marker.detected.p)} → ${fixed(x.e!.busy.summary!.marker.detected.p)} (${x.policy})`);
    const busiest = Math.max(...rows.map((x) => x.e!.busy.level));
    if (rows.length > 0) {
      out.push(
        `On \`${overlimit.cell.engine.id}\`, from idle to ${busiest} pool turnovers per second, the marker signal went ${mk.join(', ')} per cycle, ` +
          `while the rejection signal was ${rej.map((x) => fixed(x)).join(' / ')} at the busiest point.`,
      );
      if (Math.min(...rej) >= 0.99) {
        out.push(
          'The rejection signal does not depend on whose pages the over-limit request inherits: a 200 with text for a prompt the ' +
            'endpoint had to reject is the defect itself, so it keeps firing on a busy endpoint. There, the stale pages that request ' +
            'reads are mostly other customers\' — which is why `rejection-not-enforced` must page on its own, without waiting for a marker.',
        );
      } else {
        out.push('The rejection signal itself weakened under load here; see the inconclusive counts (P/F/I) for why before relying on it.');
      }
    }
  }
  for (const sweep of measured.filter((s) => s.cell.scenario !== 'overlimit-handoff')) {
    const mk = l.policies
      .map((policy) => ({ policy, e: ends(sweep, policy) }))
      .filter((x) => x.e !== undefined)
      .map((x) => `${fixed(x.e!.idle.summary!.marker.detected.p)} → ${fixed(x.e!.busy.summary!.marker.detected.p)} (${x.policy})`);
    if (mk.length > 0) out.push(`On \`${sweep.cell.engine.id}\` (${sweep.cell.scenario}, marker signal only): ${mk.join(', ')} per cycle from idle to the busiest load.`);
  }
  out.push(
    'A marker finding is proof of exposure when it comes; its absence on a busy endpoint proves little, since other ' +
      'traffic takes the planted pages first. Budget for more cycles per detection than the idle figures in section 1 suggest, ' +
      'and probe the rejection path on every cycle.',
  );
  return out.join(' ');
}

function loadSection(run: SectionRun<LoadResult>): string {
  if (run.result === undefined) return `## 2. Detection under background load\n\nNot measured: ${run.error ?? 'skipped'}.`;
  const l = run.result;
  const parts: string[] = [];
  for (const sweep of l.sweeps) {
    if (!sweep.available) {
      parts.push(`### ${sweep.cell.engine.id} × ${sweep.cell.scenario}\n\nNot measured: ${sweep.reason}.`);
      continue;
    }
    parts.push(`### ${sweep.cell.engine.id} × ${sweep.cell.scenario}\n\n${loadSweepTable(sweep)}\n\n${loadVerdict(sweep)}`);
  }
  return `## 2. Detection under background load

${l.cycles} cycles per point, scale 1/${l.scale}, load levels ${l.levels.join(', ')} pool turnovers per second, free lists ${l.policies.join(' and ')}.
Reproduce: ${cmd(run.command)} (${int(run.seconds)} s).

**How to read it.** Load clients that are not the prober (plain HTTP straight to the engine, no markers)
send prompts of 1/8 of the advertised KV pool, open-loop, at the asked number of pool turnovers per
second, starting a second before the first cycle; *achieved* is what completed. *Turnovers per cycle* is
how many times the load alone refilled the pool during an average cycle: above about 1, the pages the
prober's over-limit request or readers inherit are mostly the load's, not the prober's planters'. *fifo*
hands out the page freed longest ago (SGLang's allocator), *lifo* the page freed last.

${parts.join('\n\n')}

${operatorExpectation(l)}`;
}

function fpSamples(f: FalsePositiveResult): string {
  const lines = f.targets.flatMap((t) =>
    (t.samples ?? []).map((x) => `- ${t.target}, ${x.scenario}: \`${x.kind}\` — ${x.match ?? ''}${x.facts !== undefined ? ` (${Object.entries(x.facts).map(([k, v]) => `${k} ${String(v)}`).join(', ')})` : ''}`),
  );
  return lines.length === 0 ? '' : `\n\nEvidence of each false positive (bounded, as the prober recorded it):\n\n${lines.join('\n')}`;
}

/** prefix-isolation's timing test on the engines that keep tenants apart: runs and false alarms. */
export function timingFalseAlarms(f: FalsePositiveResult): { runs: number; alarms: number; targets: string[] } {
  const engines = f.targets.filter((t) => t.available && t.foreignPageReads !== undefined);
  return {
    runs: engines.reduce((n, t) => n + (t.perScenario['prefix-isolation']?.cycles ?? 0), 0),
    alarms: engines.reduce((n, t) => n + (t.falsePositives['prefix-timing-side-channel'] ?? 0), 0),
    targets: engines.map((t) => t.target),
  };
}

function timingLine(f: FalsePositiveResult): string {
  const t = timingFalseAlarms(f);
  if (t.runs === 0) return '';
  return `Timing test: **${t.alarms} \`prefix-timing-side-channel\` false alarm(s) in ${int(t.runs)} runs** of prefix-isolation on ${t.targets.join(' and ')} (stated rate: alpha 0.001 a run, so about ${fixed(t.runs * 0.001, 2)} expected by chance).`;
}

function fpSection(run: SectionRun<FalsePositiveResult>): string {
  if (run.result === undefined) return `## 3. False positives\n\nNot measured: ${run.error ?? 'skipped'}.`;
  const f = run.result;
  const rows = f.targets.map((t) =>
    t.available
      ? [
          t.target,
          int(t.pairs),
          int(t.cycles),
          Object.keys(t.falsePositives).length === 0 ? '**0**' : Object.entries(t.falsePositives).map(([k, n]) => `**${k} ${n}**`).join(', '),
          t.upperBoundPerPair === null ? '–' : `< ${t.upperBoundPerPair.toExponential(1)}`,
          Object.keys(t.expectedFindings).length === 0 ? '–' : Object.entries(t.expectedFindings).map(([k, n]) => `${k} ${n}`).join(', '),
          t.foreignPageReads === undefined ? 'n/a' : int(t.foreignPageReads),
          Object.entries(t.perScenario).map(([s, x]) => `${s} ${x.cycles}c/${x.pairs}p${x.inconclusive > 0 ? `/${x.inconclusive}i` : ''}`).join('; '),
        ]
      : [t.target, '–', '–', `not measured: ${t.reason ?? ''}`, '–', '–', '–', '–'],
  );
  const tot = totalFalsePositives(f);
  return `## 3. False positives

At least ${int(f.pairsTarget)} probe pairs per target, scale 1/${f.scale}. Reproduce: ${cmd(run.command)} (${int(run.seconds)} s).

**How to read it.** A *pair* is one planted request and one later response of the same cycle scanned for
its markers. Scenarios run round-robin with one marker registry per target, so every earlier marker stays
live. *False positives* are findings on a target that keeps requests apart; the figure to hold is 0. With
0 in n pairs the rate per pair is below the *95% upper bound* (exact, about 3/n). *Expected* findings are
true ones (\`hardened\` keeps the incident's capacities, so \`pool-below-context\` is correct there) and are
not counted. *Foreign page reads* is the engine's own count over the run: 0 confirms isolation really held.
The last column gives cycles (c), pairs (p) and inconclusive cycles (i) per scenario (the noise server does
not abort mid-stream or report cached tokens, so some of its scenarios cannot conclude; their responses are
scanned all the same).

${table(['target', 'pairs', 'cycles', 'false positives', '95% upper bound per pair', 'expected findings', 'engine foreign page reads', 'per scenario'], rows)}

Total: **${tot.findings} false positives in ${int(tot.pairs)} pairs**.${timingLine(f) === '' ? '' : `\n\n${timingLine(f)}`}${fpSamples(f)}`;
}

function costSection(run: SectionRun<CostResult> | undefined, matrix: MatrixResult | undefined, matrixCommand: string | undefined): string {
  const parts: string[] = ['## 4. Cost'];
  if (matrix !== undefined) {
    const presets = matrix.cells.filter((c) => c.available && c.cell.faults.length === 0 && c.cell.defenses.length === 0 && c.cell.freeList === undefined);
    const rows: string[][] = [];
    for (const scenario of matrix.scenarios) {
      rows.push([
        scenario,
        ...presets.map((c) => {
          const s = c.series.find((x) => x.scenario === scenario)?.summary;
          return s === undefined ? '–' : `${int(s.tokens.sentPerCycle)} / ${int(s.tokens.billedPerCycle)}`;
        }),
      ]);
    }
    parts.push(`### Tokens per cycle and scenario

Scale 1/${matrix.scale}, from the detection matrix (reproduce: ${cmd(matrixCommand ?? '')}). **How to read it:** prompt tokens
sent (the prober's estimate) / tokens billed (prompt + completion as the endpoint's usage reported them), mean
per cycle. Over-limit prompts the endpoint rejects are sent but not billed, so \`sent\` is the upload an
operator pays in bandwidth and \`billed\` what a metered API would charge.

${table(['scenario', ...presets.map((c) => c.cell.id)], rows)}`);
  }
  if (run === undefined) return parts.join('\n\n');
  if (run.result === undefined) {
    parts.push(`Planter-size search and projection not measured: ${run.error ?? 'skipped'}.`);
    return parts.join('\n\n');
  }
  const c = run.result;
  if (!c.available) {
    parts.push(`Planter-size search and projection not measured: ${c.reason}.`);
    return parts.join('\n\n');
  }
  const searchRows = c.search.map((p) => [
    `${int(p.plantTokens)} (${p.fraction < 1 ? `1/${Math.round(1 / p.fraction)}` : String(p.fraction)} pool)`,
    pci(p.marker),
    p.markerFirst === null ? 'never' : `cycle ${p.markerFirst}`,
    pci(p.rejection),
    p.either === undefined ? '–' : pci(p.either),
    `${int(p.sentPerCycle)} / ${int(p.billedPerCycle)}`,
  ]);
  const fractionText = (f: number): string => (f < 1 ? `1/${Math.round(1 / f)}` : String(f));
  const smallestLine = (what: string, point: PlanterPoint | null): string =>
    point === null
      ? `No size measured kept ${what} at or above ${DETECTION_GOAL} per cycle on \`${c.cell}\` (at that size and every larger one).`
      : `Smallest planted tokens per cycle keeping ${what} at or above ${DETECTION_GOAL} (at that size and every larger one measured): ` +
        `**${int(point.plantTokens)} tokens** (${fractionText(point.fraction)}× the advertised pool of ${int(c.poolTokens ?? 0)}), ` +
        `${int(point.sentPerCycle)} tokens sent per cycle; at full scale (pool ${int((c.poolTokens ?? 0) * c.scale)}) about **${int(point.plantTokens * c.scale)} planted tokens per cycle**.`;
  const smallest = [
    `- ${smallestLine('detection by either signal (what pages: both kinds are critical)', c.smallestEither ?? null)}`,
    `- ${smallestLine('the marker signal alone (proof of exposure)', c.smallest)}`,
  ].join('\n');
  parts.push(`### Smallest planter size (\`${c.cell}\`, overlimit-handoff)

Reproduce: ${cmd(run.command)} (${int(run.seconds)} s). Scale 1/${c.scale}: context ${int(c.contextTokens ?? 0)}, advertised pool ${int(c.poolTokens ?? 0)} tokens.

**How to read it.** Each row is a fresh engine probed ${c.search[0]?.marker.trials ?? 0} times with that many tokens of markers
planted per cycle (\`plantTokens\`; the default plants the whole advertised pool). The rejection signal does not
depend on planting; the marker signal does, through whether the stale pages an over-limit request inherits
hold our markers. As in \`serve\`, stale pages and the prober's marker registry carry over between cycles, so
on an otherwise idle engine markers planted in earlier cycles keep counting: *marker first* is the cycle where
a fresh engine first gave one away, and section 2 shows how other traffic erodes the carried-over markers.

${table(['planted tokens per cycle', 'marker p (95% CI)', 'marker first', 'rejection p (95% CI)', 'either p (95% CI)', 'tokens sent / billed per cycle'], searchRows)}

${smallest}`);
  const tiers = scheduleCost(defaultSchedule(), c.projection);
  const runsPerDay = new Map(tiers.rows.map((x) => [x.scenario, x.runsPerDay]));
  const projRows = c.projection.map((p) => [
    p.scenario,
    ...p.at.map((a) => `${int(a.sentPerCycle)} / ${int(a.billedPerCycle)}`),
    `**${int(p.projectedSent)} / ${int(p.projectedBilled)}**`,
    runsPerDay.has(p.scenario) ? `${int(p.projectedSent * runsPerDay.get(p.scenario)!)} (${runsPerDay.get(p.scenario)} runs)` : '–',
  ]);
  const everyCycle = scheduleCost(everyCycleSchedule(), c.projection);
  const scales = c.projection[0]?.at.map((a) => `1/${a.scale}`) ?? [];
  const total = c.projection.reduce((a, p) => a + p.projectedSent, 0);
  parts.push(`### Projected to a full-scale endpoint (1,048,576-token context)

**How to read it.** The prober sizes every prompt from what the endpoint advertises, so tokens per cycle are
a + b/scale; the two measured scales fix a and b, and scale 1 is the projection (both measured points are
shown so the fit can be checked). Tokens are sent / billed per cycle; the last column is prompt tokens sent
per day on \`serve\`'s default schedule (its cost tiers on ${formatDuration(tiers.intervalMs)} cycles, bench/schedule-cost.ts): runs a day × tokens per run.

${table(['scenario', ...scales.map((s) => `${s}: sent / billed`), 'full scale: sent / billed', 'sent per day, default schedule'], projRows)}

All scenarios together: about **${int(total)} prompt tokens sent per full-scale cycle**. A day of the default schedule: about **${int(tiers.sentPerDay)}** prompt tokens sent; of every scenario every cycle (\`schedule.scenarios: every_cycle\`): ${int(everyCycle.sentPerDay)}.${tiers.unmeasured.length > 0 ? ` Not projected (counted as 0): ${tiers.unmeasured.join(', ')}.` : ''}`);
  return parts.join('\n\n');
}

function overheadSection(run: SectionRun<OverheadResult>): string {
  if (run.result === undefined) return `## 5. Prober overhead\n\nNot measured: ${run.error ?? 'skipped'}.`;
  const o = run.result;
  const parts = [`## 5. Prober overhead\n\nReproduce: ${cmd(run.command)} (${int(run.seconds)} s).`];
  if (o.serve !== undefined) {
    const s = o.serve;
    parts.push(`### \`serve\` with ${s.targets} targets

**How it was measured.** ${s.engines.length} bundled engines (${s.engines.map((e) => e.preset + (e.standIn ? ' (stand-in)' : '')).join(', ')}, scale 1/${s.scale ?? '?'}) in a
child process of their own, behind ${s.targets} target names (targets ${s.engines.length > 1 ? 'alternate between them' : 'all point at it'}), every scenario each cycle,
interval ${s.intervalS} s, default concurrency, in a \`kvcanary serve\` child. After a warm-up (${s.cyclesBeforeWindow ?? '?'} cycles
completed; it waits for one per target, at most a minute), the serve process's CPU time (user + system, from /proc) and its completed cycles were read at the
start and the end of a ${fixed(s.windowSeconds, 0)} s window; RSS was sampled each second. These are the
prober's own costs: the engines' work is in the other process.

${table(
  ['cycles in window', 'scenario runs', 'CPU s', 'CPU s per cycle', 'CPU s per scenario run', 'CPU utilisation', 'RSS mean / max', 'RSS start → end', 'skipped runs'],
  [[
    int(s.cycles),
    int(s.scenarioRuns),
    fixed(s.cpuSeconds, 1),
    `**${fixed(s.cpuSecondsPerCycle, 3)}**`,
    fixed(s.cpuSecondsPerScenarioRun, 3),
    `${fixed(s.cpuUtilisation * 100, 0)}% of a core`,
    `${mib(s.rss.meanBytes)} / ${mib(s.rss.maxBytes)}`,
    `${mib(s.rss.startBytes)} → ${mib(s.rss.endBytes)}`,
    int(s.skipped),
  ]],
)}`);
  } else if (o.serveError !== undefined) {
    parts.push(`\`serve\` overhead not measured: ${o.serveError}`);
  }
  if (o.prompt.length > 0) {
    const rows = o.prompt.map((p) => [
      p.mode === 'prober' ? "prober (streamed)" : 'materialised string + fetch',
      int(p.contextTokens),
      int(p.promptTokens),
      mib(p.promptBytes),
      mib(p.baselineRssBytes),
      `**${mib(p.peakGrowthBytes)}** (${(p.runsGrowthBytes ?? [p.peakGrowthBytes]).map((g) => (g / 2 ** 20).toFixed(1)).join(', ')})`,
      `${fixed(p.growthPerPromptByte, 2)}×`,
      String(p.status ?? '–'),
    ]);
    parts.push(`### Peak memory while sending an over-limit prompt

**How to read it.** Each row is a fresh child process sending one prompt of the size overlimit-handoff
sends beyond the context limit (context + 2%), to a server advertising that context (it reads the body and
rejects it, 400). *Peak growth* is the kernel's RSS high-water mark during the send minus RSS just before
it (the mark is reset first); the median of three sends, each in a fresh process, with every send's
growth in MiB in parentheses. The prober's path streams the prompt from a repeated paragraph and never
holds it; the materialised row is the same prompt built as one string and sent with fetch, for comparison.
The ratio to the prompt's bytes shows whether memory grows with the prompt (a copy costs at least 1×).

${table(['client', 'advertised context', 'prompt tokens', 'prompt bytes', 'RSS before', 'peak RSS growth (runs)', 'growth / prompt bytes', 'status'], rows)}`);
  }
  return parts.join('\n\n');
}

function componentsSection(c: NonNullable<BenchReport['sections']['components']>): string {
  const parts = ['## 6. Scanner and engine figures'];
  for (const [name, run] of [['scanner', c.scanner], ['engine', c.engine]] as const) {
    const r = run.result;
    if (r === undefined) {
      parts.push(`### ${name}\n\nNot measured: ${run.error ?? 'skipped'}.`);
      continue;
    }
    parts.push(`### \`${r.script}\`

Reproduce: ${cmd(r.command)} (${int(r.seconds)} s, exit ${r.exitCode}).${r.error !== undefined ? ` ${r.error}` : ''}

\`\`\`
${r.table}
\`\`\``);
  }
  parts.push(`**How to read them.** \`bench:scanner\`: scanner throughput over model-like text with 1k, 10k and 100k live
markers, against a naive per-marker search in the same run (the ratio column), and its flatness as markers
grow (goal: >= 200 MB/s, flat). \`bench:engine\`: decode attention over a 1,048,576-token reservation as a
ratio to a plain streaming sum of the same bytes (goal >= 0.5), prefill rate, and the full-scale request
running on this machine.`);
  return parts.join('\n\n');
}

function closingSection(r: BenchReport): string {
  const lines: string[] = [];
  const m = r.sections.matrix?.result;
  if (m !== undefined) {
    const heads = faultHeadlines(m);
    const byCell = new Map<string, FaultHeadline[]>();
    for (const h of heads) byCell.set(h.cell, [...(byCell.get(h.cell) ?? []), h]);
    for (const [cellName, hs] of byCell) {
      const fired = hs.filter((h) => h.scenario !== null);
      const head = `- \`${cellName}\` (${hs[0]!.fault}): `;
      if (fired.length === 0) {
        lines.push(`${head}**not detected** — no isolation finding in ${m.cycles} cycles of ${hs[0]!.scenarios.join(', ')}.`);
        continue;
      }
      lines.push(
        head +
          fired
            .map((h) => `\`${h.signal}\` first at **cycle ${h.firstCycle}** (${int(h.firstTokens ?? 0)} tokens sent) by ${h.scenario}, per cycle ${pci(h.perCycle ?? undefined)}, one detection every ${fixed(h.cyclesPerDetection, 1)} cycles`)
            .join('; ') +
          `${hs.some((h) => h.scenario === null && (h.signal === MARKER_SIGNAL || h.signal === REJECTION_SIGNAL)) ? `; never ${hs.filter((h) => h.scenario === null).map((h) => `\`${h.signal}\``).join(' or ')}` : ''}.`,
      );
    }
    const unavailable = m.cells.filter((c) => !c.available && c.cell.role === 'positive');
    for (const c of unavailable) lines.push(`- \`${c.cell.id}\`: not measurable in this engine build (${c.reason}).`);
  }
  const fp = r.sections.falsePositives?.result;
  if (fp !== undefined) {
    const t = totalFalsePositives(fp);
    lines.push(`- False positives: **${t.findings} in ${int(t.pairs)} probe pairs** against ${fp.targets.filter((x) => x.available).map((x) => x.target).join(', ')}.`);
    const timing = timingLine(fp);
    if (timing !== '') lines.push(`- ${timing}`);
  }
  if (m !== undefined) {
    const inc = m.cells.find((c) => c.cell.id === 'incident' && c.available);
    const src = inc ?? m.cells.find((c) => c.available);
    if (src !== undefined) {
      const per = src.series.map((s) => `${s.scenario} ${int(s.summary!.tokens.sentPerCycle)}`).join(', ');
      lines.push(`- Tokens sent per cycle on \`${src.cell.id}\` at scale 1/${m.scale}: ${per}.`);
    }
  }
  const cost = r.sections.cost?.result;
  if (cost?.available === true && cost.projection.length > 0) {
    const total = cost.projection.reduce((a, p) => a + p.projectedSent, 0);
    lines.push(`- Projected to a 1,048,576-token endpoint: about ${int(total)} prompt tokens per cycle of every scenario; ${cost.projection.map((p) => `${p.scenario} ${int(p.projectedSent)}`).join(', ')}.`);
    const planting = (what: string, p: PlanterPoint | null | undefined): string =>
      p == null ? `${what}: no size measured` : `${what}: ${int(p.plantTokens)} tokens per cycle at 1/${cost.scale} (about ${int(p.plantTokens * cost.scale)} at full scale)`;
    lines.push(`- Smallest planting keeping \`${cost.cell}\` detection >= ${DETECTION_GOAL} per cycle: ${planting('either signal', cost.smallestEither)}; ${planting('marker signal alone', cost.smallest)}.`);
  }
  const o = r.sections.overhead?.result;
  if (o?.serve !== undefined) {
    lines.push(`- Overhead: **${fixed(o.serve.cpuSecondsPerCycle, 3)} CPU s per cycle** (all scenarios) with ${o.serve.targets} targets in \`serve\`; RSS ${mib(o.serve.rss.meanBytes)} mean, ${mib(o.serve.rss.maxBytes)} max.`);
  }
  const pr = o?.prompt.find((p) => p.mode === 'prober' && p.contextTokens === 1_048_576);
  if (pr !== undefined) lines.push(`- Sending a ${int(pr.promptTokens)}-token over-limit prompt (${mib(pr.promptBytes)}): peak RSS +${mib(pr.peakGrowthBytes)} (${fixed(pr.growthPerPromptByte, 2)}× the prompt's bytes).`);
  return `## Headline figures\n\n${lines.length > 0 ? lines.join('\n') : '_No section was measured._'}`;
}

export function renderMarkdown(r: BenchReport): string {
  const s = r.sections;
  const parts = [
    `# kvcanary benchmark report`,
    `What the prober catches, per unit of cost, and what it wrongly cries about — measured on the bundled engine's known positives (named faults) and known negatives (the fixes), with the engine's own ground truth. Machine-readable: [report.json](report.json).`,
    closingSection(r),
    methodSection(r),
  ];
  if (s.matrix !== undefined) parts.push(matrixSection(s.matrix));
  if (s.load !== undefined) parts.push(loadSection(s.load));
  if (s.falsePositives !== undefined) parts.push(fpSection(s.falsePositives));
  if (s.cost !== undefined || s.matrix?.result !== undefined) parts.push(costSection(s.cost, s.matrix?.result, s.matrix?.command));
  if (s.copyFidelity !== undefined) parts.push(copyFidelitySection(s.copyFidelity));
  if (s.overhead !== undefined) parts.push(overheadSection(s.overhead));
  if (s.components !== undefined) parts.push(componentsSection(s.components));
  return parts.join('\n\n') + '\n';
}

// ---------------------------------------------------------------------------------------- copy fidelity

const ratio = (k: number, n: number): string => `${k}/${n}`;

/** The copy-fidelity curve, per planter layout: where each signal held per cycle and where it fell. */
export function fidelityCurve(result: CopyFidelityResult): string {
  const all = result.rows.filter((r) => r.unavailable === undefined && r.cycles > 0);
  if (all.length === 0) return 'No row measured.';
  const name = (r: FidelityRow): string => `ngram ${r.ngram}, beta ${r.beta}, T ${r.temperature}`;
  const lines: string[] = [];
  for (const layout of [...new Set(all.map((r) => r.layout))]) {
    const rows = all.filter((r) => r.layout === layout);
    const lowest = rows.reduce((a, b) => (b.markerRecall < a.markerRecall ? b : a));
    const whole = rows.reduce((a, r) => a + r.wholeMarkerCycles, 0);
    const marker = rows.reduce((a, r) => a + r.markerCycles, 0);
    const cycles = rows.reduce((a, r) => a + r.cycles, 0);
    lines.push(
      `- ${layout} planters: the marker signal caught every cycle in ${rows.filter((r) => r.markerRecall === 1).length} of ${rows.length} settings, lowest ${fixed(lowest.markerRecall, 2)} (${name(lowest)}); ` +
        `the rejection signal every cycle in ${rows.filter((r) => r.rejectionRecall === 1).length} of ${rows.length}. ` +
        `Whole markers came back in ${whole} of ${cycles} cycles and the marker signal fired in ${marker}: fragment matching added ${marker - whole} cycles.`,
    );
  }
  return lines.join('\n');
}

function copyFidelitySection(run: SectionRun<CopyFidelityResult>): string {
  if (run.result === undefined) return `## 6. Copy fidelity\n\nNot measured: ${run.error ?? 'skipped'}.`;
  const r = run.result;
  const rows = r.rows.map((x) => [
    x.layout,
    String(x.ngram),
    String(x.beta),
    String(x.temperature),
    x.unavailable !== undefined ? `unavailable: ${x.unavailable}` : String(x.cycles),
    `${fixed(x.markerRecall, 2)} (${ratio(x.markerCycles, x.cycles)})`,
    `${fixed(x.rejectionRecall, 2)} (${ratio(x.rejectionCycles, x.cycles)})`,
    ratio(x.wholeMarkerCycles, x.cycles),
    `${int(x.exposedResponses)} / ${int(x.flaggedResponses)} / ${int(x.wholeMarkerResponses)}`,
  ]);
  return `## 6. Copy fidelity

\`${r.cell}\` × ${r.scenario}, ${r.cyclesPerRow} cycles a row, scale 1/${r.scale}, each row on a fresh engine. Reproduce: ${cmd(run.command)} (${int(run.seconds)} s).

The bundled model is an exact copy head by default (ngram ${r.defaults.ngram}, beta ${r.defaults.beta}, greedy): a 1.00 elsewhere in this report is its best case. Here it copies less faithfully: a shorter n-gram (\`--model-ngram\`) keys the copy on less context, a lower beta (\`--model-beta\`) flattens attention, and a temperature above 0 samples instead of taking the argmax (set on every request the engine admits; the prober asks for 0).

${table(['planters', 'ngram', 'beta', 'temperature', 'cycles', 'marker recall (per cycle)', 'rejection recall (per cycle)', 'cycles with a whole marker back', 'exposed / flagged by marker / whole-marker responses'], rows)}

${fidelityCurve(r)}

**How to read it.** Recall here is per cycle: every cycle of this cell leaks (the engine's ground truth counts foreign reads in each), so the fraction of cycles a signal fired is its recall. "Cycles with a whole marker back" counts cycles in which at least one response carried a complete planted marker body (the tap's own check, independent of the prober): where the marker signal fired in more cycles than that, the scanner's fragment matching (pieces of a marker, registered per cycle) made the difference. The rejection signal does not depend on what the model copies: it is the 200 itself.

**Planter layouts.** \`dense\` is the prober's default: every marker distinct, separated by spaces. Every marker then follows the same 9-character cue, so the first character after the reader's cue is a blend of every planted marker's first character: an exact greedy copier picks one and follows it, but a copier that samples, attends flatly or keys on a longer context than the 9 shared characters loses the thread at the first character. \`repeated\` (probe tuning \`planterLayout: 'repeated'\`) plants one marker per planter, every copy led by the very line readers end with, so the continuation is unambiguous wherever attention lands and an induction context up to 35 characters still matches.`;
}
