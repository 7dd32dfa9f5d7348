/**
 * JSON for documents people read (`run --json`, `report --json`, the status server's /api): JSON.stringify
 * leaves C1 controls (U+0080-U+009F), DEL, the line/paragraph separators and bidi overrides (U+202A-U+202E,
 * U+2066-U+2069) raw, and a target can put them into a model id, a note or an excerpt. A terminal that
 * `cat`s the document, or a viewer that shows it, then acts on them (U+202E reverses what follows). They
 * are written as \u escapes instead: the same JSON value, nothing for a reader to act on.
 */
// eslint-disable-next-line no-control-regex
const RAW_UNSAFE = /[\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

export function jsonText(value: unknown, indent?: number): string {
  // Outside strings JSON text is ASCII, so every match is inside a string, where an escape means the same.
  return JSON.stringify(value, null, indent).replace(RAW_UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
