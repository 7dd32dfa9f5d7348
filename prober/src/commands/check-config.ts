/** `kvcanary check-config FILE`: validate a serve config without running anything. Exit 0 valid, 64 not. */
import { EXIT } from '../exit-codes.js';
import { ConfigError, formatDuration, loadConfig } from '../service/config.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';
import { budgetWarning } from '../service/cycle-cost.js';

const USAGE = 'usage: kvcanary check-config FILE';

export async function checkConfigMain(args: string[]): Promise<number> {
  if (args.length === 1 && (args[0] === '--help' || args[0] === '-h')) {
    process.stderr.write(USAGE + '\n');
    return EXIT.pass;
  }
  if (args.length !== 1 || args[0]!.startsWith('-')) {
    process.stderr.write(`kvcanary check-config: expected exactly one config file, got ${args.length === 0 ? 'none' : `'${args.join(' ')}'`}\n${USAGE}\n`);
    return EXIT.usage;
  }
  try {
    const config = await loadConfig(args[0]!, { knownScenarios: SCENARIO_NAMES });
    const lines = config.targets.map(
      (t) => `  ${t.name}: ${t.baseUrl} every ${formatDuration(t.schedule.intervalMs)} (timeout ${formatDuration(t.schedule.timeoutMs)}), scenarios ${t.scenarios.join(', ')}`,
    );
    process.stdout.write(`${args[0]}: valid, ${config.targets.length} target(s)\n${lines.join('\n')}\n`);
    // From the config alone: sizes it states (probe tuning); the endpoint's advertised sizes are checked by serve.
    for (const t of config.targets) {
      const warning = budgetWarning(t, {}, 'from the configured probe sizes');
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
