/**
 * What a race scenario's pass states it was worth (its `power`).
 *
 * abort-race's statement is measured, not derived: `npm run bench:race-calibration`
 * (bench/race-calibration.json) gives the bundled engine's race faults (`late-write`,
 * `offload-release-race`) a rate — the fraction of their eligible events they fire on — and counts, per
 * configuration and rate, how many first-contact runs of the full abort-race workload (ABORT_RACE_WINDOWS
 * counted windows) caught the fault. At every measured rate >= ABORT_RACE_DETECTABLE_RATE, on FIFO and LIFO
 * free lists and on a configuration the workload was never tuned on, the Wilson 95% lower bound of that
 * per-run recall is >= ABORT_RACE_CONFIDENCE (test/prober/race-calibration.test.ts holds these constants to
 * the JSON). The measurement takes the windows' correlations as they are (re-sends of one prompt back to
 * back, readers sharing their first half, ballast held across windows), so the statement does not rest on
 * windows being independent.
 *
 * concurrent-interleave's statement is measured the same way, against the race fault it targets
 * (`npm run bench:race-calibration -- --scenario concurrent-interleave`, bench/race-calibration-interleave.json;
 * the CONCURRENT_INTERLEAVE_* constants below). Neither rests on windows being independent: no statement here
 * is 1 - (1 - r)^N.
 */
import type { Power } from '../result.js';

/** Counted windows of abort-race's calibrated workload: a pass needs them. */
export const ABORT_RACE_WINDOWS = 29;
/** The lowest fault rate (fraction of eligible events) at which the calibration holds. */
export const ABORT_RACE_DETECTABLE_RATE = 0.5;
/** The per-run recall the calibration shows at rates >= ABORT_RACE_DETECTABLE_RATE (Wilson 95% lower bound). */
export const ABORT_RACE_CONFIDENCE = 0.74;
/** The engine faults the statement was measured on (finished rows at rates >= the stated rate, FIFO and LIFO). */
export const ABORT_RACE_MEASURED_FAULTS: readonly string[] = ['late-write', 'offload-release-race'];

/**
 * concurrent-interleave's measured statement (`npm run bench:race-calibration -- --scenario
 * concurrent-interleave`, bench/race-calibration-interleave.json): the bundled engine's
 * `prompt-cache-restore-race` (llama.cpp #27148: a prefix-cache entry restored into pages another request
 * owns) firing on a fraction of its eligible events, first-contact runs of the full workload
 * (CONCURRENT_INTERLEAVE_WINDOWS windows). At every measured rate >= CONCURRENT_INTERLEAVE_DETECTABLE_RATE, on
 * FIFO and LIFO free lists and on a configuration the workload was never tuned on, the Wilson 95% lower bound of
 * per-run recall is >= CONCURRENT_INTERLEAVE_CONFIDENCE (test/prober/race-calibration.test.ts).
 *
 * The workload holds ballast over the exposed pool (interleave-sizing.ts), as abort-race does, so that freed
 * pages are reused whatever the free list's order. Its rows of 2026-12-04/05 (docs/measured.md, "Race power of
 * concurrent-interleave"): at rate 0.5, 30/30 caught on FIFO and LIFO at 1/64, FIFO 1/32 and FIFO 1/16, 29/30
 * on LIFO 1/32, hence c = 0.83 (the Wilson lower bound of 29/30). Below 0.5 a LIFO list falls to 7-22 of 30,
 * so no lower rate is stated. Without ballast (no pool exposed) a pass states
 * CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE.
 */
/** Windows of concurrent-interleave's measured workload: a pass needs them. */
export const CONCURRENT_INTERLEAVE_WINDOWS = 29;
/** The lowest fault rate at which the measurement holds. */
export const CONCURRENT_INTERLEAVE_DETECTABLE_RATE = 0.5;
/** The per-run recall measured at rates >= CONCURRENT_INTERLEAVE_DETECTABLE_RATE (Wilson 95% lower bound). */
export const CONCURRENT_INTERLEAVE_CONFIDENCE = 0.83;
/** The engine faults concurrent-interleave's statement was measured on. */
export const CONCURRENT_INTERLEAVE_MEASURED_FAULTS: readonly string[] = ['prompt-cache-restore-race'];

