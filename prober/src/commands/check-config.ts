/** `kvcanary check-config FILE`: validate a serve config without running anything. Exit 0 valid, 64 not. */
import { EXIT } from '../exit-codes.js';
import { ConfigError, formatDuration, loadConfig } from '../service/config.js';
import { SCENARIO_NAMES } from '../probe/scenarios/index.js';

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
      (t) => `  ${t.name}: ${t.baseUrl} every ${formatDuration(t.schedule.intervalMs)} (timeout ${formatDuration(t.schedule.timeoutMs)}${t.deadlineMs !== undefined ? `, deadline ${formatDuration(t.deadlineMs)}` : ''}), scenarios ${t.scenarios.join(', ')}`,
    );
    process.stdout.write(`${args[0]}: valid, ${config.targets.length} target(s)\n${lines.join('\n')}\n`);
    return EXIT.pass;
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(err.message + '\n');
      return EXIT.usage;
    }
    throw err;
  }
}
