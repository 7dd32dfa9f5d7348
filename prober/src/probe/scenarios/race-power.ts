/**
 * The power a race scenario's pass must state: N independent race windows exercised, so a fault that shows
 * in at least a fraction RACE_DETECTABLE_RATE of windows is caught with probability 1 - (1 - r)^N. A pass
 * needs RACE_CONFIDENCE at that rate: 29 windows.
 */
export const RACE_DETECTABLE_RATE = 0.1;
export const RACE_CONFIDENCE = 0.95;
/** The confidence abort-race states when it passes, as measured by bench/race-calibration.json. */
export const RACE_CALIBRATED_CONFIDENCE = 0.95;
