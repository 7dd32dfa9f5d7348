/**
 * The benchmark's arithmetic and report on synthetic data (what every figure in bench/REPORT.md rests on),
 * the ground-truth join on synthetic engine records, and a tiny real run: two cycles against the bundled
 * engine through the tap, and the CLI as a process. No timing is asserted.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import type { Exposure } from '../../engine-under-test/src/exposure-log.js';
import { ALL_CELLS, matrixCells, SINGLE_CELL } from '../../bench/cells.js';
import { projectToScaleOne, smallestSufficient, type PlanterPoint } from '../../bench/cost.js';
import type { CycleRecord } from '../../bench/cycle.js';
import { scenariosFor } from '../../bench/detection.js';
import { fromMatrix, type FalsePositiveTarget } from '../../bench/false-positives.js';
import { joinTruth, WriterAttribution, type JudgedResponse } from '../../bench/ground-truth.js';
import { BenchUsageError, parseBenchArgs, reproduce } from '../../bench/options.js';
import { proportion, zeroEventUpperBound } from '../../bench/proportion.js';
import { faultHeadlines, operatorExpectation, pci, renderMarkdown, timingFalseAlarms, totalFalsePositives, type BenchReport } from '../../bench/report.js';
import { runSeries } from '../../bench/series.js';
import { fidelityRow, type CopyFidelityResult } from '../../bench/copy-fidelity.js';
import { figureBlocks } from '../../bench/render-figures.js';
import { mergeReports } from '../../bench/run.js';
import { readFileSync } from 'node:fs';
import { summarizeSeries } from '../../bench/summary.js';
import { bodiesIn, createResponseParser, engineIdOf, type TapRecord } from '../../bench/tap.js';
import type { LoadResult } from '../../bench/load.js';
import type { MatrixResult } from '../../bench/detection.js';

function cycle(index: number, findings: Record<string, number>, extra: Partial<CycleRecord> = {}): CycleRecord {
  const kinds = Object.keys(findings);
  return {
    index,
    scenario: 'overlimit-handoff',
    outcome: kinds.length > 0 ? 'fail' : 'pass',
    findings,
    tokensSent: 1000,
    tokensBilled: 400,
    requests: 6,
    pairs: 1,
    durationMs: 10,
    ...extra,
  };
}

describe('proportions', () => {
  it('Wilson 95% intervals match the textbook values and are exact at the ends', () => {
    const all = proportion(50, 50);
    expect(all.p).toBe(1);
    expect(all.high).toBe(1);
    expect(all.low).toBeCloseTo(0.9287, 3);
    const none = proportion(0, 10);
    expect(none.low).toBe(0);
    expect(none.high).toBeCloseTo(0.2775, 3);
    const half = proportion(5, 10);
    expect(half.low).toBeCloseTo(0.2366, 3);
    expect(half.high).toBeCloseTo(0.7634, 3);
    expect(proportion(0, 0).p).toBeNull();
    expect(() => proportion(3, 2)).toThrow(RangeError);
  });

  it('zero events in n trials bound the rate by 1 - 0.05^(1/n), about 3/n', () => {
    expect(zeroEventUpperBound(1000)).toBeCloseTo(0.002991, 5);
    expect(zeroEventUpperBound(0)).toBeNull();
    expect(pci(proportion(50, 50))).toBe('1.00 (0.93–1.00)');
  });
});

describe('series summary', () => {
  it('first detection counts cycles and cumulative tokens from the fresh engine; cycles per detection is n / detections', () => {
    const records = [
      cycle(1, {}),
      cycle(2, {}),
      cycle(3, { 'cross-request-leak': 2 }),
      cycle(4, { 'rejection-not-enforced': 1 }),
      cycle(5, { 'cross-request-leak': 1, 'rejection-not-enforced': 1, 'pool-below-context': 1 }),
      cycle(6, {}, { outcome: 'inconclusive', note: 'endpoint unreachable' }),
    ];
    const s = summarizeSeries(records);
    expect(s.cycles).toBe(6);
    expect(s.outcomes).toEqual({ pass: 2, fail: 3, inconclusive: 1, 'not-applicable': 0 });
    expect(s.marker.detected.successes).toBe(2);
    expect(s.marker.first).toEqual({ cycle: 3, tokensSent: 3000, tokensBilled: 1200 });
    expect(s.marker.cyclesPerDetection).toBe(3);
    expect(s.rejection.first?.cycle).toBe(4);
    expect(s.other.map((o) => o.kind)).toEqual(['pool-below-context']);
    expect(s.findingsTotal).toEqual({ 'cross-request-leak': 3, 'rejection-not-enforced': 2, 'pool-below-context': 1 });
    expect(s.tokens.sentPerCycle).toBe(1000);
    expect(s.inconclusiveNote).toBe('1× endpoint unreachable');
    expect(s.truth).toBeUndefined();
  });

  it('recall sums exposed and flagged responses over cycles', () => {
    const truth = (exposed: number, marker: number, rejection: number) => ({
      exposedResponses: exposed,
      flagged: { marker, rejection, any: Math.max(marker, rejection) },
      wholeMarkerCopies: 0,
      unmatched: 0,
      ambiguous: 0,
      foreignPageReads: exposed * 10,
      overflowPolls: 0,
      uncertainWriters: 0,
    });
    const s = summarizeSeries([cycle(1, {}, { truth: truth(2, 1, 2) }), cycle(2, {}, { truth: truth(3, 0, 3) })]);
    expect(s.truth?.exposedResponses).toBe(5);
    expect(s.truth?.recallMarker.successes).toBe(1);
    expect(s.truth?.recallRejection.p).toBe(1);
    expect(s.truth?.foreignPageReads).toBe(50);
  });
});

describe('ground-truth join', () => {
  const body = 'abcdefghijklmnopqrstuvwxyz'.slice(0, 26);
  const tap = (engineId: number, text: string, promptMarkers: string[] = []): TapRecord => ({
    seq: engineId,
    path: '/v1/completions',
    status: 200,
    engineId,
    promptMarkers,
    textMarkers: bodiesIn(text),
    bodyBytes: 100,
    text,
    clientClosed: false,
  });
  const exposure = (reader: number, writers: number[]): Exposure => ({ reader, writers, pages: [1], pageCount: 1, at: '2026-01-01T00:00:00.000Z' });
  const judged = (requestId: string, text: string, kinds: string[]): JudgedResponse => ({ requestId, role: 'reader', text, kinds: new Set(kinds) });

  it('counts responses that read planted pages, and which of them the prober flagged', () => {
    const records = [tap(1, '', [body]), tap(2, `copy ${body}x`), tap(3, 'plain words'), tap(4, 'never judged'), tap(5, 'load only')];
    const exposures = [exposure(2, [1]), exposure(2, [1, 7]), exposure(3, [1]), exposure(4, [1]), exposure(5, [99]), exposure(1, [1])];
    const j = joinTruth({
      tap: records,
      exposures,
      planted: (id) => id === 1,
      plantedMarkers: new Set([body]),
      judged: [judged('p1', '', []), judged('r2', `copy ${body}x`, ['cross-request-leak']), judged('r3', 'plain words', [])],
    });
    // 2, 3 and 4 read request 1's pages (it planted); 5 read only a non-prober writer's; 1 reading itself is not foreign.
    expect(j.exposedResponses).toBe(3);
    expect(j.flagged).toEqual({ marker: 1, rejection: 0, any: 1 });
    expect(j.unmatched).toBe(1);
    expect(j.wholeMarkerCopies).toBe(1);
    expect(j.ambiguous).toBe(0);
  });

  it('a writer the tap never saw is a planter only while every id-less request carried markers', () => {
    const w = new WriterAttribution();
    const idless = (markers: string[], status?: number): TapRecord => ({ ...tap(0, '', markers), engineId: undefined, ...(status !== undefined ? { status } : {}) } as TapRecord);
    w.addTap([tap(1, '', [body]), tap(2, 'reader'), idless([body])]);
    w.addOthers([9]);
    expect([w.isPlanted(1), w.isPlanted(2), w.isPlanted(7), w.isPlanted(9)]).toEqual([true, false, true, false]);
    expect(w.markers.has(body)).toBe(true);
    // A rejected request never wrote pages: it does not make unseen ids ambiguous.
    w.addTap([idless([], 400)]);
    expect(w.isPlanted(7)).toBe(true);
    w.addTap([idless([])]);
    expect(w.isPlanted(7)).toBe(false);
    expect(w.uncertain).toBe(1);
  });

  it('responses of equal text share verdicts; uneven verdicts are counted as ambiguous', () => {
    const j = joinTruth({
      tap: [tap(1, '', [body]), tap(2, 'same'), tap(3, 'same')],
      exposures: [exposure(2, [1]), exposure(3, [1])],
      planted: (id) => id === 1,
      plantedMarkers: new Set([body]),
      judged: [judged('a', 'same', ['rejection-not-enforced']), judged('b', 'same', [])],
    });
    expect(j.exposedResponses).toBe(2);
    expect(j.flagged.rejection).toBe(1);
    expect(j.ambiguous).toBe(2);
  });
});

describe('the tap', () => {
  it('reads engine ids and text from SSE split anywhere, and from JSON', () => {
    const sse = createResponseParser('text/event-stream', 100);
    const stream = 'data: {"id":"cmpl-17","choices":[{"text":"he"}]}\n\ndata: {"id":"cmpl-17","choices":[{"text":"llo"}]}\n\ndata: [DONE]\n\n';
    for (let i = 0; i < stream.length; i += 7) sse.push(Buffer.from(stream.slice(i, i + 7)));
    const r = sse.end();
    expect(engineIdOf(r.id)).toBe(17);
    expect(r.text).toBe('hello');
    const json = createResponseParser('application/json', 100);
    json.push(Buffer.from('{"id":"chatcmpl-4","choices":[{"message":{"content":"hi"}}]}'));
    const j = json.end();
    expect(engineIdOf(j.id)).toBe(4);
    expect(j.text).toBe('hi');
    expect(engineIdOf(undefined)).toBeUndefined();
  });

  it('finds marker bodies inside longer base32 runs, not in short ones', () => {
    expect(bodiesIn('x abcdefghijklmnopqrstuvwxyz2 y')).toEqual(['abcdefghijklmnopqrstuvwxyz', 'bcdefghijklmnopqrstuvwxyz2']);
    expect(bodiesIn('short words only')).toEqual([]);
  });
});

describe('cost arithmetic', () => {
  const point = (fraction: number, detected: number, trials = 100): PlanterPoint => ({
    fraction,
    plantTokens: fraction * 1000,
    marker: proportion(detected, trials),
    markerFirst: 1,
    rejection: proportion(trials, trials),
    either: proportion(trials, trials),
    sentPerCycle: 0,
    billedPerCycle: 0,
  });

  it('the smallest sufficient size is the smallest that meets the goal with every larger one', () => {
    expect(smallestSufficient([point(0.125, 60), point(0.25, 99), point(0.5, 100), point(1, 100)])?.fraction).toBe(0.25);
    // A dip above a passing size breaks the run: the answer must hold for everything larger.
    expect(smallestSufficient([point(0.25, 100), point(0.5, 97), point(1, 100)])?.fraction).toBe(1);
    expect(smallestSufficient([point(0.5, 50), point(1, 90)])).toBeNull();
    // Detection by either signal is judged on its own proportion: the rejection signal carries it here.
    expect(smallestSufficient([point(0.5, 50), point(1, 90)], 0.99, (p) => p.either)?.fraction).toBe(0.5);
  });

  it('projects a + b/scale to scale 1', () => {
    // 100 + 6400/scale: 200 at 64, 150 at 128, 6500 at 1.
    expect(projectToScaleOne(64, 200, 128, 150)).toBeCloseTo(6500, 6);
  });
});

describe('options', () => {
  it('rejects bad values with the flag named, and reproduces a figure with every non-default option', () => {
    expect(() => parseBenchArgs(['--scale', '0'], 'bench')).toThrow(/--scale: expected an integer >= 1, got '0'/);
    expect(() => parseBenchArgs(['--only', 'nope'], 'bench')).toThrow(BenchUsageError);
    const whole = parseBenchArgs([], '/x/bench');
    expect(whole.out).toBe('/x/bench');
    expect(whole.cycles).toBe(50);
    const partial = parseBenchArgs(['--only', 'matrix', '--cell', 'incident', '--scale', '64'], 'bench');
    expect(partial.out).toBeUndefined();
    expect(reproduce(partial, 'matrix')).toBe('npm run bench -- --only matrix --cell incident --scale 64');
    expect(parseBenchArgs(['--full'], 'b').pairs).toBe(10_000);
  });

  it('the default cells are the presets plus every engine fault; --full adds the race faults\' defenses and more', () => {
    const ids = matrixCells(false).map((c) => c.id);
    expect(ids.slice(0, 3)).toEqual(['incident', 'remediated', 'hardened']);
    expect(ids).toEqual(expect.arrayContaining(['incident+page-tags', 'disaggregated+late-write/lifo', 'disaggregated+offload-release-race']));
    expect(ids).not.toContain('disaggregated+late-write+deferred-release/lifo');
    expect(ids).not.toContain('single/lifo');
    expect(new Set(ids).size).toBe(ids.length);
    const full = matrixCells(true).map((c) => c.id);
    expect(full).toEqual(expect.arrayContaining([...ids, 'single/lifo', 'hardened+late-write/lifo', 'disaggregated+late-write', 'disaggregated+late-write+deferred-release/lifo']));
  });

  it('defense cells run the scenarios aimed at their fault unless every scenario is asked for', () => {
    const defense = ALL_CELLS.find((c) => c.id === 'incident+page-tags')!;
    expect(ALL_CELLS.find((c) => c.id === 'disaggregated+late-write/lifo')?.aimed).toEqual(['abort-race']);
    expect(scenariosFor(defense, ['capacity-audit', 'overlimit-handoff', 'abort-race'], false)).toEqual(['overlimit-handoff']);
    expect(scenariosFor(defense, ['capacity-audit', 'overlimit-handoff'], true)).toHaveLength(2);
    expect(scenariosFor(ALL_CELLS.find((c) => c.id === 'incident')!, ['a', 'b'], false)).toEqual(['a', 'b']);
  });
});

function syntheticMatrix(): MatrixResult {
  const incident = ALL_CELLS.find((c) => c.id === 'incident')!;
  const remediated = ALL_CELLS.find((c) => c.id === 'remediated')!;
  const lateWrite = ALL_CELLS.find((c) => c.id === 'disaggregated+late-write/lifo')!;
  const detected = summarizeSeries([cycle(1, {}), cycle(2, { 'cross-request-leak': 1, 'rejection-not-enforced': 1 }), cycle(3, { 'rejection-not-enforced': 1 })]);
  const quiet = summarizeSeries([cycle(1, {}), cycle(2, {}), cycle(3, {})]);
  const noisy = summarizeSeries([cycle(1, { 'rejection-not-enforced': 1 }), cycle(2, {})]);
  return {
    cycles: 3,
    scale: 64,
    scenarios: ['overlimit-handoff', 'abort-race'],
    cells: [
      { cell: incident, available: true, series: [{ scenario: 'overlimit-handoff', available: true, summary: detected }, { scenario: 'abort-race', available: true, summary: quiet }] },
      { cell: remediated, available: true, series: [{ scenario: 'overlimit-handoff', available: true, summary: noisy }] },
      { cell: lateWrite, available: false, reason: 'Unknown preset `disaggregated`', series: [] },
    ],
  };
}

describe('report', () => {
  it('headlines name, per fault and signal, the scenario that detects first', () => {
    const heads = faultHeadlines(syntheticMatrix());
    expect(heads).toHaveLength(2);
    expect(heads[0]).toMatchObject({ cell: 'incident', fault: 'admission-checks-finished', signal: 'cross-request-leak', scenario: 'overlimit-handoff', firstCycle: 2, firstTokens: 2000 });
    expect(heads[1]).toMatchObject({ signal: 'rejection-not-enforced', firstCycle: 2, cyclesPerDetection: 1.5 });
  });

  it('counts false positives from the matrix series of a negative cell', () => {
    const t: FalsePositiveTarget = { target: 'remediated', available: true, expected: [], pairs: 0, cycles: 0, fromMatrix: { cycles: 0, pairs: 0 }, perScenario: {}, falsePositives: {}, expectedFindings: {}, samples: [], upperBoundPerPair: null, seconds: 0 };
    fromMatrix(syntheticMatrix(), 'remediated', t);
    expect(t).toMatchObject({ cycles: 2, pairs: 2, falsePositives: { 'rejection-not-enforced': 1 }, fromMatrix: { cycles: 2, pairs: 2 } });
    expect(totalFalsePositives({ pairsTarget: 2, scale: 64, targets: [t] })).toEqual({ findings: 1, pairs: 2 });
  });

  it('counts the timing test\'s runs and false alarms on the engines only', () => {
    const t = (target: string, runs: number, alarms: number, engine: boolean): FalsePositiveTarget => ({
      target, available: true, expected: [], pairs: 10, cycles: runs, fromMatrix: { cycles: 0, pairs: 0 },
      perScenario: { 'prefix-isolation': { cycles: runs, pairs: 0, inconclusive: 0 } },
      falsePositives: alarms > 0 ? { 'prefix-timing-side-channel': alarms } : {}, expectedFindings: {}, samples: [], upperBoundPerPair: null, seconds: 0,
      ...(engine ? { foreignPageReads: 0 } : {}),
    });
    const f = { pairsTarget: 10, scale: 64, targets: [t('remediated', 100, 0, true), t('hardened', 120, 1, true), t('self-echo/noise server', 30, 0, false)] };
    expect(timingFalseAlarms(f)).toEqual({ runs: 220, alarms: 1, targets: ['remediated', 'hardened'] });
  });

  it('renders every section with how to read it, the reproducing command, and what could not be measured', () => {
    const matrix = syntheticMatrix();
    const report: BenchReport = {
      version: 1,
      generatedAt: '2026-01-01T00:00:00.000Z',
      command: 'npm run bench',
      options: parseBenchArgs([], 'bench'),
      machine: { cpus: 2, node: 'v20', platform: 'linux-x64', loadAverageStart: [1, 1, 1], loadAverageEnd: [2, 2, 2] },
      seconds: 600,
      sections: {
        matrix: { command: 'npm run bench -- --only matrix', seconds: 300, result: matrix },
        falsePositives: {
          command: 'npm run bench -- --only false-positives',
          seconds: 10,
          result: {
            pairsTarget: 1000,
            scale: 64,
            targets: [
              { target: 'self-echo/noise server', available: true, expected: [], pairs: 1200, cycles: 40, fromMatrix: { cycles: 0, pairs: 0 }, perScenario: { 'abort-race': { cycles: 40, pairs: 1200, inconclusive: 40 } }, falsePositives: {}, expectedFindings: {}, samples: [], upperBoundPerPair: zeroEventUpperBound(1200), seconds: 9 },
            ],
          },
        },
        overhead: { command: 'npm run bench -- --only overhead', seconds: 1, error: 'boom' },
      },
    };
    const md = renderMarkdown(report);
    expect(md).toContain('| incident | overlimit-handoff | 1/2/0 | 0.33 (0.06–0.79) | cycle 2, 2,000 tok |');
    expect(md).toContain('`disaggregated+late-write/lifo`: Unknown preset `disaggregated`');
    expect(md).toContain('**0 false positives in 1,200 pairs**');
    expect(md).toContain('< 2.5e-3');
    expect(md).toContain('## 5. Prober overhead\n\nNot measured: boom.');
    expect(md).toContain('Reproduce: `npm run bench -- --only matrix`');
    expect(md.match(/\*\*How to read it/g)?.length).toBeGreaterThanOrEqual(4);
    expect(md).toContain('`cross-request-leak` first at **cycle 2**');
  });

  it("the operator paragraph reports what the load sweep measured, not a fixed claim", () => {
    const s = (m: number, r: number, n = 10) => summarizeSeries(Array.from({ length: n }, (_, i) => cycle(i + 1, { ...(i < m ? { 'cross-request-leak': 1 } : {}), ...(i < r ? { 'rejection-not-enforced': 1 } : {}) })));
    const engine = ALL_CELLS.find((c) => c.id === 'incident')!;
    const load: LoadResult = {
      cycles: 10,
      scale: 64,
      levels: [0, 32],
      policies: ['fifo'],
      sweeps: [{ cell: { engine, scenario: 'overlimit-handoff' }, available: true, points: [{ policy: 'fifo', level: 0, available: true, summary: s(10, 10) }, { policy: 'fifo', level: 32, available: true, summary: s(2, 6) }] }],
    };
    const text = operatorExpectation(load);
    expect(text).toContain('the marker signal went 1.00 → 0.20 (fifo)');
    expect(text).toContain('rejection signal was 0.60 at the busiest point');
    expect(text).toContain('weakened under load');
  });
});

describe('a tiny real run', () => {
  // The marker signal is a per-cycle probability: 99 of 100 cycles at this scale (runSeries, 100 cycles,
  // 2026-12-05), so both of two cycles catch it 98% of the time and at least one 99.99%. The rejection signal
  // is deterministic.
  it('two cycles of incident × overlimit-handoff: both signals fire, and the ground truth joins to the flags', async () => {
    const incident = ALL_CELLS.find((c) => c.id === 'incident')!;
    const r = await runSeries({ cell: incident, scenario: 'overlimit-handoff', cycles: 2, scale: 64 });
    expect(r.available).toBe(true);
    const s = r.summary!;
    expect(s.cycles).toBe(2);
    expect(r.markerTrace).toMatch(/^[01]{2}$/);
    expect(r.markerTrace).toContain('1');
    expect(r.rejectionTrace).toBe('11');
    expect(s.tokens.sentPerCycle).toBeGreaterThan(0);
    expect(s.truth!.exposedResponses).toBeGreaterThanOrEqual(2);
    expect(s.truth!.unmatched).toBe(0);
    expect(s.truth!.recallRejection.successes).toBe(s.truth!.exposedResponses);
    // The marker signal flagged responses that really read planted pages (at least one in every cycle it
    // fired), and some carried a whole marker.
    expect(s.truth!.recallMarker.successes).toBeGreaterThanOrEqual(r.markerTrace!.replace(/0/g, '').length);
    expect(s.truth!.wholeMarkerCopies).toBeGreaterThanOrEqual(1);
  }, 60_000);

  it('two cycles on the single-node engine: nothing fires and the engine read nothing foreign', async () => {
    const r = await runSeries({ cell: SINGLE_CELL, scenario: 'overlimit-handoff', cycles: 2, scale: 64 });
    expect(r.outcomes).toBe('PP');
    expect(r.summary!.truth).toMatchObject({ exposedResponses: 0, foreignPageReads: 0 });
  }, 60_000);

  it('`npm run bench` as a process: a narrowed run prints its Markdown on stdout and exits 0; bad usage exits 64', () => {
    const ok = spawnSync('npm', ['run', '-s', 'bench', '--', '--only', 'matrix', '--cell', 'single', '--scenario', 'capacity-audit', '--cycles', '2'], { encoding: 'utf8', timeout: 60_000 });
    expect(ok.status).toBe(0);
    expect(ok.stdout).toContain('| single | capacity-audit | 2/0/0 |');
    expect(ok.stdout).toContain('npm run bench -- --only matrix --cell single --scenario capacity-audit --cycles 2');
    expect(ok.stderr).toContain('[matrix 1/1] single × capacity-audit');
    const bad = spawnSync('npm', ['run', '-s', 'bench', '--', '--cell', 'no-such-cell'], { encoding: 'utf8', timeout: 60_000 });
    expect(bad.status).toBe(64);
    expect(bad.stderr).toContain('--cell: unknown cell no-such-cell');
  }, 90_000);
});

describe('copy fidelity', () => {
  const rec = (index: number, marker: boolean, whole: number): CycleRecord =>
    cycle(index, { ...(marker ? { 'cross-request-leak': 1 } : {}), 'rejection-not-enforced': 1 }, {
      truth: { exposedResponses: 1, flagged: { marker: marker ? 1 : 0, rejection: 1, any: 1 }, wholeMarkerCopies: whole, unmatched: 0, ambiguous: 0, foreignPageReads: 5, overflowPolls: 0, uncertainWriters: 0 },
    });

  it('a row counts per-cycle recall of each signal and the cycles a whole marker came back', () => {
    const row = fidelityRow({ ngram: 2, beta: 10, temperature: 0.7 }, 'repeated', [rec(1, true, 1), rec(2, true, 0), rec(3, false, 0), rec(4, false, 0)]);
    expect(row).toMatchObject({ ngram: 2, beta: 10, temperature: 0.7, layout: 'repeated', cycles: 4, markerRecall: 0.5, rejectionRecall: 1, wholeMarkerCycles: 1, markerCycles: 2, exposedResponses: 4, flaggedResponses: 2, wholeMarkerResponses: 1 });
  });

  it('report.json holds the section: at least 6 rows of at least 20 cycles, each with the fields the issue names, rendered in REPORT.md', () => {
    const report = JSON.parse(readFileSync(new URL('../../bench/report.json', import.meta.url), 'utf8')) as BenchReport;
    const cf = report.sections.copyFidelity?.result as CopyFidelityResult;
    expect(cf.cell).toBe('incident');
    const dense = cf.rows.filter((r) => r.layout === 'dense');
    expect(dense.length).toBeGreaterThanOrEqual(6);
    for (const r of cf.rows) {
      expect(r.cycles).toBeGreaterThanOrEqual(20);
      for (const k of ['ngram', 'beta', 'temperature', 'cycles', 'markerRecall', 'rejectionRecall'] as const) expect(typeof r[k]).toBe('number');
    }
    expect(new Set(cf.rows.map((r) => r.ngram))).toEqual(new Set([2, 4, 8, 16]));
    expect(new Set(cf.rows.map((r) => r.beta))).toEqual(new Set([5, 10, 20]));
    expect(new Set(cf.rows.map((r) => r.temperature))).toEqual(new Set([0, 0.7, 1]));
    const md = readFileSync(new URL('../../bench/REPORT.md', import.meta.url), 'utf8');
    expect(md).toBe(renderMarkdown(report));
    expect(md).toContain('## 6. Copy fidelity');
  });

  it('--merge keeps the sections it did not run and replaces matrix cells by id', () => {
    const matrix = syntheticMatrix();
    const old = { version: 1, generatedAt: 'x', command: 'npm run bench', options: parseBenchArgs([], 'bench'), machine: { cpus: 2, node: 'v20', platform: 'linux', loadAverageStart: [], loadAverageEnd: [] }, seconds: 1, sections: { matrix: { command: 'a', seconds: 1, result: matrix } } } as BenchReport;
    const incident = matrix.cells[0]!;
    const fresh = { ...old, sections: { matrix: { command: 'b', seconds: 2, result: { ...matrix, cells: [{ ...incident, reason: 'new' }] } }, copyFidelity: { command: 'c', seconds: 3, error: 'x' } } } as BenchReport;
    const merged = mergeReports(old, fresh);
    expect(merged.sections.matrix!.result!.cells.map((c) => c.cell.id)).toEqual(['remediated', 'disaggregated+late-write/lifo', 'incident']);
    expect(merged.sections.matrix!.command).toBe('a; b');
    expect(merged.sections.copyFidelity?.command).toBe('c');
    expect(merged.command).toBe('npm run bench');
  });
});

describe('published figures', () => {
  it('every figure block in docs/ and engine-under-test/README.md is what its stored JSON renders', () => {
    for (const { block, documented, rendered } of figureBlocks()) {
      expect(documented, `${block.doc} has no figures:${block.name} block`).toBeDefined();
      expect(documented, `${block.doc} figures:${block.name} differs from ${block.source} (run npx tsx bench/render-figures.ts)`).toBe(rendered);
    }
  });
});
