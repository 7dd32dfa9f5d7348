/**
 * docs/measured.md's race tables, rendered from bench/races-fresh.json (bench/races.ts --fresh) and bench/default-runs.json
 * (bench/default-runs.ts) like the other figure blocks (render-figures.ts). Pure: no I/O.
 */

interface Proportion {
  successes: number;
  trials: number;
  p: number;
  low: number;
  high: number;
}

interface LoadAverage {
  start: number;
  end: number;
}

export interface RaceFigures {
  command?: string;
  scenario: string;
  runsPerCell: number;
  measuredAt: string;
  loadAverage?: LoadAverage;
  rows: {
    cell: string;
    positive: boolean;
    runs: number;
    detected: number;
    detectedOnlyEarlierMarkers?: number;
    passed: number;
    recall?: Proportion;
    falsePositiveBound?: number | null;
    medianRunMs: number;
  }[];
}

export interface DefaultRunFigures {
  command: string;
  runsPerConfig: number;
  scale: number;
  measuredAt: string;
  loadAverage?: LoadAverage;
  rows: {
    config: string;
    race: boolean;
    runs: number;
    leakExit1: number;
    recall?: Proportion;
    timingAlarms: number;
    timingAlarmBound: number | null;
    exits: Record<string, number>;
    medianRunS: number;
    maxRunS: number;
    records: { kinds: string[] }[];
  }[];
}

const two = (x: number): string => x.toFixed(2);
const interval = (p: Proportion): string => `${two(p.p)} [${two(p.low)}, ${two(p.high)}]`;
const load = (l: LoadAverage | undefined): string => (l === undefined ? '' : `, load average ${l.start.toFixed(1)} at the start and ${l.end.toFixed(1)} at the end`);

