/**
 * The CLI's exit codes, stable and documented in README.md. Every command returns one of these.
 *   0 pass · 1 at least one finding (at or above --fail-on) · 2 inconclusive (or nothing applicable)
 *   64 bad usage or config · 70 internal error.
 */
export const EXIT = { pass: 0, fail: 1, inconclusive: 2, usage: 64, internal: 70 } as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];
