/**
 * Cost tiers: which of a target's scenarios a cycle runs.
 *
 * A target's cycle comes every `schedule.interval`; a scenario with a longer interval in the effective
 * `schedule.scenarios` (the defaults below, overridden key by key by the config) runs only in the cycles
 * where that much time has passed since it last started (within half a cycle, so a 1h scenario on a 5m grid
 * runs every 12th cycle, not every 13th). Scenarios without one run every cycle. The first cycle after start
 * runs whatever has not run within its interval according to the store: on an empty store, every scenario.
 */
import type { ScheduleConfig } from './config.js';

/**
 * The tiers `serve` uses unless the config says otherwise (`schedule.scenarios` overrides them key by key;
 * `every_cycle` turns one or all of them off): the capacity audit (no prompts) every cycle, the rejection
 * signal (overlimit-rejection: over-limit prompts only, no planting; what catches the incident) every 15
 * minutes, abort-race and prefix-isolation hourly, concurrent-interleave (it holds ballast over the pool)
 * every two hours, overlimit-handoff (it plants the whole pool to
 * show a leak's markers; the rejection it also checks is the cheap tier's) every six hours, the prefix-cache
 * scenarios that churn the whole pool daily. What this costs a full-scale endpoint a day is measured in
 * bench/full-scale.json (docs/cost.md "Sizing the cost").
 */
export const DEFAULT_SCENARIO_INTERVALS: Readonly<Record<string, string>> = {
  'overlimit-rejection': '15m',
  'overlimit-handoff': '6h',
  'abort-race': '1h',
  'concurrent-interleave': '2h',
  'prefix-isolation': '1h',
  'prefix-collision': '24h',
  'prefix-churn': '24h',
};

/** The `schedule.scenarios` value (for the whole map or one scenario) that means "every cycle". */
export const EVERY_CYCLE = 'every_cycle';

type Scheduled = { scenarios: readonly string[]; schedule: Pick<ScheduleConfig, 'intervalMs' | 'scenarioIntervalsMs'> };

export function dueScenarios(target: Scheduled, lastStarted: ReadonlyMap<string, number>, now: number): string[] {
  const every = target.schedule.scenarioIntervalsMs ?? {};
  const slack = target.schedule.intervalMs / 2;
  return target.scenarios.filter((s) => {
    const interval = every[s];
    const last = lastStarted.get(s);
    return interval === undefined || interval <= target.schedule.intervalMs || last === undefined || now - last >= interval - slack;
  });
}

/** The scenarios that run less often than every cycle, with their intervals (what check-config prints). */
export function tiersOf(target: Scheduled): [string, number][] {
  const every = target.schedule.scenarioIntervalsMs ?? {};
  return target.scenarios.flatMap((s): [string, number][] => {
    const ms = every[s];
    return ms !== undefined && ms > target.schedule.intervalMs ? [[s, ms]] : [];
  });
}

/**
 * How often each scenario runs in the first `spanMs` after start with no history: cycles exactly one
 * interval apart (jitter only delays them), the selection dueScenarios makes. Over one hour this is the
 * busiest hour (every tier is due in the first cycle); over a day, the daily schedule.
 */
export function runsOver(target: Scheduled, spanMs: number): Map<string, number> {
  const runs = new Map<string, number>(target.scenarios.map((s) => [s, 0]));
  const last = new Map<string, number>();
  for (let t = 0; t < spanMs; t += target.schedule.intervalMs) {
    for (const s of dueScenarios(target, last, t)) {
      last.set(s, t);
      runs.set(s, runs.get(s)! + 1);
    }
  }
  return runs;
}

/**
 * How long a scenario's latest pass counts towards its target's standing (target-verdict.ts): its interval
 * (its tier, else the cycle interval) plus a grace of one more cycle with its jitter and timeout — a scenario
 * due is started within half a cycle and may run until the timeout.
 */
export function freshnessMs(target: { schedule: Pick<ScheduleConfig, 'intervalMs' | 'scenarioIntervalsMs' | 'jitterMs' | 'timeoutMs'> }, scenario: string): number {
  const { intervalMs, jitterMs, timeoutMs } = target.schedule;
  const tier = target.schedule.scenarioIntervalsMs?.[scenario];
  return Math.max(intervalMs, tier ?? 0) + intervalMs + jitterMs + timeoutMs;
}
