/**
 * The service's logger: pino, JSON lines by default, pino-pretty when the destination is a terminal.
 *
 * Two layers keep secrets and leaked text out of logs. By field: authorization headers, API-key fields and
 * evidence excerpts (a leak's excerpt may be someone else's data) are censored wherever they appear in the
 * usual shapes. By value: every configured credential, and bearer/basic credentials, are scrubbed from each
 * serialized line just before it is written, whatever field or message carries them.
 */
import { createRequire } from 'node:module';
import pino, { type DestinationStream, type Logger } from 'pino';
import type PinoPretty from 'pino-pretty';
import type { LogLevel } from './config.js';
import { REDACTED, scrubSecrets } from '../probe/redact.js';

export type { Logger } from 'pino';

export interface LoggerOptions {
  /** @default 'info' */
  level?: LogLevel;
  /** Where lines go. @default stderr (stdout is for data) */
  destination?: DestinationStream | NodeJS.WritableStream;
  /** Human-readable output. @default true when the destination is a TTY */
  pretty?: boolean;
  /** Credential values to scrub from every line (a function so a config reload can change them). */
  secrets?: readonly string[] | (() => readonly string[]);
}

const SENSITIVE_FIELDS = ['authorization', 'Authorization', 'apiKey', 'api_key', 'apikey', 'x-api-key', 'proxy-authorization', 'cookie', 'password', 'excerpt'];

export const REDACT_PATHS: readonly string[] = [
  ...SENSITIVE_FIELDS.flatMap((f) => {
    const p = /^[A-Za-z_$][\w$]*$/.test(f) ? f : `["${f}"]`;
    const child = p.startsWith('[') ? p : `.${p}`;
    return [p, `*${child}`, `headers${child}`, `*.headers${child}`, `req.headers${child}`];
  }),
  'evidence.excerpt', '*.evidence.excerpt', 'findings[*].evidence.excerpt', '*.findings[*].evidence.excerpt',
];

/**
 * pino-pretty, loaded only when a logger prints for a terminal: a service logging JSON lines never needs
 * it (about 3 MiB of RSS it would otherwise hold; bench/SCALE.md).
 */
function loadPretty(): typeof PinoPretty {
  return createRequire(import.meta.url)('pino-pretty') as typeof PinoPretty;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const secretsOf = typeof opts.secrets === 'function' ? opts.secrets : (() => (opts.secrets as readonly string[] | undefined) ?? []);
  const destination = opts.destination ?? pino.destination({ dest: 2, sync: true });
  const isTTY = opts.destination === undefined ? process.stderr.isTTY === true : (destination as { isTTY?: boolean }).isTTY === true;
  const stream: DestinationStream | NodeJS.WritableStream = (opts.pretty ?? isTTY)
    ? loadPretty()({ destination: destination as NodeJS.WritableStream, colorize: isTTY, translateTime: 'SYS:standard', ignore: 'pid,hostname' })
    : destination;
  return pino({
    level: opts.level ?? 'info',
    base: { pid: process.pid },
    redact: { paths: [...REDACT_PATHS], censor: REDACTED },
    hooks: { streamWrite: (line) => scrubSecrets(line, secretsOf()) },
  }, stream as DestinationStream);
}

/** The log level a finding of this severity is logged at: critical and high → error, warning → warn, info → info. */
export function levelForSeverity(severity: string): 'error' | 'warn' | 'info' {
  if (severity === 'critical' || severity === 'high') return 'error';
  return severity === 'info' ? 'info' : 'warn';
}
