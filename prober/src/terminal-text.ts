/**
 * Text from a target (model ids, error bodies, notes, evidence) is untrusted: ESC, BEL, CR and friends would
 * recolour, retitle or overwrite the operator's terminal. Everything printed for a human goes through here.
 */

// C0 controls except tab and newline, DEL, C1 controls, and the Unicode line/paragraph separators and bidi
// overrides (which reorder what the operator reads).
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
// eslint-disable-next-line no-control-regex
const UNSAFE_OR_BREAK = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** Multi-line text with every control character but newline and tab removed. */
export function forTerminal(text: string): string {
  return text.replace(UNSAFE, '');
}

/** One line: control characters removed, line breaks and tabs turned into spaces. */
export function oneLine(text: string): string {
  return text.replace(UNSAFE_OR_BREAK, (c) => (c === '\n' || c === '\r' || c === '\t' ? ' ' : ''));
}
