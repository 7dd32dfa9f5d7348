/**
 * Ground truth for the detection matrix: which of the prober's responses really read pages holding
 * planted content, and how many of those the prober flagged.
 *
 * - The engine logs every attention read that covered another request's pages (reader id, writer ids) in
 *   a bounded ring. ExposureWatch polls it while a cycle runs and keeps the entries it had not seen; a poll
 *   that finds the ring full with none of the previous poll's entries left may have missed some, and is
 *   counted, so the report can say how complete the truth was.
 * - The tap knows, per engine request id, whether the prompt carried markers (its pages hold planted
 *   content) and what text went back; the recording scanner knows, per prober request id, what text the
 *   prober scanned. Responses are joined on that text: identical text gets identical verdicts from the
 *   scanner, so the join is exact except where responses of equal text were judged differently (only
 *   possible across roles, e.g. a reader and an over-limit prompt answering the same words). Those are
 *   counted as `ambiguous` and assigned optimistically.
 * - Independently of the prober, the tap's own whole-marker check says which exposed responses carried the
 *   complete body of a planted marker that their own prompt did not hold: a floor the marker signal can be
 *   compared against (the prober also finds fragments, so it should match or exceed it).
 */
import type { Exposure, ExposureSnapshot } from '../engine-under-test/src/exposure-log.js';
import type { TapRecord } from './tap.js';
import type { ScannedResponse } from './recording-scanner.js';

export interface ExposureSource {
  exposures(): ExposureSnapshot;
}

export interface ExposureTake {
  exposures: Exposure[];
  /** Foreign page reads (the engine's counter) since the last take. */
  foreignPageReads: number;
  /** Polls that may have missed entries (ring overflowed between polls). */
  overflowPolls: number;
}

const keyOf = (e: Exposure): string => `${e.reader}|${e.at}|${e.pageCount}|${e.writers.join(',')}|${e.pages.slice(0, 8).join(',')}`;

export class ExposureWatch {
  #prev = new Map<string, number>();
  #fresh: Exposure[] = [];
  #total: number;
  #overflow = 0;
  #timer: ReturnType<typeof setInterval> | undefined;

  constructor(
    private readonly source: ExposureSource,
    private readonly opts: { intervalMs?: number; capacity?: number } = {},
  ) {
    const first = source.exposures();
    this.#total = first.total;
    this.#prev = counts(first.exposures);
  }

