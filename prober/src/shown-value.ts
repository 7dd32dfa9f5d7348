/**
 * What a usage or config error may show of the value it rejects. A value that could be a key (a long run of
 * key-ish characters, a known key prefix, a URL with credentials) is described, never echoed: operators paste
 * keys into the wrong flag, and error lines end up in CI logs.
 */
import { oneLine } from './terminal-text.js';

const KEY_PREFIX = /^(?:sk|pk|rk|hf|ghp|gho|ghs|xox[abp]|AKIA|AIza|eyJ)[-_A-Za-z0-9]/;

/** True for anything that might be a credential. */
export function couldBeKey(s: string): boolean {
  if (KEY_PREFIX.test(s)) return true;
  if (/:\/\/[^/\s]*@/.test(s)) return true;  // user:password@host
  if (/\b(?:Bearer|Basic)\s/i.test(s)) return true;
  // A long unbroken run of token characters holding digits (words and paths rarely do).
  if (/[A-Za-z0-9_+/=.~-]{20,}/.test(s) && /\d/.test(s) && /[A-Za-z]/.test(s)) return true;
  // A long run of mixed-case token characters (a key without digits); lower-case words-with-dashes are not.
  return /[A-Za-z0-9_+=~-]{24,}/.test(s) && /[A-Z]/.test(s) && /[a-z]/.test(s);
}

/** A value for an error message: a short harmless string in quotes; anything else by its shape. */
export function describeValue(value: unknown): string {
  if (value === null || value === undefined) return 'nothing (empty value)';
  if (Array.isArray(value)) return `a list of ${value.length}`;
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return `${shownString(value)} (string)`;
  return `\`${oneLine(String(value)).slice(0, 40)}\` (${typeof value})`;
}

/** A string as an error message may show it: quoted if harmless, else "a value of N characters (not shown…)". */
export function shownString(value: string): string {
  if (value.length > 60 || couldBeKey(value)) return `a value of ${value.length} characters (not shown: it may be a key)`;
  return JSON.stringify(oneLine(value));
}

/**
 * A file path as an error message may show it: quoted, control characters removed, if no part of it could
 * be a key (a key pasted into `api_key_file:` or `--junit` is a "path" too) and it is of a sane length.
 */
export function shownPath(value: string): string {
  const parts = value.split(/[/\\]/);
  if (value.length > 240 || parts.some((p) => couldBeKey(p)) || /[\u0000-\u001f\u007f-\u009f]/.test(value)) {
    return `a path of ${value.length} characters (not shown: it may hold a key or control characters)`;
  }
  return JSON.stringify(oneLine(value));
}

/** A mapping key (header or tenant name, an unknown config key) for a field path: itself if plainly a name. */
export function shownKey(key: string): string {
  if (/^[A-Za-z0-9_.:*/-]{1,64}$/.test(key) && !couldBeKey(key)) return key;
  return `<a key of ${key.length} characters, not shown>`;
}
