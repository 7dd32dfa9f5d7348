/**
 * One probe cycle, measured: the prober's own `runProbe` with one scenario against one URL, exactly as
 * `kvcanary run --scenario NAME` would run it, plus (when a ground-truth source is attached) the engine's
 * record of what really happened during the cycle, joined to the prober's verdicts (ground-truth.ts).
 *
 * A ProbeSeries keeps one marker registry for all its cycles, as `serve` does (it reloads earlier runs'
 * markers from its store): markers planted in an earlier cycle that surface later still count.
 */
import type { TargetConfig } from '../prober/src/service/config.js';
import { createMarkerRegistry, type MarkerRegistry } from '../prober/src/probe/marker-registry.js';
import { runProbe } from '../prober/src/probe/probe.js';
import type { Outcome } from '../prober/src/probe/result.js';
import { createScanner } from '../prober/src/probe/scanner.js';
import type { ProbeTuning } from '../prober/src/probe/scenarios/context.js';
import { ExposureWatch, joinTruth, WriterAttribution, type ExposureSource, type JudgedResponse, type TruthJoin } from './ground-truth.js';
import { recordingScanner } from './recording-scanner.js';
import type { Tap } from './tap.js';

export interface CycleRecord {
  /** 1-based, within its series. */
  index: number;
  scenario: string;
  outcome: Outcome;
  /** Findings of this cycle, by kind. */
  findings: Record<string, number>;
  tokensSent: number;
  tokensBilled: number;
  requests: number;
  /** Responses scanned after this cycle planted markers (requests that were neither planters nor calibration). */
  pairs: number;
  durationMs: number;
  /** Why an inconclusive cycle was inconclusive: its notes, bounded. */
  note?: string;
  /** The cycle's first findings (at most 2), as evidence for the report: kind, the match line and its facts. */
  samples?: FindingSample[];
  truth?: CycleTruth;
}

export interface FindingSample {
  kind: string;
  scenario: string;
  match?: string;
  facts?: Record<string, string | number | boolean | null>;
  chance: number;
}

export interface CycleTruth extends TruthJoin {
  foreignPageReads: number;
  overflowPolls: number;
  /** Id-less requests without markers so far (writer ids the tap never saw could not be attributed). */
  uncertainWriters: number;
}

export interface GroundTruth {
  tap: Tap;
  engine: ExposureSource;
  /** Resolves when the engine has nothing in flight. */
  drain(): Promise<unknown>;
  /** Engine ids of requests that did not come through the tap (load clients). */
  otherEngineIds?: () => Iterable<number>;
  /** The engine's own record of which request ids carried markers; when absent the tap's is used. */
  submissions?: { planted: ReadonlySet<number>; all: ReadonlySet<number>; markers: ReadonlySet<string> };
}

export interface ProbeSeriesOptions {
  /** Where the prober sends (the tap's URL when ground truth is attached). */
  url: string;
  name?: string;
  tuning?: ProbeTuning;
  truth?: GroundTruth;
  /** @default 60_000 */
  requestTimeoutMs?: number;
  /** @default 1e12 */
  tokenBudget?: number;
}

export interface ProbeSeries {
  readonly registry: MarkerRegistry;
  run(scenario: string): Promise<CycleRecord>;
}

/** The notes that say why a cycle was inconclusive: the scenario's own, without the calibration and self-echo lines. */
function inconclusiveNote(notes: readonly string[]): string {
  const why = notes.filter((n) => !n.startsWith('self-echo') && !n.startsWith('calibrated') && !n.startsWith('planted'));
  return (why.length > 0 ? why : notes).join(' | ').slice(0, 300);
}

