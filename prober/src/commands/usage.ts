import { formatDuration, parseDuration } from '../service/config.js';
import { couldBeKey, shownString } from '../shown-value.js';

/** Bad command-line usage: reported with the command's help, exit 64. */

export class UsageError extends Error {
  readonly code = 'KVC_USAGE';
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export function positiveIntFlag(flag: string, text: string): number {
  if (!/^\d+$/.test(text) || Number(text) <= 0 || !Number.isSafeInteger(Number(text))) throw new UsageError(`${flag}: expected a positive integer, got ${shownString(text)}`);
  return Number(text);
}

/** A duration flag within [min, max] ms (the bounds are what the code downstream accepts: bounds.ts). */
export function durationFlag(flag: string, text: string, min: number, max: number): number {
  const ms = parseDuration(text);
  if (ms === undefined) throw new UsageError(`${flag}: expected a duration like 30s, 2m or 1h, got ${shownString(text)}`);
  if (ms < min || ms > max) throw new UsageError(`${flag}: expected a duration from ${formatDuration(min)} to ${formatDuration(max)}, got ${formatDuration(ms)}`);
  return ms;
}

/** Headers the client sets itself: a flag may not set them. */
const RESERVED_HEADERS = new Set(['content-length', 'content-type', 'transfer-encoding', 'host', 'connection', 'accept-encoding']);

/**
 * `--header 'Name: value'` flags. Errors name the header, never show its value (it may be a key).
 * Authorization is refused beside an API key (the key sets it).
 */
export function headerFlags(flags: readonly string[], hasApiKey: boolean): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const h of flags) {
    const i = h.indexOf(':');
    const name = i > 0 ? h.slice(0, i).trim() : '';
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/.test(name)) throw new UsageError("--header: expected 'Name: value' with a valid HTTP header name (the value is not shown)");
    const lower = name.toLowerCase();
    if (RESERVED_HEADERS.has(lower)) throw new UsageError(`--header ${name}: set by kvcanary itself; leave it out`);
    if (lower === 'authorization' && hasApiKey) throw new UsageError('--header Authorization: not with --api-key-env/--tenant, which set it from the key');
    const value = h.slice(i + 1).trim();
    if (/[\r\n\0]/.test(value)) throw new UsageError(`--header ${name}: the value must not contain CR, LF or NUL`);
    if (Object.keys(headers).some((k) => k.toLowerCase() === lower)) throw new UsageError(`--header ${name}: given twice`);
    headers[name] = value;
  }
  return headers;
}

/** node:util parseArgs' message, with anything that could be a key (an unexpected positional) not shown. */
export function parseArgsMessage(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/'([^']*)'/g, (whole, inner: string) => (couldBeKey(inner) || inner.length > 60 ? 'a value (not shown: it may be a key)' : whole))
    .split('\n')[0]!;
}
