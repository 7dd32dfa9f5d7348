/** The shapes of the rows the store's reads select. */
import type { Outcome, RunOutcome } from '../../probe/result.js';

export interface RunRow {
  run_id: string; target: string; base_url: string; model: string; started_at: string; finished_at: string;
  outcome: RunOutcome; up: number; capacity: string; finding_count: number;
}
export interface ScenarioRow {
  run_id: string; scenario: string; outcome: Outcome; duration_ms: number; tokens_sent: number; tokens_billed: number; notes: string;
  power: string | null; reason: string | null;
}
export interface FindingRow {
  id: number; run_id: string; target: string; scenario: string; kind: string; severity: string; evidence: string; chance: number; at: string;
  acknowledged: string | null;
}