/** The per-run recall matrix of one scenario: every cell, its defended twins' false positives. */
export function raceTable(r: RaceFigures): string {
  const rows = r.rows.map((row) => {
    const [preset, scale, freeList, fault] = row.cell.split('/');
    const configuration = `\`${preset}\` 1/${scale} ${(freeList ?? '').toUpperCase()}, \`${fault}\``;
    const caught = row.positive
      ? `${interval(row.recall!)}${row.detectedOnlyEarlierMarkers ? ` (${row.detectedOnlyEarlierMarkers} by an earlier run's markers only)` : ''}`
      : `${row.detected} false positives (95% bound ${row.falsePositiveBound === null || row.falsePositiveBound === undefined ? '–' : two(row.falsePositiveBound)})`;
    return `| ${configuration} | ${row.runs} | ${caught} | ${row.passed} | ${(row.medianRunMs / 1000).toFixed(1)} s |`;
  });
  return (
    `\`${r.command ?? 'npx tsx bench/races.ts'}\`, \`${r.scenario}\` alone, measured ${r.measuredAt.slice(0, 10)}${load(r.loadAverage)} ` +
    `([bench/races-fresh.json](bench/races-fresh.json)):\n\n` +
    ['| configuration | runs | caught (95% Wilson) | pass | median run |', '|---|---|---|---|---|', ...rows].join('\n') +
    '\n'
  );
}

/** Full default runs through the CLI: recall on the race faults, timing false alarms everywhere. */
export function defaultRunsTable(d: DefaultRunFigures): string {
  const rows = d.rows.map((row) => {
    const exits = Object.entries(row.exits)
      .map(([code, n]) => `${n}× ${code}`)
      .join(', ');
    const caught = row.race ? interval(row.recall!) : '–';
    const kinds = new Map<string, number>();
    for (const r of row.records) for (const k of r.kinds) kinds.set(k, (kinds.get(k) ?? 0) + 1);
    const findings = kinds.size === 0 ? 'none' : [...kinds].map(([k, n]) => `\`${k}\` in ${n}`).join(', ');
    const bound = row.timingAlarmBound === null ? '' : ` (95% bound ${two(row.timingAlarmBound)})`;
    return `| \`${row.config}\` | ${row.runs} | ${exits} | ${findings} | ${caught} | ${row.timingAlarms}${bound} | ${row.medianRunS} s (max ${row.maxRunS} s) |`;
  });
  return (
    `\`${d.command}\`, scale 1/${d.scale}, measured ${d.measuredAt.slice(0, 10)}${load(d.loadAverage)} ([bench/default-runs.json](bench/default-runs.json)):\n\n` +
    ['| configuration | runs | exit codes | findings (runs) | exit 1 with `cross-request-leak` | timing alarms | run time, median |', '|---|---|---|---|---|---|---|', ...rows].join('\n') +
    '\n'
  );
}

export interface RaceCalibrationFigures {
  command: string;
  scenario: string;
  scenarioNote?: string;
  confidenceCheck: string;
  runsPerRow: number;
  /** Every row the bench was asked for (`id`s); those without a row here were not measured. */
  plannedRows?: string[];
  /** The faults the scenario's statement names (race-power.ts ABORT_RACE_MEASURED_FAULTS, CONCURRENT_INTERLEAVE_MEASURED_FAULTS). */
  measuredFaults?: string[];
  parallel: number;
  startedAt: string;
  measuredAt: string;
  loadAverage?: LoadAverage;
  rows: {
    id: string;
    fault: string;
    preset: string;
    freeList: string;
    scale: number;
    rate: number;
    /** Disaggregated presets only. */
    transferLatencyMs?: number;
    tuned: boolean;
    runs: number;
    caught: number;
    statedConfidence: number;
    detectableRate: number;
    complete: boolean;
    recall: Proportion;
    meetsStatedConfidence: boolean | null;
    medianRunS: number;
  }[];
}

/**
 * bench:race-calibration's rows: per-run recall at each fault rate, against what the calibrated scenario states
 * (abort-race, or concurrent-interleave with `--scenario`); `source` is the JSON the rows came from.
 */
export function raceCalibrationTable(d: RaceCalibrationFigures, source = 'bench/race-calibration.json'): string {
  const first = d.rows[0];
  // A default-run calibration (--default-runs) states abort-race's figures.
  const scenario = d.scenario.startsWith('default run') ? 'abort-race' : d.scenario;
  const rows = d.rows.map((row) => {
    const setting = row.transferLatencyMs === undefined ? `preset \`${row.preset}\`` : `${row.transferLatencyMs} ms transfers`;
    const configuration = `\`${row.fault}\` ${row.freeList.toUpperCase()}, 1/${row.scale}, ${setting}${row.tuned ? '' : ' (never tuned on)'}`;
    const runs = row.complete ? String(row.runs) : `${row.runs} of ${d.runsPerRow} (not finished)`;
    const meets = !row.complete ? '– (not finished)' : row.meetsStatedConfidence === null ? 'below the stated rate' : row.meetsStatedConfidence ? 'yes' : '**no**';
    return `| ${configuration} | ${row.rate} | ${runs} | ${row.caught} | ${interval(row.recall)} | ${meets} | ${row.medianRunS} s |`;
  });
  const stated =
    first === undefined
      ? ''
      : `${scenario} states: a race fault${d.measuredFaults === undefined ? '' : ` of the kind measured (${d.measuredFaults.map((f) => `\`${f}\``).join(', ')})`} firing on ≥${first.detectableRate} of its eligible events is caught in ≥${first.statedConfidence} of runs. `;
  const missing = (d.plannedRows ?? []).filter((id) => !d.rows.some((r) => r.id === id));
  const notMeasured = missing.length === 0 ? '' : `\nNot measured (the bench was stopped first): ${missing.map((id) => `\`${id}\``).join(', ')}.\n`;
  return (
    `\`${d.command}\`, \`${d.scenario}\`, ${d.parallel} runs at a time, ${d.startedAt.slice(0, 16).replace('T', ' ')} to ${d.measuredAt.slice(0, 16).replace('T', ' ')} UTC${load(d.loadAverage)} ` +
    `([${source}](${source})). ${stated}` +
    `A row at a rate ≥ that meets it when the lower end of its 95% Wilson interval is ≥ the stated confidence.\n\n` +
    ['| configuration | rate | runs | caught | recall (95% Wilson) | meets the statement | median run |', '|---|---|---|---|---|---|---|', ...rows].join('\n') +
    '\n' +
    notMeasured
  );
}
