/**
 * `npm run bench:timing -- --absence [--runs N] [--slow-runs N] [--json FILE]`
 *
 * Is "no prefix reuse detectable (a saving >= X% would have shown with probability 0.95)" true? The shared
 * absence-of-reuse judgement (prefix-reuse.ts: 24 rounds of an exact re-send, a fresh prefix and the suffix
 * alone, over ~2,048-token prefixes) is run against a small server that really caches and really saves
 * prefill time on a hit (test/helpers/prefix-cache-server.ts), on two fronts: fast (the server itself) and a
 * slow noisy gateway that holds each request 250-350 ms (test/helpers/gateway.ts). The usage counters are
 * zeroed by the gateway, so timing alone must speak. Per front:
 * - `no cache`: caching off. How often the judgement says none (not-applicable), power (inconclusive) or
 *   shown (a false "reuse"), and the detectable saving X it states when it says none.
 * - `hit saves ~X`: a cache whose hit spares only part of the prefix's prefill (a slow tier), tuned so that
 *   its saving is about the median X stated in the first arm. The statement holds if the judgement shows
 *   reuse in at least 95% of these runs: a saving of X did show with probability >= 0.95. Each run's
 *   observed saving (the re-send's median effect) is recorded beside it.
 * Counts from this one run; the machine is shared, so the slow front's runs are few (each takes ~45 s).
 */
import { writeFileSync } from 'node:fs';
import { createMarkerRegistry } from '../prober/src/probe/marker-registry.js';
import { runProbe } from '../prober/src/probe/probe.js';
import { createScanner } from '../prober/src/probe/scanner.js';
import type { TargetConfig } from '../prober/src/service/config.js';
import { median } from '../prober/src/probe/stats.js';
import { startGateway } from '../test/helpers/gateway.js';
import { startPrefixCacheServer, type PrefixCacheServerOptions } from '../test/helpers/prefix-cache-server.js';

interface Front {
  name: string;
  delayMs?: [number, number];
}

interface Verdict {
  reuse: string;
  power: boolean;
  /** The X of "a saving >= X% would have shown" (none) or of "only a saving >= X% would have shown" (power). */
  detectable?: number;
  /** The re-send's median effect on the first token (1 - cached / fresh). */
  effect?: number;
  /** What a full hit on the prefix saves (fresh prefix vs the suffix alone). */
  hitSaving?: number;
}

export interface AbsenceRow {
  front: string;
  arm: 'no cache' | 'hit saves ~X';
  hitCostShare: number | null;
  runs: number;
  none: number;
  power: number;
  shown: number;
  /** Over every run that stated an X (none or power). */
  medianDetectable: number | null;
  maxDetectable: number | null;
  medianObservedSaving: number | null;
  medianFullHitSaving: number | null;
  secondsPerRun: number;
}

