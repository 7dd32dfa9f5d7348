/**
 * What a target's schedule is expected to cost a healthy endpoint (probe/scenarios/cost.ts per run, times
 * the runs its cost tiers make), and the default hourly budget that follows from it (`tokens_per_hour:
 * auto`). Printed by check-config (at a reference size) and logged by serve (at the endpoint's own sizes).
 */
import type { ProbeTuning } from '../probe/scenarios/context.js';
import { BUDGET_HEADROOM, scenarioCost, type EndpointSizes, type TokenCost } from '../probe/scenarios/cost.js';
import type { ScheduleConfig } from './config.js';
import { runsOver } from './scenario-schedule.js';

export type { EndpointSizes, TokenCost };
export { scenarioCost };

export interface ScheduledCost {
  perDay: TokenCost;
  busiestHour: TokenCost;
  /** The first two hours: a sliding hour can hold two runs of an hourly tier (see derivedBudget). */
  firstTwoHours: TokenCost;
  /** Scenarios whose cost depends on a size nobody stated (counted as 0 above). */
  unknown: string[];
}

const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;

/** A target's expected cost per day and in its busiest hour (the first, every tier due at once). */
export function scheduledCost(
  target: { scenarios: readonly string[]; schedule: Pick<ScheduleConfig, 'intervalMs' | 'scenarioIntervalsMs'>; tuning?: ProbeTuning },
  sizes: EndpointSizes,
): ScheduledCost {
  const day = runsOver(target, DAY_MS);
  const hour = runsOver(target, HOUR_MS);
  const twoHours = runsOver(target, 2 * HOUR_MS);
  const perDay = { sent: 0, computed: 0 };
  const busiestHour = { sent: 0, computed: 0 };
  const firstTwoHours = { sent: 0, computed: 0 };
  const unknown: string[] = [];
  for (const s of target.scenarios) {
    const c = scenarioCost(s, sizes, target.tuning);
    if (c === undefined) {
      unknown.push(s);
      continue;
    }
    perDay.sent += c.sent * day.get(s)!;
    perDay.computed += c.computed * day.get(s)!;
    busiestHour.sent += c.sent * hour.get(s)!;
    busiestHour.computed += c.computed * hour.get(s)!;
    firstTwoHours.sent += c.sent * twoHours.get(s)!;
    firstTwoHours.computed += c.computed * twoHours.get(s)!;
  }
  return { perDay, busiestHour, firstTwoHours, unknown };
}

/**
 * The default hourly budget (`tokens_per_hour: auto`): what the first two hours are expected to send, with
 * headroom; undefined while no size is known. Two hours, because the budget is a sliding hour and a run is
 * charged when it ends: an hourly tier's next run is due up to half a cycle before the hour is out, so one
 * sliding hour can hold two runs of every hourly scenario (and the busiest hour's every tier at once).
 */
export function derivedBudget(cost: ScheduledCost): number | undefined {
  return cost.firstTwoHours.sent > 0 ? Math.ceil(cost.firstTwoHours.sent * BUDGET_HEADROOM) : undefined;
}

const millions = (n: number): string => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} billion` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : Math.round(n).toLocaleString('en-US'));

/** "about 41.2 M tokens computed and 310.5 M sent a day", with what could not be priced. */
export function describeDailyCost(cost: ScheduledCost): string {
  return `about ${millions(cost.perDay.computed)} tokens computed and ${millions(cost.perDay.sent)} sent a day` +
    (cost.unknown.length > 0 ? ` (not priced: ${cost.unknown.join(', ')})` : '');
}