/**
 * concurrent-interleave without ballast (the endpoint exposes no pool, or `interleave_ballast: false`): the
 * workload as it was before ballast, measured at 0 (bench/race-calibration-interleave-unheld.json, 2026-12-04
 * 20:24-21:02 UTC, docs/measured.md: FIFO free list at scale 1/32, 0/30 runs caught at rates 0.1, 0.2 and
 * 0.5). Such a pass states no race power. Not a calibration of the current workload: the bench's
 * `--restate` leaves it alone.
 */
export const CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE = 0;

/**
 * concurrent-interleave's power after `windows` windows. The full workload states the measured confidence; a
 * run cut short of it (never a pass) states it scaled down by the share run, 1 - (1 - c)^(windows /
 * CONCURRENT_INTERLEAVE_WINDOWS) (`basis: 'scaled'`: no run of that length was measured). Without ballast
 * held (`held` false) the measured confidence is CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE.
 */
export function concurrentInterleavePower(windows: number, held = true): Power {
  const c = held ? CONCURRENT_INTERLEAVE_CONFIDENCE : CONCURRENT_INTERLEAVE_UNHELD_CONFIDENCE;
  if (windows >= CONCURRENT_INTERLEAVE_WINDOWS) return { trials: windows, detectableRate: CONCURRENT_INTERLEAVE_DETECTABLE_RATE, confidence: c, basis: 'measured' };
  const confidence = windows <= 0 ? 0 : 1 - Math.pow(1 - c, windows / CONCURRENT_INTERLEAVE_WINDOWS);
  return { trials: windows, detectableRate: CONCURRENT_INTERLEAVE_DETECTABLE_RATE, confidence: Math.floor(confidence * 10_000) / 10_000, basis: 'scaled' };
}

/** abort-race's counted windows by what they can show. */
export interface AbortWindows {
  /** A fresh planter aborted before its first character (mid-prefill or mid-transfer). */
  midTransfer: number;
  /** A planter aborted after its first characters: its KV complete (written back by a host tier). */
  midStream: number;
  /** Re-sends of a mid-stream planter's prompt, aborted early (its load or the rest of its prefill in flight). */
  resends: number;
  /** Groups those re-sends came in (one prompt, re-sent back to back). */
  resendGroups: number;
}

/**
 * Windows that can show each kind of race, correlated ones counted once: a transfer late write shows in a
 * mid-transfer window or a re-send group (not mid-stream: its transfer had landed); a host-copy race in a
 * mid-stream window (its write-back) or a re-send group (its load). The smaller of the two.
 */
export function independentWindows(w: AbortWindows): { transfer: number; copy: number; both: number } {
  const transfer = w.midTransfer + w.resendGroups;
  const copy = w.midStream + w.resendGroups;
  return { transfer, copy, both: Math.min(transfer, copy) };
}

/**
 * abort-race's power after `counted` windows. The full workload states the calibrated confidence; a run cut
 * short of it (never a pass) states that confidence scaled down by the share of the workload it ran,
 * 1 - (1 - c)^(counted / ABORT_RACE_WINDOWS) (`basis: 'scaled'`: no run of that length was measured).
 */
export function abortRacePower(counted: number, w: AbortWindows): Power {
  const trials = independentWindows(w).both;
  if (counted >= ABORT_RACE_WINDOWS) return { trials, detectableRate: ABORT_RACE_DETECTABLE_RATE, confidence: ABORT_RACE_CONFIDENCE, basis: 'measured' };
  const confidence = counted <= 0 ? 0 : 1 - Math.pow(1 - ABORT_RACE_CONFIDENCE, counted / ABORT_RACE_WINDOWS);
  return { trials, detectableRate: ABORT_RACE_DETECTABLE_RATE, confidence: Math.floor(confidence * 10_000) / 10_000, basis: 'scaled' };
}
