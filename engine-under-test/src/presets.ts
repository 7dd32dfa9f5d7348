/**
 * Named engine configurations, as data. Capacities are the full-scale ones; `--scale N` divides them.
 *
 * The disaggregated presets follow the incident (see docs/incident.md): a context limit of
 * 1,048,576 tokens served by a prefill pool of 681,280 tokens, and a decode pool large enough for any
 * reservation the context limit allows (context + 16,384 tokens of headroom, as in `single`).
 */
import type { DefenseName } from './defenses.js';
import { DEFENSES } from './defenses.js';
import type { FaultName } from './faults.js';

export type EngineMode = 'single' | 'disaggregated';

export interface Preset {
  name: string;
  description: string;
  mode: EngineMode;
  /** The advertised context limit (max_model_len / context_length). */
  contextTokens: number;
  /** The KV pool that bounds admission (max_total_num_tokens): the only pool in single mode, prefill's otherwise. */
  poolTokens: number;
  /** Disaggregated mode: decode's KV pool, where reservations (prompt + max_tokens) live. */
  decodePoolTokens?: number;
  faults: readonly FaultName[];
  defenses: readonly DefenseName[];
}

const MIB_TOKENS = 1_048_576;
const HEADROOM = 16_384;
const INCIDENT_PREFILL_POOL = 681_280;
/** "approximately 2.04 million tokens" after the fix. */
const REMEDIATED_PREFILL_POOL = 2_040_000;

export const PRESETS: Readonly<Record<string, Preset>> = {
  single: {
    name: 'single',
    description: 'single node, correct admission; pool = context + 16,384 tokens of headroom',
    mode: 'single',
    contextTokens: MIB_TOKENS,
    poolTokens: MIB_TOKENS + HEADROOM,
    faults: [],
    defenses: [],
  },
  incident: {
    name: 'incident',
    description: 'disaggregated; context 1,048,576, prefill pool 681,280; fault admission-checks-finished; no defenses',
    mode: 'disaggregated',
    contextTokens: MIB_TOKENS,
    poolTokens: INCIDENT_PREFILL_POOL,
    decodePoolTokens: MIB_TOKENS + HEADROOM,
    faults: ['admission-checks-finished'],
    defenses: [],
  },
  remediated: {
    name: 'remediated',
    description: 'the deployed fix: prefill pool ~2.04M tokens and the rejection returned before bootstrap',
    mode: 'disaggregated',
    contextTokens: MIB_TOKENS,
    poolTokens: REMEDIATED_PREFILL_POOL,
    decodePoolTokens: MIB_TOKENS + HEADROOM,
    faults: [],
    defenses: ['reject-before-bootstrap', 'salted-prefix-cache'],
  },
  hardened: {
    name: 'hardened',
    description: "the incident's capacities, every defense on, no fault",
    mode: 'disaggregated',
    contextTokens: MIB_TOKENS,
    poolTokens: INCIDENT_PREFILL_POOL,
    decodePoolTokens: MIB_TOKENS + HEADROOM,
    faults: [],
    defenses: [...DEFENSES],
  },
  disaggregated: {
    name: 'disaggregated',
    description:
      "the incident's capacities without its fault and without defenses: prefill's admission finds the " +
      'over-pool prompt after bootstrap and rejects it (400); the base for adding one fault or defense at a time',
    mode: 'disaggregated',
    contextTokens: MIB_TOKENS,
    poolTokens: INCIDENT_PREFILL_POOL,
    decodePoolTokens: MIB_TOKENS + HEADROOM,
    faults: [],
    defenses: [],
  },
};

export const DEFAULT_PRESET = 'single';
