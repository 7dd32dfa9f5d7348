/**
 * One engine for one cell: started in this process on 127.0.0.1:0 at the benchmark's scale, checked to
 * really have the cell's faults and defenses (GET /debug/config, the engine's own ground truth), and
 * drained between cycles.
 *
 * Between cycles the engine is drained, not restarted: no request in flight, every page back on the free
 * list, stale page contents left as they are (as in production, and as the faults need). A fresh engine
 * starts each (cell, scenario) series, so the first cycle of a series meets a pool nobody has written.
 *
 * The engine runs in this process, so the benchmark also watches its `submit` (the server calls it for
 * every generation request) to learn, from the engine's own side, which request ids carried canary
 * markers: their pages hold planted content. The HTTP API cannot say that for a request aborted before its
 * first response byte, and abort-race aborts planters exactly then. Nothing is changed on the way through.
 */
import { EngineConfigError } from '../engine-under-test/src/config.js';
import { startEngine, type RunningEngine, type StartEngineOptions } from '../engine-under-test/src/start.js';
import type { EngineCell, FreeListPolicy } from './cells.js';

/** What the engine was asked to run, by request id: which prompts carried markers, and their bodies. */
export interface Submissions {
  /** Request ids whose prompts held at least one canary marker. */
  planted: Set<number>;
  /** Every request id the engine admitted. */
  all: Set<number>;
  /** Bodies (26 characters, lowercased) of the markers those prompts held. */
  markers: Set<string>;
}

const MARKER_RE = /kvcanary-([a-z2-7]{26})/gi;

/** The prompt's text: byte tokens below 256 (the bundled engine's tokenizer is byte-level, BOS and placeholder above). */
function promptText(tokens: Uint16Array): string {
  const bytes = new Uint8Array(tokens.length);
  let n = 0;
  for (const t of tokens) if (t < 256) bytes[n++] = t;
  return Buffer.from(bytes.buffer, 0, n).toString('latin1');
}