export function createProbeSeries(opts: ProbeSeriesOptions): ProbeSeries {
  const registry = createMarkerRegistry();
  const scanner = recordingScanner(createScanner(registry));
  const timeoutMs = opts.requestTimeoutMs ?? 60_000;
  const target: TargetConfig = {
    name: opts.name ?? 'bench',
    baseUrl: opts.url,
    headers: {},
    // Two tenants the operator declared apart by cache_salt: sharing across them is a leak (critical), where the
    // prober's own synthetic salt identities would only show the engine ignores cache_salt (cache-salt-ignored, info).
    tenants: [
      { name: 'tenant-a', cacheSalt: 'bench-tenant-a' },
      { name: 'tenant-b', cacheSalt: 'bench-tenant-b' },
    ],
    scenarios: [],
    schedule: { intervalMs: timeoutMs * 2, timeoutMs, jitterMs: 0 },
    budget: { tokensPerHour: Number.MAX_SAFE_INTEGER },
  };
  const truth = opts.truth;
  const watch = truth === undefined ? undefined : new ExposureWatch(truth.engine);
  const writers = new WriterAttribution();
  let index = 0;

  return {
    registry,
    async run(scenario) {
      index++;
      const t0 = performance.now();
      watch?.start();
      let run;
      try {
        run = await runProbe(
          { registry, scanner, ...(opts.tuning !== undefined ? { tuning: opts.tuning } : {}), requestTimeoutMs: timeoutMs },
          { target, scenarios: [scenario], runId: `bench-${scenario}-${index}`, signal: new AbortController().signal, tokenBudget: opts.tokenBudget ?? 1e12 },
        );
      } finally {
        if (truth !== undefined) {
          await truth.drain();
          // The tap records a response when its last byte has passed; wait for the stragglers.
          for (let i = 0; i < 500 && truth.tap.inFlight() > 0; i++) await new Promise((r) => setTimeout(r, 2));
        }
        watch?.stop();
      }
      const durationMs = performance.now() - t0;
      const result = run.scenarios[0]!;
      const findings: Record<string, number> = {};
      const kindsByRequest = new Map<string, Set<string>>();
      for (const f of result.findings) {
        findings[f.kind] = (findings[f.kind] ?? 0) + 1;
        const reader = f.evidence.read?.requestId;
        if (reader === undefined) continue;
        let s = kindsByRequest.get(reader);
        if (s === undefined) kindsByRequest.set(reader, (s = new Set()));
        s.add(f.kind);
      }
      const scanned = scanner.take();
      const planters = result.requests.filter((r) => r.role === 'planter').length;
      const pairs = planters === 0 ? 0 : result.requests.filter((r) => r.role !== 'planter' && r.role !== 'calibration').length;
      const record: CycleRecord = {
        index,
        scenario,
        outcome: result.outcome,
        findings,
        tokensSent: result.tokens.sent,
        tokensBilled: result.tokens.billed,
        requests: result.requests.length,
        pairs,
        durationMs: Math.round(durationMs * 10) / 10,
        ...(result.findings.length > 0
          ? {
              samples: result.findings.slice(0, 2).map((f) => ({
                kind: f.kind,
                scenario: f.scenario,
                ...(f.evidence.match !== undefined ? { match: f.evidence.match.slice(0, 200) } : {}),
                ...(f.evidence.facts !== undefined ? { facts: f.evidence.facts } : {}),
                chance: f.chance,
              })),
            }
          : {}),
        ...(result.outcome === 'inconclusive' ? { note: inconclusiveNote(result.notes) } : {}),
      };
      if (truth !== undefined && watch !== undefined) {
        const tap = truth.tap.take();
        writers.addTap(tap);
        if (truth.otherEngineIds !== undefined) writers.addOthers(truth.otherEngineIds());
        const ex = watch.take();
        const judged: JudgedResponse[] = scanned.map((s) => ({ ...s, kinds: kindsByRequest.get(s.requestId) ?? new Set<string>() }));
        // The engine's record wins where it saw the submissions (it knows aborted requests' ids too).
        const sub = truth.submissions;
        const engineSide = sub !== undefined && sub.all.size > 0;
        const planted = engineSide ? (id: number) => sub.planted.has(id) : (id: number) => writers.isPlanted(id);
        record.truth = {
          ...joinTruth({ tap, exposures: ex.exposures, planted, plantedMarkers: engineSide ? sub.markers : writers.markers, judged }),
          foreignPageReads: ex.foreignPageReads,
          overflowPolls: ex.overflowPolls,
          uncertainWriters: engineSide ? 0 : writers.uncertain,
        };
      }
      return record;
    },
  };
}
