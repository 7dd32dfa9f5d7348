/**
 * Errors the target client throws. It throws only for the caller's mistakes (bad options, a prompt source
 * that changes between passes, use after close); every fault of the target is returned as data
 * (`CompletionResult.transport`). Messages name the field and what was wrong, never a secret's value.
 */

export type TargetErrorCode =
  /** An option or request field is missing, of the wrong type, out of range or unknown. */
  | 'KVC_TARGET_INVALID_ARG'
  /** The client was closed; create a new one. */
  | 'KVC_TARGET_CLOSED'
  /** A PromptSource yielded different text on two passes (the body length is computed on the first). */
  | 'KVC_PROMPT_SOURCE_UNSTABLE'
  /** A PromptSource's chunks() threw or yielded a non-string. */
  | 'KVC_PROMPT_SOURCE_FAILED';

export class TargetError extends Error {
  readonly code: TargetErrorCode;

  constructor(code: TargetErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TargetError';
    this.code = code;
  }
}

export class InvalidTargetArgError extends TargetError {
  /** Dotted path of the offending field, e.g. `req.abortAfter.chars`. */
  readonly field: string;

  constructor(field: string, expected: string, got: unknown) {
    super('KVC_TARGET_INVALID_ARG', `Expected \`${field}\` to be ${expected}, got ${describe(got)}`);
    this.name = 'InvalidTargetArgError';
    this.field = field;
  }
}

export class PromptSourceError extends TargetError {
  constructor(code: 'KVC_PROMPT_SOURCE_UNSTABLE' | 'KVC_PROMPT_SOURCE_FAILED', message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.name = 'PromptSourceError';
  }
}

/**
 * A short description of a bad value for an error message. Strings are described by length only: a value
 * in the wrong field may be a secret (an API key pasted into `headers`), and messages end up in logs.
 */
export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  switch (typeof value) {
    case 'string':
      return `a string of length ${value.length}`;
    case 'number':
      return Number.isFinite(value) ? `\`${value}\` (number)` : `\`${String(value)}\``;
    case 'object':
      return 'an object';
    case 'undefined':
      return 'undefined';
    default:
      return `a ${typeof value}`;
  }
}
