/**
 * Cost tiers: which of a target's scenarios a cycle runs.
 *
 * A target's cycle comes every `schedule.interval`; a scenario listed in `schedule.scenarios` with a longer
 * interval runs only in the cycles where that much time has passed since it last started (within half a
 * cycle, so a 1h scenario on a 5m grid runs every 12th cycle, not every 13th). Scenarios not listed run every
 * cycle. The first cycle after start runs whatever has not run within its interval according to the store.
 */
import type { TargetConfig } from './config.js';

/**
 * The schedule `kvcanary init` writes and the README costs: the capacity audit (no prompts) every cycle, the
 * rejection signal (overlimit-rejection: over-limit prompts only, no planting) every 15 minutes, the planted
 * and racing scenarios hourly, the prefix-cache scenarios that plant the whole pool every six hours.
 */
export const AFFORDABLE_SCENARIO_INTERVALS: Readonly<Record<string, string>> = {
  'overlimit-rejection': '15m',
  'overlimit-handoff': '1h',
  'abort-race': '1h',
  'concurrent-interleave': '1h',
  'prefix-isolation': '1h',
  'prefix-collision': '6h',
  'prefix-churn': '6h',
};

export function dueScenarios(target: TargetConfig, lastStarted: ReadonlyMap<string, number>, now: number): string[] {
  const every = target.schedule.scenarioIntervalsMs ?? {};
  const slack = target.schedule.intervalMs / 2;
  return target.scenarios.filter((s) => {
    const interval = every[s];
    const last = lastStarted.get(s);
    return interval === undefined || interval <= target.schedule.intervalMs || last === undefined || now - last >= interval - slack;
  });
}
