/** `kvcanary check-config FILE`: validate a serve config without running anything. Exit 0 valid, 64 not. */
import { EXIT } from '../exit-codes.js';
import { ConfigError, formatDuration, loadConfig, type TargetConfig } from '../service/config.js';
import { tiersOf } from '../service/scenario-schedule.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import { describeSource } from '../service/discovery/spec.js';
import { budgetWarning } from '../service/cycle-cost.js';
import { derivedBudget, describeDailyCost, scheduledCost, type EndpointSizes } from '../service/scenario-cost.js';

/**
 * The size check-config prices a schedule at (it contacts no endpoint): a 1,048,576-token context with pools
 * as large. serve logs the same figures at the endpoint's own advertised sizes when it first sees them.
 */
export const REFERENCE_SIZES: Readonly<EndpointSizes> = { contextTokens: 1_048_576, poolTokens: 1_048_576, reservationPoolTokens: 1_048_576, largestPoolTokens: 1_048_576 };

const USAGE = `usage: kvcanary check-config FILE

  Validates a serve config (every problem, each naming its field) without running anything. api_key_env
  variables must be named, not set. Exit 0 valid, 64 not, 70 internal error.`;

export async function checkConfigMain(args: string[]): Promise<number> {
  if (args.length === 1 && (args[0] === '--help' || args[0] === '-h')) {
    process.stderr.write(USAGE + '\n');
    return EXIT.pass;
  }
  if (args.length !== 1 || args[0]!.startsWith('-')) {
    process.stderr.write(`kvcanary check-config: expected exactly one config file, got ${args.length === 0 ? 'none' : `${args.length} argument(s)`}\n${USAGE}\n`);
    return EXIT.usage;
  }
  try {
    // Checks that each api_key_env is named, not that it is set here: serve and run check that.
    const config = await loadConfig(args[0]!, { knownScenarios: SCENARIO_NAMES, requireSecrets: false });
    const lines = config.targets.map(
      (t) => `  ${t.name}: ${t.baseUrl} every ${formatDuration(t.schedule.intervalMs)} (timeout ${formatDuration(t.schedule.timeoutMs)}${t.deadlineMs !== undefined ? `, deadline ${formatDuration(t.deadlineMs)}` : ''}), scenarios ${t.scenarios.join(', ')}${tiers(t)}`,
    );
    for (const d of config.discovery ?? []) {
      const t = d.template;
      lines.push(`  ${t.name}/*: discovered by ${describeSource(d.spec.source)} (refresh ${formatDuration(d.spec.refreshMs)}, ${d.spec.scheme}://HOST:PORT${d.spec.pathPrefix}) every ${formatDuration(t.schedule.intervalMs)} (timeout ${formatDuration(t.schedule.timeoutMs)}), scenarios ${t.scenarios.join(', ')}${tiers(t)}`);
    }
    const discovered = (config.discovery ?? []).length;
    process.stdout.write(`${args[0]}: valid, ${config.targets.length} target(s)${discovered > 0 ? ` and ${discovered} discovery entr${discovered === 1 ? 'y' : 'ies'}` : ''}\n${lines.join('\n')}\n`);
    // The expected cost at a reference size; the endpoint's advertised sizes are priced by serve.
    const all = [...config.targets, ...(config.discovery ?? []).map((d) => d.template)];
    process.stdout.write(`expected cost at a 1,048,576-token context with pools as large (serve logs it at each endpoint's own sizes):\n`);
    for (const t of all) {
      const cost = scheduledCost(t, REFERENCE_SIZES);
      const budget = t.budget.derived === true ? `budget auto: ${derivedBudget(cost) ?? 'unknown'} tokens/hour at this size` : `budget ${t.budget.tokensPerHour} tokens/hour`;
      process.stdout.write(`  ${t.name}: ${describeDailyCost(cost)}; busiest hour ${cost.busiestHour.sent} sent; ${budget}\n`);
    }
    // From the config alone: sizes it states (probe tuning) or the reference size, for a budget set by hand.
    for (const t of all) {
      if (t.budget.derived === true) continue;
      const warning = budgetWarning(t, {}, 'from the configured probe sizes') ?? budgetWarning(t, REFERENCE_SIZES, 'at a 1,048,576-token context');
      if (warning !== undefined) process.stderr.write(`warning: ${warning}\n`);
    }
    return EXIT.pass;
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(err.message + '\n');
      return EXIT.usage;
    }
    throw err;
  }
}

/** The effective cost tiers (defaults merged with the config): what serve will run less often than every cycle. */
function tiers(t: TargetConfig): string {
  const listed = tiersOf(t);
  return listed.length === 0 ? '; every scenario every cycle (no cost tiers)' : `; less often: ${listed.map(([s, ms]) => `${s} every ${formatDuration(ms)}`).join(', ')}`;
}
