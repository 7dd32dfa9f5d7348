/**
 * abort-race's power statement follows its measurement: bench/race-calibration.json (`npm run
 * bench:race-calibration`) holds per-run recall of the engine's race faults at each fault rate, and what
 * race-power.ts states must be what those runs showed — every finished row at a rate >= the stated
 * detectable rate has a Wilson 95% lower bound >= the stated confidence, and the faults the statement names
 * are exactly those with such rows on both free lists.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { proportion } from '../../bench/proportion.js';
import { supportedClaims } from '../../bench/race-calibration.js';
import { ABORT_RACE_CONFIDENCE, ABORT_RACE_DETECTABLE_RATE, ABORT_RACE_MEASURED_FAULTS } from '../../prober/src/probe/scenarios/race-power.js';

interface Row {
  id: string;
  fault: string;
  freeList: string;
  rate: number;
  runs: number;
  caught: number;
  complete: boolean;
  statedConfidence: number;
  detectableRate: number;
  records: { caught: boolean }[];
}

const doc = JSON.parse(readFileSync(new URL('../../bench/race-calibration.json', import.meta.url), 'utf8')) as { runsPerRow: number; rows: Row[] };

describe('bench/race-calibration.json and the statement abort-race makes', () => {
  it('every row states what race-power.ts states, and counts what its runs recorded', () => {
    expect(doc.rows.length).toBeGreaterThan(0);
    for (const row of doc.rows) {
      expect(row.statedConfidence, row.id).toBe(ABORT_RACE_CONFIDENCE);
      expect(row.detectableRate, row.id).toBe(ABORT_RACE_DETECTABLE_RATE);
      expect(row.records.length, row.id).toBe(row.runs);
      expect(row.records.filter((r) => r.caught).length, row.id).toBe(row.caught);
      if (row.complete) expect(row.runs, row.id).toBeGreaterThanOrEqual(30);
    }
  });

  it('every finished row at a rate >= the stated rate reaches the stated confidence (Wilson 95% lower bound)', () => {
    const at = doc.rows.filter((r) => r.complete && r.rate >= ABORT_RACE_DETECTABLE_RATE);
    for (const row of at) expect(proportion(row.caught, row.runs).low!, `${row.id}: ${row.caught}/${row.runs}`).toBeGreaterThanOrEqual(ABORT_RACE_CONFIDENCE);
    // The statement names the faults it was measured on: exactly those with finished rows at such rates on both free lists.
    const covered = ['late-write', 'offload-release-race'].filter((f) => ['fifo', 'lifo'].every((l) => at.some((r) => r.fault === f && r.freeList === l)));
    expect(covered.length).toBeGreaterThan(0);
    expect([...ABORT_RACE_MEASURED_FAULTS]).toEqual(covered);
    const claims = supportedClaims(doc.rows, ABORT_RACE_MEASURED_FAULTS);
    expect(claims.some((c) => c.rate <= ABORT_RACE_DETECTABLE_RATE && c.confidence >= ABORT_RACE_CONFIDENCE)).toBe(true);
  });
});