/** One reuse judgement: prefix-collision against a server without /tokenize measures reuse and judges it, nothing else. */
async function judgeOnce(server: PrefixCacheServerOptions, front: Front, i: number): Promise<{ verdict: Verdict; ms: number }> {
  const upstream = await startPrefixCacheServer(server);
  const gateway = await startGateway({ upstream: upstream.url, usage: 'zero-cached', ...(front.delayMs !== undefined ? { delayMs: front.delayMs } : {}) });
  const target: TargetConfig = {
    name: 'absence', baseUrl: gateway.url, headers: {}, tenants: [], scenarios: [],
    schedule: { intervalMs: 600_000, timeoutMs: 300_000, jitterMs: 0 }, budget: { tokensPerHour: Number.MAX_SAFE_INTEGER },
  };
  const registry = createMarkerRegistry();
  const t0 = performance.now();
  try {
    const run = await runProbe({ registry, scanner: createScanner(registry), requestTimeoutMs: 60_000 }, { target, scenarios: ['prefix-collision'], runId: `absence-${i}`, signal: new AbortController().signal, tokenBudget: 1e12 });
    const notes = run.scenarios[0]!.notes;
    const line = notes.find((n) => n.startsWith('prefix reuse: ')) ?? '';
    const reuse = /^prefix reuse: (\w+)/.exec(line)?.[1] ?? 'missing';
    const x = /saving >= (\d+)% would have shown/.exec(line);
    const effect = /exact re-send vs a fresh prefix: \d+ pairs, median [\d.]+ vs [\d.]+ ms \(effect (-?\d+)%/.exec(line);
    const full = /would save about (\d+)%/.exec(line);
    return {
      verdict: {
        reuse,
        power: line.includes('underpowered'),
        ...(x !== null ? { detectable: Number(x[1]) / 100 } : {}),
        ...(effect !== null ? { effect: Number(effect[1]) / 100 } : {}),
        ...(full !== null ? { hitSaving: Number(full[1]) / 100 } : {}),
      },
      ms: performance.now() - t0,
    };
  } finally {
    await gateway.close();
    await upstream.close();
  }
}

async function arm(front: Front, armName: AbsenceRow['arm'], server: PrefixCacheServerOptions, runs: number): Promise<AbsenceRow> {
  const verdicts: Verdict[] = [];
  let ms = 0;
  for (let i = 0; i < runs; i++) {
    const r = await judgeOnce(server, front, i);
    verdicts.push(r.verdict);
    ms += r.ms;
    process.stderr.write(`${front.name} / ${armName}: run ${i + 1}: ${r.verdict.reuse}${r.verdict.power ? ' (power)' : ''}${r.verdict.detectable !== undefined ? `, X ${Math.round(r.verdict.detectable * 100)}%` : ''}${r.verdict.effect !== undefined ? `, effect ${Math.round(r.verdict.effect * 100)}%` : ''}\n`);
  }
  const nums = (f: (v: Verdict) => number | undefined): number[] => verdicts.map(f).filter((x): x is number => x !== undefined);
  // Every X the judgement stated: "a saving >= X% would have shown" (none) and "only a saving >= X% would
  // have shown" (power) are both claims at the stated power.
  const stated = nums((v) => v.detectable);
  const orNull = (xs: number[], f: (xs: number[]) => number): number | null => (xs.length === 0 ? null : f(xs));
  return {
    front: front.name,
    arm: armName,
    hitCostShare: server.hitCostShare ?? null,
    runs,
    none: verdicts.filter((v) => v.reuse === 'none').length,
    power: verdicts.filter((v) => v.reuse === 'unknown' && v.power).length,
    shown: verdicts.filter((v) => v.reuse === 'shown').length,
    medianDetectable: orNull(stated, median),
    maxDetectable: orNull(stated, (xs) => Math.max(...xs)),
    medianObservedSaving: orNull(nums((v) => v.effect), median),
    medianFullHitSaving: orNull(nums((v) => v.hitSaving), median),
    secondsPerRun: ms / runs / 1000,
  };
}

export async function absenceBench(opts: { runs: number; slowRuns: number; json?: string }): Promise<void> {
  const fronts: Array<{ front: Front; runs: number }> = [
    { front: { name: 'fast (the server itself)' }, runs: opts.runs },
    { front: { name: 'slow noisy gateway, 250-350 ms', delayMs: [250, 350] }, runs: opts.slowRuns },
  ];
  const rows: AbsenceRow[] = [];
  for (const { front, runs } of fronts) {
    const off = await arm(front, 'no cache', { noCache: true }, runs);
    rows.push(off);
    // A hit that saves about the median stated X: it spares (1 - h) of the prefix's prefill, and a full hit
    // saves `full` of the first token, so h = 1 - X / full.
    const x = off.medianDetectable ?? off.maxDetectable;
    const full = off.medianFullHitSaving;
    if (x === null || full === null || full <= x) {
      process.stderr.write(`${front.name}: no stated X to test (the judgement never said none)\n`);
      continue;
    }
    const h = Math.round((1 - x / full) * 100) / 100;
    rows.push(await arm(front, 'hit saves ~X', { hitCostShare: h }, runs));
  }
  const pct = (v: number | null): string => (v === null ? '–' : `${Math.round(v * 100)}%`);
  process.stdout.write(
    [
      'absence-of-reuse judgement (24 rounds, ~2,048-token prefixes, cached_tokens zeroed by the gateway), alpha 0.001, stated power 0.95',
      '',
      '| front | cache | runs | none (not-applicable) | power (inconclusive) | shown | stated X median / max | observed saving (median) | full hit saves | s per run |',
      '|---|---|---|---|---|---|---|---|---|---|',
      ...rows.map((r) => `| ${r.front} | ${r.arm}${r.hitCostShare !== null ? ` (a hit costs ${pct(r.hitCostShare)} of its prefill)` : ''} | ${r.runs} | ${r.none} | ${r.power} | ${r.shown} | ${pct(r.medianDetectable)} / ${pct(r.maxDetectable)} | ${pct(r.medianObservedSaving)} | ${pct(r.medianFullHitSaving)} | ${r.secondsPerRun.toFixed(1)} |`),
    ].join('\n') + '\n',
  );
  if (opts.json !== undefined) {
    writeFileSync(opts.json, JSON.stringify({ command: `npm run bench:timing -- --absence --runs ${opts.runs} --slow-runs ${opts.slowRuns} --json ${opts.json}`, generatedAt: new Date().toISOString(), statedPower: 0.95, alpha: 0.001, rows }, null, 1) + '\n');
  }
}
