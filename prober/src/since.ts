/**
 * `--since` (report) and `?since=` (/api): a duration back from now (30m, 7d) or a date/time (2026-12-01,
 * 2026-12-01T09:30, 2026-12-01T09:30:00Z). Bounded: at most MAX_SINCE_MS back, never in the future by more
 * than a day, so no value overflows a Date or reaches SQLite as "Invalid Date".
 */
import { MAX_SINCE_MS } from './bounds.js';
import { formatDuration, parseDuration } from './service/config.js';
import { shownString } from './shown-value.js';

export class SinceError extends Error {
  override readonly name = 'SinceError';
}

const DATE_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,3})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/;

/** Milliseconds since the epoch the window starts at. Throws SinceError naming what was wrong. */
export function parseSince(text: string, now: number): number {
  const ago = parseDuration(text);
  if (ago !== undefined) {
    if (ago > MAX_SINCE_MS) throw new SinceError(`expected a duration of at most ${formatDuration(MAX_SINCE_MS)}, got ${shownString(text)}`);
    return now - ago;
  }
  const s = text.trim();
  if (DATE_TIME.test(s)) {
    const t = Date.parse(s.replace(' ', 'T'));
    if (Number.isFinite(t) && t >= now - MAX_SINCE_MS && t <= now + 86_400_000) return t;
    if (Number.isFinite(t)) throw new SinceError(`expected a time within the last ${formatDuration(MAX_SINCE_MS)}, got ${shownString(text)}`);
  }
  throw new SinceError(`expected a duration like 30m or 7d, or a date/time like 2026-12-01 or 2026-12-01T09:30Z, got ${shownString(text)}`);
}
