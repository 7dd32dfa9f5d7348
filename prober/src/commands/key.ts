/**
 * `kvcanary key new FILE|-` and `kvcanary key check [FILE]`: the bootstrap of a deployment's marker key
 * (docs/deployment.md, "Marker key"). Every shard of one installation must hold the same key, so a deployment
 * writes one once, keeps it in a Secret mounted into every shard and names it with KVCANARY_MARKER_KEY_FILE;
 * `serve` then only reads it. `check` reads a key as `serve` would and prints its key id (never the key), so
 * the shards can be seen to agree.
 */
import { parseArgs } from 'node:util';
import { EXIT } from '../exit-codes.js';
import { markerKeyPath } from '../installation/home.js';
import { InstallationError } from '../installation/installation-error.js';
import { MARKER_KEY_FILE_ENV, markerKeyId, newMarkerKeyText, readMarkerKey, writeNewMarkerKey } from '../installation/marker-key.js';
import { shownString } from '../shown-value.js';
import { oneLine } from '../terminal-text.js';
import { parseArgsMessage } from './usage.js';

const USAGE = `usage: kvcanary key new FILE|-
       kvcanary key check [FILE]

  new FILE    write a new installation marker key to FILE (mode 0600); an existing FILE or a symlink is
              refused, never overwritten. With -, print it to stdout (to pipe into a secret store, e.g.
              kvcanary key new - | kubectl create secret generic kvcanary-marker-key --from-file=marker.key=/dev/stdin)
  check FILE  read FILE as serve reads a configured key and print its key id (never the key). Without FILE:
              the key serve and run would use: $${MARKER_KEY_FILE_ENV}, else the installation home's (not created)

Every shard of one installation needs the same key: serve with ${MARKER_KEY_FILE_ENV} set reads it and
refuses to start without it (docs/deployment.md, "Marker key").`;

export async function keyMain(args: string[]): Promise<number> {
  let positionals: string[];
  let help: boolean;
  try {
    const parsed = parseArgs({ args, strict: true, allowPositionals: true, options: { help: { type: 'boolean', short: 'h', default: false } } });
    positionals = parsed.positionals;
    help = parsed.values.help;
  } catch (err) {
    process.stderr.write(`kvcanary key: ${parseArgsMessage(err)}\n\n${USAGE}\n`);
    return EXIT.usage;
  }
  if (help) {
    process.stderr.write(USAGE + '\n');
    return EXIT.pass;
  }
  const [action, file, ...extra] = positionals;
  const bad = (message: string): number => {
    process.stderr.write(`kvcanary key: ${message}\n\n${USAGE}\n`);
    return EXIT.usage;
  };
  if (extra.length > 0) return bad('too many arguments');
  try {
    if (action === 'new') {
      if (file === undefined) return bad('new: expected FILE, or - for stdout');
      if (file === '-') {
        if (process.stdout.isTTY === true) return bad('new -: stdout is a terminal; pipe it into your secret store, or give a FILE');
        process.stdout.write(newMarkerKeyText());
        return EXIT.pass;
      }
      writeNewMarkerKey(file);
      process.stderr.write(`kvcanary key: wrote a new marker key to ${shownString(file)} (mode 0600)\n`);
      return EXIT.pass;
    }
    if (action === 'check') {
      const configured = process.env[MARKER_KEY_FILE_ENV];
      const target = file ?? (configured !== undefined && configured !== '' ? configured : markerKeyPath());
      const key = readMarkerKey(target);
      process.stdout.write(`marker key ${oneLine(target)}: id ${markerKeyId(key)}\n`);
      return EXIT.pass;
    }
    return bad(action === undefined ? 'expected new or check' : `unknown action ${shownString(action)}; expected new or check`);
  } catch (err) {
    if (err instanceof InstallationError) {
      process.stderr.write(`kvcanary key: ${oneLine(err.message)}\n`);
      return EXIT.usage;
    }
    throw err;
  }
}
