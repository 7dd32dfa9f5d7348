/**
 * The race scenarios' power statements follow their measurement: bench/race-calibration.json (`npm run
 * bench:race-calibration`, abort-race) and bench/race-calibration-interleave.json (`-- --scenario
 * concurrent-interleave`) hold per-run recall of the engine's race faults at each fault rate, and what
 * race-power.ts states must be what those runs showed — every finished row at a rate >= the stated detectable
 * rate has a Wilson 95% lower bound >= the stated confidence, the faults the statement names are exactly those
 * with such rows on both free lists, and a configuration the workload was never tuned on is among them.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { proportion } from '../../bench/proportion.js';
import { calibration, supportedClaims } from '../../bench/race-calibration.js';

interface Row {
  id: string;
  fault: string;
  freeList: string;
  rate: number;
  tuned: boolean;
  runs: number;
  caught: number;
  complete: boolean;
  statedConfidence: number;
  detectableRate: number;
  records: { caught: boolean }[];
}

describe.each(['abort-race', 'concurrent-interleave'])('%s: its calibration JSON and the statement it makes', (scenario) => {
  const cal = calibration(scenario);
  const doc = JSON.parse(readFileSync(new URL(`../../${cal.out}`, import.meta.url), 'utf8')) as { scenario: string; measuredFaults: string[]; rows: Row[] };

  it('every row states what race-power.ts states, and counts what its runs recorded', () => {
    expect(doc.scenario).toBe(scenario);
    expect(doc.measuredFaults).toEqual([...cal.measuredFaults]);
    expect(doc.rows.length).toBeGreaterThan(0);
    for (const row of doc.rows) {
      expect(row.statedConfidence, row.id).toBe(cal.confidence);
      expect(row.detectableRate, row.id).toBe(cal.detectableRate);
      expect(row.records.length, row.id).toBe(row.runs);
      expect(row.records.filter((r) => r.caught).length, row.id).toBe(row.caught);
      if (row.complete) expect(row.runs, row.id).toBeGreaterThanOrEqual(30);
    }
  });

  it('every finished row at a rate >= the stated rate reaches the stated confidence (Wilson 95% lower bound)', () => {
    const at = doc.rows.filter((r) => r.complete && r.rate >= cal.detectableRate);
    for (const row of at) expect(proportion(row.caught, row.runs).low!, `${row.id}: ${row.caught}/${row.runs}`).toBeGreaterThanOrEqual(cal.confidence);
    // The statement names the faults it was measured on: exactly those with finished rows at such rates on both free lists.
    const covered = cal.faults.filter((f) => ['fifo', 'lifo'].every((l) => at.some((r) => r.fault === f && r.freeList === l)));
    expect(covered.length).toBeGreaterThan(0);
    expect([...cal.measuredFaults]).toEqual(covered);
    // ... and on a configuration the workload was never tuned on.
    expect(at.some((r) => !r.tuned)).toBe(true);
    const claims = supportedClaims(doc.rows, cal.measuredFaults);
    expect(claims.some((c) => c.rate <= cal.detectableRate && c.confidence >= cal.confidence)).toBe(true);
  });
});
