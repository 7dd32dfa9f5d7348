/**
 * bench/full-scale.json's shape, the daily totals it carries, and the docs/cost.md table rendered from it. The
 * daily totals are for a healthy target (`remediated`): each scenario's measured tokens per run times its
 * runs in a day under serve's default cost tiers, and with every scenario every cycle (scenario-schedule.ts
 * runsOver on the product's own parsed defaults). Pure apart from parsing those two configs.
 */
import { defaultSchedule, everyCycleSchedule } from './schedule-cost.js';
import { runsOver } from '../prober/src/service/scenario-schedule.js';
import { formatDuration } from '../prober/src/service/config.js';
import { SCENARIO_NAMES } from '../prober/src/probe/scenarios/index.js';

export interface FullScaleRow {
  name: string;
  preset: string;
  sent: number;
  computed: number;
  billed: number;
  seconds: number;
  /** `full` (real attention) or `skip` (the engine's arithmetic-free mode). */
  mode: string;
}

export interface DailyFigure {
  computed: number;
  sent: number;
}

export interface FullScaleFigures {
  command: string;
  scale: number;
  runArgs: string;
  startedAt: string;
  finishedAt: string;
  loadAverage: number[];
  scenarios: FullScaleRow[];
  daily: { defaultTiers: DailyFigure; everyCycle: DailyFigure };
  /** Scenario and preset pairs with no run (e.g. cut short for time), named wherever a total leaves them out. */
  unmeasured?: string[];
  /** Every run in detail (engine counters, outcome, peak memory); see full-scale-run.ts. */
  runs?: { name: string; preset: string; outcome: string; reason?: string; requests: number; enginePeakMiB: number; proberPeakMiB: number; engine: { prefilled: number; generated: number } }[];
}

const DAY_MS = 86_400_000;
export const HEALTHY_PRESET = 'remediated';

function perDay(runs: Map<string, number>, rows: readonly FullScaleRow[]): DailyFigure {
  let computed = 0;
  let sent = 0;
  for (const [scenario, n] of runs) {
    const r = rows.find((x) => x.name === scenario && x.preset === HEALTHY_PRESET);
    if (r === undefined) continue;
    computed += n * r.computed;
    sent += n * r.sent;
  }
  return { computed, sent };
}

export function dailyTotals(rows: readonly FullScaleRow[]): FullScaleFigures['daily'] {
  return { defaultTiers: perDay(runsOver(defaultSchedule(), DAY_MS), rows), everyCycle: perDay(runsOver(everyCycleSchedule(), DAY_MS), rows) };
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US');
const millions = (n: number): string => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} billion` : `${(n / 1e6).toFixed(1)} M`);

/** docs/cost.md's per-scenario full-scale cost table and daily totals, from bench/full-scale.json. */
export function fullScaleTable(f: FullScaleFigures): string {
  const presets = [...new Set(f.scenarios.map((r) => r.preset))];
  const measured = new Set(f.scenarios.map((r) => r.name));
  const names = [...SCENARIO_NAMES.filter((n) => measured.has(n)), ...[...measured].filter((n) => !SCENARIO_NAMES.includes(n))];
  const cell = (name: string, preset: string): string => {
    const r = f.scenarios.find((x) => x.name === name && x.preset === preset);
    const run = f.runs?.find((x) => x.name === name && x.preset === preset);
    if (r === undefined) return 'not measured | – | –';
    const end = run === undefined ? '' : ` (${run.outcome}${run.reason !== undefined ? `, ${run.reason}` : ''})`;
    return `${int(r.sent)} | ${int(r.computed)} | ${int(r.billed)}${end}`;
  };
  const modes = [...new Set(f.scenarios.map((r) => r.mode))];
  const unmeasuredHealthy = (f.unmeasured ?? []).filter((u) => u.startsWith(`${HEALTHY_PRESET}/`)).map((u) => u.slice(HEALTHY_PRESET.length + 1));
  const runs = f.runs ?? [];
  const longest = runs.reduce<(typeof runs)[number] | undefined>((a, r) => (a === undefined || (f.scenarios.find((x) => x.name === r.name && x.preset === r.preset)?.seconds ?? 0) > (f.scenarios.find((x) => x.name === a.name && x.preset === a.preset)?.seconds ?? 0) ? r : a), undefined);
  const longestSeconds = longest === undefined ? undefined : f.scenarios.find((x) => x.name === longest.name && x.preset === longest.preset)?.seconds;
  const peak = (k: 'enginePeakMiB' | 'proberPeakMiB'): string => int(Math.max(0, ...runs.map((r) => r[k])));
  const tiers = defaultSchedule();
  const day = runsOver(tiers, DAY_MS);
  const schedule = [...day].filter(([, n]) => n > 0).map(([s, n]) => `${s} ×${n}`).join(', ');
  return [
    `\`${f.command}\` (scale 1: context 1,048,576; one run per scenario and preset, a fresh engine each; \`kvcanary run ${f.runArgs}\`; ` +
      `engine attention: ${modes.map((m) => `\`${m}\``).join(', ')}; measured ${f.startedAt.slice(0, 10)}, load average ${f.loadAverage.map((x) => x.toFixed(1)).join(' to ')}; [bench/full-scale.json](bench/full-scale.json)). ` +
      'Tokens per run: sent (prompt tokens the prober sent), computed (prompt tokens the engine prefilled plus tokens it generated, its own counters), billed (usage):',
    '',
    `| scenario | ${presets.map((p) => `\`${p}\` sent | computed | billed`).join(' | ')} |`,
    `|---|${presets.map(() => '---|---|---').join('|')}|`,
    ...names.map((n) => `| \`${n}\` | ${presets.map((p) => cell(n, p)).join(' | ')} |`),
    '',
    ...(longest === undefined ? [] : [`Peak RSS over these runs: engine ${peak('enginePeakMiB')} MiB, prober ${peak('proberPeakMiB')} MiB; the longest run \`${longest.name}\` against \`${longest.preset}\`, ${int(longestSeconds ?? 0)} s (each run's wall time and peak memory are in the JSON's \`runs\`).`, '']),
    ...(unmeasuredHealthy.length === 0 ? [] : [`Not measured: ${(f.unmeasured ?? []).map((u) => `\`${u}\``).join(', ')} ([What the runs found](docs/cost.md#what-the-runs-found) says why); the daily totals below leave ${unmeasuredHealthy.join(', ')} out.`, '']),
    `A day for one healthy (\`${HEALTHY_PRESET}\`) full-scale target on the default ${formatDuration(tiers.schedule.intervalMs)} interval: ` +
      `the default cost tiers (${schedule}) **${millions(f.daily.defaultTiers.computed)} tokens computed**, ${millions(f.daily.defaultTiers.sent)} sent; ` +
      `every scenario every cycle **${millions(f.daily.everyCycle.computed)} computed**, ${millions(f.daily.everyCycle.sent)} sent.`,
  ].join('\n') + '\n';
}
