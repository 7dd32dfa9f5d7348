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
}

export function createTargetBudgets(deps: { metrics: Metrics; clock: Clock; logger: Logger; configured: (name: string) => boolean }): TargetBudgets {
  const budgets = new Map<string, TokenBudget>();
  return {
    of(t) {
      let b = budgets.get(t.name);
      if (b === undefined) { b = new TokenBudget(t.budget.tokensPerHour); budgets.set(t.name, b); }
      b.setLimit(t.budget.tokensPerHour);
      return b;
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

/** Once per target and size: the hourly budget cannot fit one cycle at the endpoint's advertised size. */
export function warnBudget(loop: { target: TargetConfig; budgetWarned?: string }, run: ProbeRun, logger: Logger): void {
  const key = `${run.capacity.contextTokens}/${run.capacity.poolTokens}/${loop.target.budget.tokensPerHour}`;
  if (loop.budgetWarned === key) return;
  loop.budgetWarned = key;
  const warning = budgetWarning(loop.target, run.capacity, 'at the endpoint\'s advertised size');
  if (warning !== undefined) logger.warn({ target: loop.target.name, tokensPerHour: loop.target.budget.tokensPerHour }, warning);
}
