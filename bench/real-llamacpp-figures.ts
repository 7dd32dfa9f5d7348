/**
 * docs/measured.md's "Real llama.cpp" table, rendered from bench/real-llamacpp.json (bench/real-llamacpp.ts, `npm run
 * bench:real`) like the other figure blocks (render-figures.ts). Pure: no I/O.
 */
import type { Proportion } from './proportion.js';

export interface RealLlamaRow {
  config: string;
  flags: string;
  runs: number;
  exits: Record<string, number>;
  selfEchoRuns: number;
  medianRunS: number;
  maxRunS: number;
  /** Firings the fault logged over the configuration's runs (0 on the pristine build). */
  faultFirings: number;
  /** Fault rows: runs that exited 1 with cross-request-leak, and those where a leak was a whole marker body. */
  fault?: string;
  caught?: number;
  recall?: Proportion;
  wholeMarkerRuns?: number;
  /** Pristine rows: runs with a finding above info or an exit other than 0. */
  falsePositives?: number;
  falsePositiveBound?: number | null;
  /** Every run of the row: what the figures above are computed from. */
  records?: {
    exit: number | null;
    ms: number;
    kinds: string[];
    aboveInfo: number;
    /** Longest leaked marker text matched, and whether some leak was a whole marker body. */
    longestLeak: number;
    wholeMarker: boolean;
    selfEcho: boolean;
  }[];
}

export interface RealLlamaFigures {
  command: string;
  measuredAt: string;
  loadAverage: { start: number; end: number };
  threads: number;
  prefill: { tokens: number; ms: number; tokensPerSecond: number; threads: number };
  /** The bundled engine's default copy-fidelity row (bench/report.json), for comparison. */
  bundled?: { source: string; copier: string; cycles: number; markerCycles: number; wholeMarkerCycles: number };
  rows: RealLlamaRow[];
}

const two = (x: number | null): string => (x === null ? '–' : x.toFixed(2));

export function realLlamaTable(f: RealLlamaFigures): string {
  const rows = f.rows.map((r) => {
    if (r.fault !== undefined) {
      const rec = r.recall!;
      return `| \`${r.fault}\` (fault build) | \`${r.flags}\` | ${r.runs} | ${r.caught}/${r.runs} = ${two(rec.p)} [${two(rec.low)}, ${two(rec.high)}] | ${r.wholeMarkerRuns}/${r.runs} | ${r.faultFirings} | ${r.medianRunS} s |`;
    }
    return `| pristine | \`${r.flags}\` | ${r.runs} | ${r.falsePositives} false positives (95% bound ${two(r.falsePositiveBound ?? null)}); self-echo in ${r.selfEchoRuns} | – | – | ${r.medianRunS} s |`;
  });
  const bundled = f.bundled === undefined
    ? ''
    : ` For comparison, the bundled engine's ${f.bundled.copier} (${f.bundled.source}) was caught by markers in ${f.bundled.markerCycles}/${f.bundled.cycles} incident cycles, ${f.bundled.wholeMarkerCycles} with a whole marker body.`;
  return (
    `\`${f.command}\`, measured ${f.measuredAt.slice(0, 10)}, load average ${f.loadAverage.start.toFixed(1)} at the start and ${f.loadAverage.end.toFixed(1)} at the end ` +
    `([bench/real-llamacpp.json](bench/real-llamacpp.json)). Each row: one llama-server with the copying model at \`-t ${f.threads}\`, ` +
    `then default \`kvcanary run\`s one after another. The copier prefills ${f.prefill.tokens.toLocaleString('en-US')} tokens in ` +
    `${(f.prefill.ms / 1000).toFixed(1)} s at \`-t ${f.prefill.threads}\` (${f.prefill.tokensPerSecond} tokens/s).${bundled}\n\n` +
    ['| server | flags | runs | caught: exit 1 with cross-request-leak (95% Wilson) | a whole marker body | fault firings | median run |', '|---|---|---|---|---|---|---|', ...rows].join('\n') +
    '\n'
  );
}
