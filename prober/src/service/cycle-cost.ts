/**
 * A lower bound on what one cycle of the configured scenarios costs in tokens, from the endpoint's advertised
 * sizes (context limit, KV pools) where known and the probe tuning otherwise. Used to warn — in
 * `check-config` from the config alone, in `serve` once the endpoint's sizes are known — when the hourly
 * budget cannot fit one cycle with every scenario due (the first cycle on an empty store, and whenever the
 * cost tiers line up: its scenarios would be cut short, inconclusive with reason budget), or cannot fit the
 * schedule's busiest hour (the tiers' runs in the first hour: cycles would be skipped).
 *
 * Bounds follow each scenario's own sizing (scenarios/*.ts): what it must send to conclude, not what a
 * cycle happened to cost. A scenario whose cost depends on a size nobody stated counts as 0 (unknown).
 */
import type { ProbeTuning } from '../probe/scenarios/context.js';
import { limitProbes } from '../probe/scenarios/overlimit-handoff.js';
import type { ScheduleConfig } from './config.js';
import { runsOver, tiersOf } from './scenario-schedule.js';

export interface AdvertisedSizes {
  contextTokens?: number;
  poolTokens?: number;
  /** The pool where requests reserve their pages (decode's in disaggregated serving). */
  reservationPoolTokens?: number;
}

/** The race scenarios' stated power needs 29 windows (r = 0.1 at c = 0.95). */
const RACE_WINDOWS = 29;

const clamp = (x: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, x));

/** Per scenario: a lower bound in tokens, or undefined when it depends on a size nobody stated. */
export function scenarioCostFloor(scenario: string, sizes: AdvertisedSizes, tuning: ProbeTuning = {}): number | undefined {
  const { contextTokens: ctx, poolTokens: pool } = sizes;
  const bound = Math.min(pool ?? Infinity, ctx ?? Infinity);
  const known = Number.isFinite(bound);
  const out = tuning.readerMaxTokens ?? 48;
  switch (scenario) {
    case 'capacity-audit':
      return 0;
    case 'overlimit-rejection':
      // Only the prompts the endpoint must reject: the same sizes overlimit-handoff sends them at.
      return ctx === undefined ? undefined : limitProbes(ctx, pool, out, []).filter((p) => p.mustReject).reduce((a, p) => a + p.tokens, 0);
    case 'overlimit-handoff': {
      if (ctx === undefined) return undefined;
      const plant = tuning.plantTokens ?? pool ?? 4 * (tuning.planterTokens ?? 2048);
      return plant + Math.ceil(ctx * 1.02);
    }
    case 'abort-race': {
      const planter = tuning.planterTokens ?? (known ? clamp(Math.floor(bound / 2), 256, 4096) : undefined);
      if (planter === undefined) return undefined;
      const windows = tuning.abortRounds ?? RACE_WINDOWS;
      // Each window: the planter, and readers that together reserve at least as much again.
      return windows * 2 * (planter + out);
    }
    case 'concurrent-interleave': {
      const widest = Math.max(1, ...(tuning.interleaveWaves ?? [2, 4, 8]));
      const planter = tuning.planterTokens ?? (known ? clamp(Math.floor((bound * 1.5) / widest), 128, 4096) : undefined);
      if (planter === undefined) return undefined;
      return RACE_WINDOWS * (planter + out);
    }
    case 'prefix-isolation':
      return 2 * (tuning.timingPairs ?? 12) * (tuning.prefixTokens ?? 512);
    case 'prefix-collision':
      return 3 * (tuning.prefixTokens ?? 512);
    case 'prefix-churn': {
      const churn = tuning.plantTokens ?? pool;
      return churn === undefined ? undefined : (tuning.churnRounds ?? 2) * churn;
    }
    default:
      return undefined;
  }
}

/** The cycle's floor and the scenarios it could not price. */
export function cycleCostFloor(scenarios: readonly string[], sizes: AdvertisedSizes, tuning?: ProbeTuning): { tokens: number; unknown: string[] } {
  let tokens = 0;
  const unknown: string[] = [];
  for (const s of scenarios) {
    const c = scenarioCostFloor(s, sizes, tuning);
    if (c === undefined) unknown.push(s);
    else tokens += c;
  }
  return { tokens, unknown };
}

const HOUR_MS = 3_600_000;

/** The schedule's busiest hour: each scenario's floor times its runs in the first hour (every tier due at once). */
export function busiestHourFloor(
  scenarios: readonly string[], schedule: Pick<ScheduleConfig, 'intervalMs' | 'scenarioIntervalsMs'>, sizes: AdvertisedSizes, tuning?: ProbeTuning,
): { tokens: number; unknown: string[] } {
  const runs = runsOver({ scenarios, schedule }, HOUR_MS);
  let tokens = 0;
  const unknown: string[] = [];
  for (const s of scenarios) {
    const c = scenarioCostFloor(s, sizes, tuning);
    if (c === undefined) unknown.push(s);
    else tokens += c * runs.get(s)!;
  }
  return { tokens, unknown };
}

/** A warning line when the hourly budget cannot fit one cycle with every scenario due, or the busiest hour; else undefined. */
export function budgetWarning(
  target: {
    name: string; scenarios: readonly string[]; budget: { tokensPerHour: number }; tuning?: ProbeTuning;
    schedule: Pick<ScheduleConfig, 'intervalMs' | 'scenarioIntervalsMs'>;
  },
  sizes: AdvertisedSizes,
  where: string,
): string | undefined {
  const limit = target.budget.tokensPerHour;
  const unpriced = (unknown: string[]): string => (unknown.length > 0 ? `; not priced: ${unknown.join(', ')}` : '');
  const cycle = cycleCostFloor(target.scenarios, sizes, target.tuning);
  if (cycle.tokens > limit) {
    return (
      `${target.name}: budget.tokens_per_hour ${limit} cannot fit one cycle of ${target.scenarios.join(', ')} ` +
      `(at least ${cycle.tokens} tokens ${where}${unpriced(cycle.unknown)}): cycles will be skipped or cut short, inconclusive (reason budget)`
    );
  }
  const hour = busiestHourFloor(target.scenarios, target.schedule, sizes, target.tuning);
  if (hour.tokens <= limit) return undefined;
  const tiers = tiersOf(target).length === 0 ? 'every scenario every cycle' : 'with its cost tiers';
  return (
    `${target.name}: budget.tokens_per_hour ${limit} cannot fit the busiest hour of its schedule (${tiers}: ` +
    `at least ${hour.tokens} tokens ${where}${unpriced(hour.unknown)}): cycles will be skipped (reason budget); ` +
    `raise the budget or lengthen schedule.interval or schedule.scenarios`
  );
}
