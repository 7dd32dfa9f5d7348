/**
 * One set of bounds for every flag and config value, taken from what the code downstream accepts. The CLI
 * and the config validator check against these, so a value that validates is a value that runs.
 */

/** The target client refuses a per-request deadline above this (createTargetClient: options.timeoutMs). */
export const MAX_REQUEST_TIMEOUT_MS = 24 * 3_600_000;
/** A schedule interval or retention may be longer, but a timer cannot wait more than 2^31-1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** `run --deadline` default: the whole run ends (inconclusive with what it had) after this. */
export const DEFAULT_RUN_DEADLINE_MS = 15 * 60_000;
/** `run --deadline` and a target's `deadline:` cannot exceed what a timer can wait. */
export const MAX_RUN_DEADLINE_MS = 24 * 3_600_000;
/** `serve`: how long SIGTERM waits for in-flight probes before aborting them. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 10_000;
export const MAX_SHUTDOWN_GRACE_MS = 10 * 60_000;
/** A config file larger than this is refused before it is parsed. */
export const MAX_CONFIG_BYTES = 1024 * 1024;
/** A config naming more targets than this is refused. */
export const MAX_TARGETS = 1000;
/** `report --since`: at most this far back (older is "everything"; larger numbers overflow a Date). */
export const MAX_SINCE_MS = 100 * 365 * 86_400_000;
/** TCP ports. */
export const MAX_PORT = 65_535;
/** Consecutive transport failures (refused, reset, timeout) after which a run treats the endpoint as dead. */
export const DEAD_AFTER_FAILURES = 3;
/**
 * A probe's response (a completion of at most a few hundred tokens, /v1/models, an error) past this many bytes
 * is cut and recorded `too-large`: never held whole. Introspection's /metrics and /tokenize set their own.
 */
export const MAX_PROBE_RESPONSE_BYTES = 512 * 1024;
