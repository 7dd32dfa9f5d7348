/**
 * Section 2, detection under background load. Production endpoints are never idle: other customers'
 * requests take freed pages before the prober's over-limit request or readers get them, so stale pages
 * they inherit are less often the prober's. Load clients (plain HTTP, not the prober, no markers, sent
 * straight to the engine, not through the tap) churn the pool at a set rate while the prober runs its
 * cycles; the sweep is repeated under both free-list policies.
 *
 * Load is open-loop: requests are due at `rate` per second whatever the engine does, like independent
 * customers, bounded by `maxInFlight` (requests that would exceed it are counted as shed, not queued).
 * The rate is set in pool turnovers per second (prompt tokens per second / the pool the engine reports),
 * and the report gives what was achieved, not only what was asked.
 */
import { randomBytes } from 'node:crypto';
import { Agent, request } from 'undici';
import { LOAD_LEVELS, type FreeListPolicy, type LoadCell } from './cells.js';
import type { CellEngine } from './engine-cell.js';
import { runSeries, type Around, type SeriesResult } from './series.js';
import { engineIdOf } from './tap.js';

export interface LoadSpec {
  /** Pool turnovers per second asked for. */
  turnoversPerSecond: number;
  poolTokens: number;
  /** Prompt tokens per load request. @default poolTokens / 8 */
  promptTokens?: number;
  /** @default 4 */
  maxTokens?: number;
  /** @default 64 */
  maxInFlight?: number;
}

export interface LoadAchieved {
  askedTurnoversPerSecond: number;
  achievedTurnoversPerSecond: number;
  requestsPerSecond: number;
  completed: number;
  failed: number;
  shed: number;
  promptTokens: number;
  seconds: number;
}

const WORDS = ['order', 'invoice', 'river', 'garden', 'window', 'ticket', 'market', 'signal', 'harbor', 'pencil', 'meadow', 'lantern', 'copper', 'orbit', 'velvet', 'canyon'];

/** A prompt of about `bytes` bytes of words and numbers (the engine's tokenizer is byte-level), no markers. */
export function loadPrompt(bytes: number, salt: Uint8Array): string {
  let s = '';
  let i = 0;
  while (s.length < bytes) {
    const b = salt[i % salt.length]! ^ (i * 131);
    s += (i % 5 === 4 ? String((b * 7919 + i) % 100000) : WORDS[b % WORDS.length]!) + ' ';
    i++;
  }
  return s.slice(0, bytes);
}

export interface LoadRun {
  /** Stops the load, waits for what is in flight, and reports what was achieved. */
  stop(): Promise<LoadAchieved>;
  /** Engine ids of the load's completed requests (the ground truth must not take them for the prober's). */
  engineIds(): Iterable<number>;
}

/** Starts load against `url`. */
export function startLoad(url: string, spec: LoadSpec): LoadRun {
  const promptTokens = Math.max(16, Math.floor(spec.promptTokens ?? spec.poolTokens / 8));
  const maxTokens = spec.maxTokens ?? 4;
  const maxInFlight = spec.maxInFlight ?? 64;
  const rate = (spec.turnoversPerSecond * spec.poolTokens) / promptTokens;
  const agent = new Agent({ connections: maxInFlight, keepAliveTimeout: 10_000 });
  const prompts = Array.from({ length: 32 }, () => loadPrompt(promptTokens - 1, randomBytes(16)));
  const started = performance.now();
  const inflight = new Set<Promise<void>>();
  let issued = 0;
  let completed = 0;
  let failed = 0;
  let shed = 0;
  let tokensDone = 0;
  let stopped = false;
  const ids: number[] = [];

  const send = (): void => {
    const body = JSON.stringify({ prompt: prompts[issued % prompts.length], max_tokens: maxTokens, temperature: 0 });
    issued++;
    const p = request(`${url}/v1/completions`, { method: 'POST', dispatcher: agent, headers: { 'content-type': 'application/json' }, body })
      .then(async (res) => {
        if (res.statusCode === 200) {
          const id = engineIdOf(((await res.body.json()) as { id?: unknown }).id);
          if (id !== undefined) ids.push(id);
          completed++;
          tokensDone += promptTokens;
        } else {
          await res.body.dump();
          failed++;
        }
      })
      .catch(() => {
        failed++;
      })
      .finally(() => inflight.delete(p));
    inflight.add(p);
  };

  let due = 0;
  const tick = (): void => {
    if (stopped) return;
    // Everything due by now, from the start: open loop, no drift from late ticks.
    const target = Math.floor(((performance.now() - started) / 1000) * rate);
    while (due < target) {
      due++;
      if (inflight.size >= maxInFlight) shed++;
      else send();
    }
  };
  const timer = rate > 0 ? setInterval(tick, 5) : undefined;

  const stop = async (): Promise<LoadAchieved> => {
    stopped = true;
    if (timer !== undefined) clearInterval(timer);
    const seconds = (performance.now() - started) / 1000;
    await Promise.allSettled([...inflight]);
    await agent.close();
    return {
      askedTurnoversPerSecond: spec.turnoversPerSecond,
      achievedTurnoversPerSecond: seconds > 0 ? tokensDone / spec.poolTokens / seconds : 0,
      requestsPerSecond: seconds > 0 ? completed / seconds : 0,
      completed,
      failed,
      shed,
      promptTokens,
      seconds,
    };
  };
  return { stop, engineIds: () => ids };
}

