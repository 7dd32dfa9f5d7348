/**
 * What a `serve` schedule costs a day at full scale: the bench's projected prompt tokens per cycle of each
 * scenario (the cost section of bench/report.json, "Projected to a full-scale endpoint") times how often the
 * schedule runs it (scenario-schedule.ts runsOver: the prober's own selection, on cycles exactly one
 * interval apart from a start with no history). The schedules are the product's own: the config parser's
 * defaults, and the same with `schedule.scenarios: every_cycle`. Pure apart from parsing those two configs.
 */
import { parseConfig, type TargetConfig } from '../prober/src/service/config.js';
import { SCENARIO_NAMES } from '../prober/src/probe/scenarios/index.js';
import { runsOver } from '../prober/src/service/scenario-schedule.js';
import type { ProjectionRow } from './cost.js';

const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;

export interface ScheduleCost {
  intervalMs: number;
  /** Every scenario of the schedule, in the registry's order. */
  rows: { scenario: string; runsPerDay: number; runsInBusiestHour: number; sentPerRun: number | undefined }[];
  sentPerDay: number;
  /** The first hour after start with no history: every tier is due in its first cycle. */
  sentInBusiestHour: number;
  /** Scenarios the projection has no figure for (counted as 0 above, and named wherever the total is shown). */
  unmeasured: string[];
}

/** The target `serve` builds from a config naming only its URL, with `schedule` (YAML flow mapping) if given. */
export function serveTarget(schedule?: string): TargetConfig {
  const yaml = `${schedule === undefined ? '' : `schedule: ${schedule}\n`}targets: [{ name: t, base_url: "http://127.0.0.1:1" }]\n`;
  return parseConfig(yaml, { knownScenarios: SCENARIO_NAMES, requireSecrets: false, env: {} }).targets[0]!;
}

/** The default schedule, and every scenario every cycle (the opt-out). */
export const defaultSchedule = (): TargetConfig => serveTarget();
export const everyCycleSchedule = (): TargetConfig => serveTarget('{ scenarios: every_cycle }');

export function scheduleCost(target: TargetConfig, projection: readonly ProjectionRow[]): ScheduleCost {
  const perRun = new Map(projection.map((p) => [p.scenario, p.projectedSent]));
  const day = runsOver(target, DAY_MS);
  const hour = runsOver(target, HOUR_MS);
  const rows = target.scenarios.map((scenario) => ({
    scenario, runsPerDay: day.get(scenario)!, runsInBusiestHour: hour.get(scenario)!, sentPerRun: perRun.get(scenario),
  }));
  const sum = (runs: (r: ScheduleCost['rows'][number]) => number): number => rows.reduce((a, r) => a + runs(r) * (r.sentPerRun ?? 0), 0);
  return {
    intervalMs: target.schedule.intervalMs,
    rows,
    sentPerDay: sum((r) => r.runsPerDay),
    sentInBusiestHour: sum((r) => r.runsInBusiestHour),
    unmeasured: rows.filter((r) => r.sentPerRun === undefined).map((r) => r.scenario),
  };
}