  poll(): void {
    const snap = this.source.exposures();
    const now = counts(snap.exposures);
    const capacity = this.opts.capacity ?? 1000;
    const oldest = snap.exposures[0];
    if (snap.exposures.length >= capacity && this.#prev.size > 0 && oldest !== undefined && !this.#prev.has(keyOf(oldest))) this.#overflow++;
    const left = new Map(this.#prev);
    for (const e of snap.exposures) {
      const k = keyOf(e);
      const n = left.get(k) ?? 0;
      if (n > 0) left.set(k, n - 1);
      else this.#fresh.push(e);
    }
    this.#prev = now;
  }

  start(): void {
    this.stop();
    this.#timer = setInterval(() => this.poll(), this.opts.intervalMs ?? 50);
  }

  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Polls once more and returns what is new since the last take. */
  take(): ExposureTake {
    this.poll();
    const total = this.source.exposures().total;
    const out = { exposures: this.#fresh, foreignPageReads: total - this.#total, overflowPolls: this.#overflow };
    this.#fresh = [];
    this.#total = total;
    this.#overflow = 0;
    return out;
  }
}

function counts(list: readonly Exposure[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const e of list) {
    const k = keyOf(e);
    m.set(k, (m.get(k) ?? 0) + 1);
  }
  return m;
}

/**
 * Which engine request ids wrote planted content. The tap learns an id from the response, but a request
 * the prober aborted before the first response byte (abort-race's early aborts) never shows its id. Every
 * engine request of a series comes through the tap or from a client whose ids are known (the load
 * clients), so an id nobody saw belongs to one of those id-less requests. It is counted as planted when
 * every id-less request that could have written pages (any not rejected with a 4xx) carried markers — so
 * in abort-race, where only planters are aborted that early — and not counted otherwise (`uncertain`).
 */
export class WriterAttribution {
  readonly #planted = new Set<number>();
  readonly #seen = new Set<number>();
  readonly #others = new Set<number>();
  readonly markers = new Set<string>();
  #idlessPlanters = 0;
  #idlessOthers = 0;

  addTap(records: readonly TapRecord[]): void {
    for (const r of records) {
      const planted = r.promptMarkers.length > 0;
      if (planted) for (const m of r.promptMarkers) this.markers.add(m);
      if (r.engineId !== undefined) {
        this.#seen.add(r.engineId);
        if (planted) this.#planted.add(r.engineId);
      } else if (r.status === undefined || r.status < 400 || r.status >= 500) {
        if (planted) this.#idlessPlanters++;
        else this.#idlessOthers++;
      }
    }
  }

  addOthers(ids: Iterable<number>): void {
    for (const id of ids) this.#others.add(id);
  }

  isPlanted(id: number): boolean {
    if (this.#planted.has(id)) return true;
    if (this.#seen.has(id) || this.#others.has(id)) return false;
    return this.#idlessPlanters > 0 && this.#idlessOthers === 0;
  }

  /** Id-less requests without markers: unseen writer ids cannot be attributed while there are any. */
  get uncertain(): number {
    return this.#idlessPlanters > 0 ? this.#idlessOthers : 0;
  }
}

/** What the prober concluded about one response: the finding kinds that named it as the reader. */
export interface JudgedResponse extends ScannedResponse {
  kinds: ReadonlySet<string>;
}

export interface TruthJoin {
  /** Prober responses (through the tap) that read pages written by a request whose prompt held markers. */
  exposedResponses: number;
  /** Of those, how many the prober flagged: by the marker signal, the rejection signal, by anything. */
  flagged: { marker: number; rejection: number; any: number };
  /** Exposed responses that carried a whole planted marker body their own prompt did not hold (tap's own check). */
  wholeMarkerCopies: number;
  /** Exposed responses whose text matched no prober response (counted as not flagged). */
  unmatched: number;
  /** Exposed responses in text groups the prober judged unevenly (assigned optimistically). */
  ambiguous: number;
}

export const MARKER_SIGNAL = 'cross-request-leak';
export const REJECTION_SIGNAL = 'rejection-not-enforced';

/**
 * Joins one cycle's tap records, engine exposures and prober verdicts. `planted` says whether an engine id
 * wrote planted content (this cycle's requests and earlier ones': stale pages outlive the cycle that wrote
 * them); `plantedMarkers` holds the bodies of the markers those prompts held.
 */
export function joinTruth(input: {
  tap: readonly TapRecord[];
  exposures: readonly Exposure[];
  planted: (engineId: number) => boolean;
  plantedMarkers: ReadonlySet<string>;
  judged: readonly JudgedResponse[];
}): TruthJoin {
  const byEngineId = new Map<number, TapRecord>();
  for (const r of input.tap) if (r.engineId !== undefined) byEngineId.set(r.engineId, r);
  const exposed = new Set<number>();
  for (const e of input.exposures) {
    if (!byEngineId.has(e.reader)) continue;
    if (e.writers.some((w) => w !== e.reader && input.planted(w))) exposed.add(e.reader);
  }
  const groups = new Map<string, JudgedResponse[]>();
  for (const j of input.judged) {
    const g = groups.get(j.text);
    if (g === undefined) groups.set(j.text, [j]);
    else g.push(j);
  }
  // Per text group: how many exposed responses still to assign, and how many flagged verdicts remain.
  const remaining = new Map<string, { marker: number; rejection: number; any: number }>();
  const join: TruthJoin = { exposedResponses: exposed.size, flagged: { marker: 0, rejection: 0, any: 0 }, wholeMarkerCopies: 0, unmatched: 0, ambiguous: 0 };
  for (const id of exposed) {
    const rec = byEngineId.get(id)!;
    const own = new Set(rec.promptMarkers);
    if (rec.textMarkers.some((m) => !own.has(m) && input.plantedMarkers.has(m))) join.wholeMarkerCopies++;
    const group = groups.get(rec.text);
    if (group === undefined) {
      join.unmatched++;
      continue;
    }
    let left = remaining.get(rec.text);
    if (left === undefined) {
      left = {
        marker: group.filter((j) => j.kinds.has(MARKER_SIGNAL)).length,
        rejection: group.filter((j) => j.kinds.has(REJECTION_SIGNAL)).length,
        any: group.filter((j) => j.kinds.size > 0).length,
      };
      remaining.set(rec.text, left);
    }
    if (group.some((j) => j.kinds.size > 0) && group.some((j) => j.kinds.size === 0)) join.ambiguous++;
    for (const k of ['marker', 'rejection', 'any'] as const) {
      if (left[k] > 0) {
        join.flagged[k]++;
        left[k]--;
      }
    }
  }
  return join;
}
