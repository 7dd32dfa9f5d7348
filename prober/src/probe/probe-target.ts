/**
 * What the probe needs to know about one target: where it is, how to authenticate, its tenants, its tuning
 * and its time limits. The service's TargetConfig (service/config.ts) extends this with what only the
 * schedule needs (interval, jitter, budget, scenario tiers); `kvcanary run` builds one from its flags. The
 * probe never imports the service: it sees a target only through this shape.
 */
import type { ProbeTuning } from './scenarios/context.js';

/** One identity the tenant-isolation scenarios send as. */
export interface ProbeTenant {
  name: string;
  /** Name of the environment variable that holds this tenant's API key; never the key itself. */
  apiKeyEnv?: string;
  /** Absolute path of a file holding the key (re-read when it changes). */
  apiKeyFile?: string;
  cacheSalt?: string;
}

export interface ProbeTarget {
  /** Low-cardinality label value. */
  name: string;
  /** Server root, with or without /v1. */
  baseUrl: string;
  /** Default: the first model `/v1/models` lists. */
  model?: string;
  /** Name of the environment variable that holds the API key; never the key itself. */
  apiKeyEnv?: string;
  /** Absolute path of a file holding the API key, re-read when it changes (rotation without a restart). */
  apiKeyFile?: string;
  headers: Record<string, string>;
  tenants: ProbeTenant[];
  /** `timeoutMs`: the per-request deadline when the caller gives none (the target's cycle timeout). */
  schedule: { timeoutMs: number };
  /** Probe tuning for this target, over the caller's defaults. */
  tuning?: ProbeTuning;
  /** The whole probe call ends (inconclusive with what it had) after this. */
  deadlineMs?: number;
}
