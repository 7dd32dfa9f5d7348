/**
 * `kvcanary <command>`: dispatches to the command modules. Data goes to stdout, progress and logs to
 * stderr. Exit codes (exit-codes.ts) are stable and documented in README.md.
 */
import { EXIT } from './exit-codes.js';

const USAGE = `usage: kvcanary <command> [options]

commands:
  run            probe one endpoint now and print the verdict
  serve          run the scheduled prober (metrics, status page, evidence store)
  check-config   validate a serve config file
  report         list stored run outcomes, findings and silences
  ack            acknowledge a known finding until a date, with a reason
  init           write a commented example serve config
  engine         start the bundled reference engine (engine-under-test)

kvcanary <command> --help for a command's options.`;

type CommandMain = (args: string[]) => Promise<number>;

const COMMANDS: Record<string, () => Promise<CommandMain>> = {
  run: async () => (await import('./commands/run.js')).runMain,
  serve: async () => (await import('./commands/serve.js')).serveMain,
  'check-config': async () => (await import('./commands/check-config.js')).checkConfigMain,
  report: async () => (await import('./commands/report.js')).reportMain,
  ack: async () => (await import('./commands/ack.js')).ackMain,
  init: async () => (await import('./commands/init.js')).initMain,
  engine: async () => (await import('../../engine-under-test/src/cli.js')).engineMain,
};

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stderr.write(USAGE + '\n');
    return command === undefined ? EXIT.usage : EXIT.pass;
  }
  const load = COMMANDS[command];
  if (load === undefined) {
    process.stderr.write(`kvcanary: unknown command '${command}'\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  const commandMain = await load();
  return commandMain(rest);
}