export interface CellEngine {
  url: string;
  running: RunningEngine;
  /** What GET /get_server_info says the admission pool is (what the prober sizes from), in tokens. */
  poolTokens: number;
  contextTokens: number;
  /** What the engine was asked to run (watched at its `submit`). */
  submissions: Submissions;
  /** Internal-error lines the engine logged (bounded), e.g. page-tags failing requests closed. */
  logLines(): string[];
  /** Waits until no request is waiting or running (bounded), so the next cycle starts on a quiet engine. */
  drain(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

export type CellStart = { ok: true; engine: CellEngine } | { ok: false; reason: string };

export interface CellStartOptions {
  scale: number;
  freeList?: FreeListPolicy;
  /** The model's copy fidelity (engine `--model-ngram`, `--model-beta`); the engine's defaults otherwise. */
  model?: { ngram?: number; beta?: number };
  /**
   * Sampling temperature for every generation request, as if each request carried it (the prober itself
   * always asks for 0). Each request gets its own seed, so sampled requests do not share one random stream.
   */
  temperature?: number;
}

export async function startCellEngine(cell: EngineCell, opts: CellStartOptions): Promise<CellStart> {
  const lines: string[] = [];
  let dropped = 0;
  const options = {
    preset: cell.preset,
    scale: opts.scale,
    ...(cell.faults.length > 0 ? { faults: [...cell.faults] } : {}),
    ...(cell.defenses.length > 0 ? { defenses: [...cell.defenses] } : {}),
    ...((opts.freeList ?? cell.freeList) !== undefined ? { freeList: opts.freeList ?? cell.freeList } : {}),
    ...(opts.model !== undefined ? { model: { ...opts.model } } : {}),
    log: (line: string) => (lines.length < 20 ? lines.push(line.slice(0, 200)) : dropped++),
  };
  let running: RunningEngine;
  try {
    // The cell list is data; the engine validates names at runtime (and this build may predate them).
    running = await startEngine(options as unknown as StartEngineOptions);
  } catch (err) {
    if (err instanceof EngineConfigError || (err as { code?: unknown }).code === 'ENGINE_CONFIG_INVALID') return { ok: false, reason: (err as Error).message };
    throw err;
  }
  const confirmed = await confirmConfig(running.url, cell);
  if (confirmed !== undefined) {
    await running.close();
    return { ok: false, reason: confirmed };
  }
  const submissions: Submissions = { planted: new Set(), all: new Set(), markers: new Set() };
  const engineObject = running.engine;
  const submit = engineObject.submit.bind(engineObject);
  let sampled = 0;
  const temperature = opts.temperature;
  engineObject.submit = (asked) => {
    const request = temperature === undefined ? asked : { ...asked, sampling: { ...asked.sampling, temperature, seed: (0x9e3779b9 * ++sampled) >>> 0 } };
    const result = submit(request);
    if (result.ok) {
      const id = result.request.id;
      submissions.all.add(id);
      for (const m of promptText(request.promptTokens).matchAll(MARKER_RE)) {
        submissions.planted.add(id);
        submissions.markers.add(m[1]!.toLowerCase());
      }
    }
    return result;
  };
  const info = (await getJson(`${running.url}/get_server_info`)) as { max_total_num_tokens?: unknown; context_length?: unknown } | undefined;
  const poolTokens = typeof info?.max_total_num_tokens === 'number' ? info.max_total_num_tokens : running.config.poolTokens;
  const contextTokens = typeof info?.context_length === 'number' ? info.context_length : running.config.contextTokens;
  return {
    ok: true,
    engine: {
      url: running.url,
      running,
      poolTokens,
      contextTokens,
      submissions,
      logLines: () => (dropped > 0 ? [...lines, `... ${dropped} more`] : [...lines]),
      async drain(timeoutMs = 10_000) {
        const until = performance.now() + timeoutMs;
        for (;;) {
          const s = running.engine.stats();
          if (s.running === 0 && s.waiting === 0) return true;
          if (performance.now() > until) return false;
          await new Promise((r) => setTimeout(r, 2));
        }
      },
      close: () => running.close(),
    },
  };
}

/** undefined when the engine confirms every fault and defense of the cell; otherwise why not. */
async function confirmConfig(url: string, cell: EngineCell): Promise<string | undefined> {
  if (cell.faults.length === 0 && cell.defenses.length === 0) return undefined;
  const doc = await getJson(`${url}/debug/config`);
  if (doc === undefined) return 'the engine has no GET /debug/config to confirm faults and defenses';
  const faults = listAt(doc, 'faults');
  const defenses = listAt(doc, 'defenses');
  const missing = [...cell.faults.filter((f) => !faults.includes(f)), ...cell.defenses.filter((d) => !defenses.includes(d))];
  return missing.length === 0 ? undefined : `the engine did not enable ${missing.join(', ')} (GET /debug/config lists faults [${faults.join(', ')}], defenses [${defenses.join(', ')}])`;
}

/** A string list under `key` at the top level or one level down (the config document's shape is the engine's). */
function listAt(doc: unknown, key: string): string[] {
  const pick = (o: unknown): string[] | undefined => {
    if (typeof o !== 'object' || o === null) return undefined;
    const v = (o as Record<string, unknown>)[key];
    if (Array.isArray(v)) return v.map((x) => (typeof x === 'string' ? x : typeof x === 'object' && x !== null && 'name' in x ? String((x as { name: unknown }).name) : String(x)));
    return undefined;
  };
  const top = pick(doc);
  if (top !== undefined) return top;
  if (typeof doc === 'object' && doc !== null) for (const v of Object.values(doc)) {
    const inner = pick(v);
    if (inner !== undefined) return inner;
  }
  return [];
}

export async function getJson(url: string): Promise<unknown> {
  try {
    const res = await fetch(url);
    if (!res.ok) {
      await res.body?.cancel();
      return undefined;
    }
    return await res.json();
  } catch {
    return undefined;
  }
}
