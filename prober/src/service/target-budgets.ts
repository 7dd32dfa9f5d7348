/**
 * The scheduler's token budgets, one per target name (budget.ts holds the arithmetic): kept across a target's
 * removal and re-adding (what was spent in the last hour was still spent), shown as the remaining-budget gauge,
 * and seeded at start from what the store says was spent within the hour.
 */
import type { Logger } from 'pino';
import { TokenBudget, WINDOW_MS, costOf } from './budget.js';
import type { Clock } from './clock.js';
import type { TargetConfig } from './config.js';
import { budgetWarning } from './cycle-cost.js';
import { derivedBudget, describeDailyCost, scenarioCost, scheduledCost, type EndpointSizes } from './scenario-cost.js';
import type { Metrics } from './metrics.js';
import type { ProbeRun } from '../probe/result.js';
import type { ScenarioLatest, Store } from './store.js';

export interface TargetBudgets {
  /** The target's budget at its current limit (created on first use). */
  of(t: TargetConfig): TokenBudget;
  /** Refreshes the remaining-budget gauge, for targets still configured. */
  show(name: string): void;
  /**
   * Charges the store's spend within the last hour and the latest cost of each scenario; `started` learns when
   * each scenario last ran (so cost tiers carry over a restart). A store error is logged: budgets start empty.
   */
  seed(store: Partial<Pick<Store, 'tokenSpend' | 'latestPerTarget'>>, started: (target: string, scenario: string, at: number, latest: ScenarioLatest) => void): void;
  /**
   * The endpoint's advertised sizes, as a probe saw them: a derived budget (`tokens_per_hour: auto`) takes its
   * limit from them, and scenarios with no cost yet are expected to cost what scenario-cost.ts says.
   */
  sized(t: TargetConfig, sizes: EndpointSizes): void;
}

export function createTargetBudgets(deps: { metrics: Metrics; clock: Clock; logger: Logger; configured: (name: string) => boolean }): TargetBudgets {
  const budgets = new Map<string, TokenBudget>();
  /** Derived limits by target name (until a probe saw the endpoint's sizes, a derived budget is unlimited). */
  const derived = new Map<string, number>();
  const limitOf = (t: TargetConfig): number => (t.budget.derived === true ? derived.get(t.name) ?? t.budget.tokensPerHour : t.budget.tokensPerHour);
  const budgetOf = (t: TargetConfig): TokenBudget => {
    let b = budgets.get(t.name);
    if (b === undefined) { b = new TokenBudget(limitOf(t)); budgets.set(t.name, b); }
    b.setLimit(limitOf(t));
    return b;
  };
  return {
    of: budgetOf,

    sized(t, sizes) {
      const b = budgetOf(t);
      for (const s of t.scenarios) {
        if (b.costEstimate(s) !== undefined) continue;
        const c = scenarioCost(s, sizes, t.tuning);
        if (c !== undefined) b.noteCost(s, c.sent);
      }
      if (t.budget.derived !== true) return;
      const limit = derivedBudget(scheduledCost(t, sizes));
      if (limit === undefined) return;
      derived.set(t.name, limit);
      b.setLimit(limit);
    },

    show(name) {
      const b = budgets.get(name);
      if (b !== undefined && deps.configured(name)) deps.metrics.budgetRemaining.set({ target: name }, b.remaining(deps.clock.now()));
    },

    seed(store, started) {
      const now = deps.clock.now();
      try {
        for (const s of store.tokenSpend?.(now - WINDOW_MS) ?? []) budgets.get(s.target)?.charge(costOf(s.tokens), s.at);
        for (const t of store.latestPerTarget?.() ?? []) {
          for (const s of t.scenarios) {
            budgets.get(t.target)?.noteCost(s.scenario, costOf(s.tokens));
            const at = Date.parse(s.at);
            if (Number.isFinite(at)) started(t.target, s.scenario, at, s);
          }
        }
      } catch (err) {
        deps.logger.error({ err }, 'could not read past token spend from the store; budgets start empty');
      }
    },
  };
}

/**
 * Once per target and size: the budget follows the endpoint's advertised sizes (derived) or is checked against
 * them (configured: a warning when it cannot fit one cycle or the busiest hour), and the target's expected
 * daily cost is logged.
 */
export function sizeBudget(loop: { target: TargetConfig; budgetWarned?: string }, run: ProbeRun, budgets: TargetBudgets, logger: Logger): void {
  const sizes = run.capacity;
  if (sizes.contextTokens === undefined && sizes.poolTokens === undefined) return;
  const t = loop.target;
  const key = `${sizes.contextTokens}/${sizes.poolTokens}/${sizes.reservationPoolTokens}/${t.budget.derived === true ? 'auto' : t.budget.tokensPerHour}`;
  if (loop.budgetWarned === key) return;
  loop.budgetWarned = key;
  budgets.sized(t, sizes);
  const limit = budgets.of(t).tokensPerHour;
  const cost = scheduledCost(t, sizes);
  const fields = { target: t.name, contextTokens: sizes.contextTokens, poolTokens: sizes.poolTokens, tokensPerHour: limit, derived: t.budget.derived === true, perDay: cost.perDay, busiestHour: cost.busiestHour };
  logger.info(fields, `${t.name}: expected cost at the endpoint's advertised size ${describeDailyCost(cost)}; budget ${limit} tokens/hour${t.budget.derived === true ? ' (auto: from the tiers and these sizes)' : ''}`);
  const warning = budgetWarning({ ...t, budget: { tokensPerHour: limit } }, sizes, 'at the endpoint\'s advertised size');
  if (warning !== undefined) logger.warn({ target: t.name, tokensPerHour: limit }, warning);
}
