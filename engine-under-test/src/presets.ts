/**
 * Named engine configurations, as data. Capacities are the full-scale ones; `--scale N` divides them.
 * The disaggregated presets (incident, remediated, hardened) extend this table with their own mode.
 */

export interface Preset {
  name: string;
  description: string;
  mode: 'single';
  /** The advertised context limit (max_model_len / context_length). */
  contextTokens: number;
  /** KV pool capacity in tokens (max_total_num_tokens). */
  poolTokens: number;
}

const MIB_TOKENS = 1_048_576;

export const PRESETS: Readonly<Record<string, Preset>> = {
  single: {
    name: 'single',
    description: 'single node, correct admission; pool = context + 16,384 tokens of headroom',
    mode: 'single',
    contextTokens: MIB_TOKENS,
    poolTokens: MIB_TOKENS + 16_384,
  },
};

export const DEFAULT_PRESET = 'single';
