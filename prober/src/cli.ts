/**
 * `kvcanary <command>`: dispatches to the command modules. Data goes to stdout, progress and logs to
 * stderr. Exit codes (exit-codes.ts) are stable and documented in README.md.
 */
import { debugEnabled, report, withBoundary } from './cli-errors.js';
import { EXIT } from './exit-codes.js';
import { kvcanaryVersion } from './version.js';

const USAGE = `usage: kvcanary <command> [options]

commands:
  run            probe one endpoint now and print the verdict
  serve          run the scheduled prober (metrics, status page, evidence store)
  check-config   validate a serve config file
  report         list stored run outcomes, findings and silences
  ack            acknowledge a known finding until a date, with a reason
  init           write a commented example serve config
  key            write a new installation marker key (a deployment's Secret), or check one
  engine         start the bundled reference engine (engine-under-test)

global options:
  --version      print kvcanary's version
  --debug        on an internal error (exit 70), also print the stack (or set KVCANARY_DEBUG=1)

kvcanary <command> --help for a command's options.
exit codes: 0 pass, 1 finding, 2 inconclusive, 64 bad usage or config, 70 internal error (see README).`;

type CommandMain = (args: string[]) => Promise<number>;

const COMMANDS: Record<string, () => Promise<CommandMain>> = {
  run: async () => (await import('./commands/run.js')).runMain,
  serve: async () => (await import('./commands/serve.js')).serveMain,
  'check-config': async () => (await import('./commands/check-config.js')).checkConfigMain,
  report: async () => (await import('./commands/report.js')).reportMain,
  ack: async () => (await import('./commands/ack.js')).ackMain,
  init: async () => (await import('./commands/init.js')).initMain,
  key: async () => (await import('./commands/key.js')).keyMain,
  engine: async () => (await import('../../engine-under-test/src/cli.js')).engineMain,
};

/**
 * A reader that goes away (`kvcanary run … 2>&1 | head -1`) makes the next write to stdout or stderr fail with
 * EPIPE, emitted as an 'error' event: unhandled, it crashed the process with an exit code that claimed a
 * finding. Output nobody reads is dropped; the exit code stays the verdict.
 */
const TOLERANT = Symbol('kvcanary.tolerateClosedReaders');

function tolerateClosedReaders(): void {
  for (const stream of [process.stdout, process.stderr]) {
    if ((stream as { [TOLERANT]?: boolean })[TOLERANT] === true) continue;
    (stream as { [TOLERANT]?: boolean })[TOLERANT] = true;
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED' || err.code === 'ECONNRESET') return;
      throw err;
    });
  }
}

export async function main(argv: string[]): Promise<number> {
  tolerateClosedReaders();
  const debug = argv.includes('--debug') || debugEnabled();
  const args = argv.filter((a) => a !== '--debug');
  const [command, ...rest] = args;
  if (command === '--version' || command === '-V' || command === 'version') {
    process.stdout.write(`kvcanary ${kvcanaryVersion()}\n`);
    return EXIT.pass;
  }
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stderr.write(USAGE + '\n');
    return command === undefined ? EXIT.usage : EXIT.pass;
  }
  const load = COMMANDS[command];
  if (load === undefined) {
    // Never echo it: an operator may have pasted a key where the command goes.
    process.stderr.write(`kvcanary: unknown command${/^[a-z-]{1,20}$/.test(command) ? ` '${command}'` : ''}\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  const boundary = { command, debug, write: (t: string) => { process.stderr.write(t); } };
  // Errors thrown from timers and event handlers (after a command's promise is pending) end here too.
  const onUncaught = (err: unknown): void => {
    process.exitCode = report(boundary, err);
    process.exit();
  };
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
  try {
    return await withBoundary(boundary, async () => (await load())(rest));
  } finally {
    process.off('uncaughtException', onUncaught);
    process.off('unhandledRejection', onUncaught);
  }
}