export interface LoadOptions {
  cells: readonly LoadCell[];
  levels?: readonly number[];
  policies?: readonly FreeListPolicy[];
  cycles: number;
  scale: number;
  /** Load runs this long before the first cycle, so the pool is already churned. @default 1000 */
  warmupMs?: number;
  /** Per point: stop after the cycle that ends past this (a saturated engine slows cycles down). @default 30_000 */
  maxMsPerPoint?: number;
  progress: (line: string) => void;
}

export interface LoadPoint extends SeriesResult {
  policy: FreeListPolicy;
  level: number;
  load?: LoadAchieved;
}

export interface LoadSweep {
  cell: LoadCell;
  available: boolean;
  reason?: string;
  points: LoadPoint[];
}

export interface LoadResult {
  cycles: number;
  scale: number;
  levels: number[];
  policies: FreeListPolicy[];
  sweeps: LoadSweep[];
}

export async function runLoadSection(opts: LoadOptions): Promise<LoadResult> {
  const levels = [...(opts.levels ?? LOAD_LEVELS)];
  const policies = [...(opts.policies ?? (['fifo', 'lifo'] as const))];
  const sweeps: LoadSweep[] = [];
  for (const cell of opts.cells) {
    const sweep: LoadSweep = { cell, available: true, points: [] };
    sweeps.push(sweep);
    outer: for (const policy of policies) {
      for (const level of levels) {
        const t0 = performance.now();
        const around = async (engine: CellEngine): Promise<Around> => {
          const load = startLoad(engine.url, { turnoversPerSecond: level, poolTokens: engine.poolTokens });
          await new Promise((r) => setTimeout(r, level > 0 ? (opts.warmupMs ?? 1000) : 0));
          return load;
        };
        const r = await runSeries({ cell: cell.engine, scenario: cell.scenario, cycles: opts.cycles, scale: opts.scale, freeList: policy, around, maxMs: opts.maxMsPerPoint ?? 30_000 });
        if (!r.available) {
          sweep.available = false;
          sweep.reason = r.reason ?? 'unavailable';
          opts.progress(`[load] ${cell.engine.id} × ${cell.scenario}: unavailable (${sweep.reason})`);
          break outer;
        }
        const { aroundResult, ...rest } = r;
        const load = aroundResult as LoadAchieved;
        sweep.points.push({ policy, level, ...rest, load });
        const s = r.summary!;
        opts.progress(
          `[load] ${cell.engine.id} × ${cell.scenario} ${policy} ${level}/s (achieved ${load.achievedTurnoversPerSecond.toFixed(2)}): ` +
            `marker ${s.marker.detected.successes}/${s.cycles}, rejection ${s.rejection.detected.successes}/${s.cycles} (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
        );
      }
    }
  }
  return { cycles: opts.cycles, scale: opts.scale, levels, policies, sweeps };
}
