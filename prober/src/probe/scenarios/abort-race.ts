/**
 * abort-race: late writes and release races. "Stop computing", "stop writing", "stop reading" and "safe
 * to reallocate" are separate conditions; an engine that frees pages on abort while a KV transfer or a
 * host-offload copy is still in flight hands the next owner pages that are about to be overwritten.
 *
 * The scenario exercises race windows, one after another. One **window** is: a streaming planter (a prompt
 * dense with markers) aborted before its first generated character — while its KV was still being computed
 * or moved — and, the moment the abort lands, enough readers (short prompts with no markers, ending with the
 * marker cue) that together reserve every page the planter held plus the free space in front of it, most of
 * which answered. A late write then lands in a reader's pages whatever order the engine's free list hands
 * pages out in: with a LIFO list the readers get the planter's pages first, with a FIFO list after the free
 * space, and a single reader's prompt is short enough that its own transfer lands before the planter's last
 * queued batches do. A window whose planter streamed text before the abort, or whose readers mostly failed,
 * is not counted.
 *
 * Page reuse is what turns a late write into a leak, and an idle pool hides it, so when the endpoint exposes
 * its pools the scenario first fills the pool where requests reserve their pages (decode's, in disaggregated
 * serving) with ballast — long-running generations of plain filler, which end with the cue too — leaving
 * room for one planter and a sliver. The ballast is held across windows (restarted when a piece ends) and
 * aborted when the scenario ends. Abort moments are fractions of the measured time to first token of an
 * identical planter that was not aborted, so they fall inside the planter's prefill and transfer on any
 * endpoint speed.
 *
 * Power is measured, not derived (race-power.ts): the scenario runs the workload `npm run bench:race-calibration`
 * measured (29 counted windows, or `abortRounds` when set), stopping early at the first finding, and a pass
 * states the per-run recall that calibration showed for race faults firing on at least a stated fraction of
 * their eligible events. Its `trials` are the windows that can show a race, correlated ones counted once (a
 * group of re-sends is one window; a mid-stream window cannot show a transfer late write). Short of the
 * workload (budget, deadline, too many uncounted windows) it is inconclusive and says what it reached.
 */
import { promptRef, readerPrompt, repetitionsFor, tokensFor } from '../prompts.js';
import type { Power, ScenarioResult } from '../result.js';
import type { AbortAfter } from '../target/client.js';
import { holdBallast } from './ballast.js';
import { tokenLine } from './calibration.js';
import type { ScenarioContext } from './context.js';
import { decoded, exchange, sentBySelf, type Exchange } from './exchange.js';
import { initialSizing, plant } from './planting.js';
import { ResultBuilder } from './result-builder.js';
import { clamp } from './clamp.js';
import { ABORT_RACE_MEASURED_FAULTS, ABORT_RACE_WINDOWS, abortRacePower, independentWindows, type AbortWindows } from './race-power.js';

export const ABORT_RACE = 'abort-race';


/** Abort moments as fractions of an unaborted planter's time to first token: mid-prefill to late transfer. */
const ABORT_FRACTIONS = [0.15, 0.3, 0.1, 0.4, 0.2, 0.05, 0.5, 0.25];
/**
 * Windows come in fives: a planter aborted mid-stream (its KV complete, so a host tier writes it back), that
 * prompt re-sent and aborted early three times (a load of it from the host tier, or its prefill, still landing
 * when readers take its pages), then a fresh planter aborted mid-transfer. The re-sends carry the load race:
 * on FIFO free lists a first re-send misses about one time in five, and a second or third mostly catches it
 * (docs/measured.md "Race recall": with one re-send per group the FIFO cells were caught in 0.77-0.95 of runs; with
 * three, in 100 of 100 first-contact runs each).
 */
const PHASES = ['mid-stream', 'resend', 'resend', 'resend', 'mid-transfer'] as const;
/** A re-sent prompt served from a host tier or cache loads faster than it prefills: abort it early. */
const RESEND_FRACTIONS = [0.05, 0.1, 0.15, 0.08];
/** Without a measured time to first token (it failed): fixed moments. */
const FALLBACK_MS = [3, 12, 6, 30, 60, 20];

export async function abortRace(ctx: ScenarioContext): Promise<ScenarioResult> {
  const out = new ResultBuilder(ABORT_RACE, ctx);
  const { poolTokens, contextTokens, reachable } = ctx.introspection;
  if (!reachable) {
    out.note('endpoint unreachable');
    out.reason = 'unreachable';
    return out.finish('inconclusive');
  }
  const wanted = ctx.tuning.abortRounds ?? ABORT_RACE_WINDOWS;
  const enough = ABORT_RACE_WINDOWS;
  const line = await tokenLine(ctx, (ex) => out.add(ex));
  const maxTokens = ctx.tuning.readerMaxTokens ?? 48;
  const bound = Math.min(poolTokens ?? Infinity, contextTokens ?? Infinity);
  const planterTokens = ctx.tuning.planterTokens ?? (Number.isFinite(bound) ? clamp(Math.floor(bound / 2), 256, 4096) : 2048);
  // Readers a quarter of a planter: a reader's own transfer writes its pages first to last, so a late batch
  // landing on its first pages while the rest of its prompt is still in flight is read the moment decoding
  // starts; long enough for that window to be wide, short enough that several cover the planter's pages.
  const readerTokens = Math.floor(planterTokens / 4);
  const readerReps = line === undefined ? 0 : readerTokens < line.overhead + line.perRepetition ? 0 : repetitionsFor(line, readerTokens);
  const readerEstimate = line === undefined ? 96 : tokensFor(line, readerReps);

  // The pool where pages are reserved: decode's where named, else the largest exposed.
  const reservationPool = ctx.introspection.reservationPoolTokens ?? ctx.introspection.largestPoolTokens ?? poolTokens;
  const page = ctx.introspection.pageSize ?? 16;
  const planterReserve = planterTokens + maxTokens + page;
  const slack = reservationPool === undefined ? 0 : Math.max(4 * page, Math.ceil(reservationPool * 0.02));
  const ballastTokens =
    line !== undefined && reservationPool !== undefined && ctx.tuning.abortBallast !== false ? Math.max(0, reservationPool - planterReserve - slack) : 0;
  // Readers of one window: together they reserve the planter's pages and the slack in front of them.
  const readerReserve = readerEstimate + maxTokens;
  const readersPerWindow = clamp(Math.ceil((planterReserve + slack) / readerReserve) + 1, 4, 64);
  const admit = Math.min(bound, ctx.introspection.maxInputTokens ?? Infinity);
  const ballast = holdBallast(ctx, {
    tokens: ballastTokens, admitTokens: admit, contextTokens: contextTokens ?? admit, line, record: (ex) => out.add(ex), scenario: ABORT_RACE,
    ...(ctx.tuning.ballastHold !== undefined ? { hold: ctx.tuning.ballastHold } : {}),
  });
  out.note(
    `window: 1 planter of ~${planterTokens} tokens aborted in flight (mid-transfer, mid-stream, or re-sent), then ${readersPerWindow} readers of ~${readerEstimate} tokens` +
      (ballastTokens > 0 ? `; ballast ~${ballastTokens} tokens in ${ballast.pieces} request(s) (reservation pool ${reservationPool})` : '; no ballast (pool not exposed)'),
  );

  const sizing = initialSizing();
  let windows = 0;
  const tally = new WindowTally();
  let attempts = 0;
  let missed = 0;
  let readersOk = 0;
  let readersSent = 0;
  let cut: 'budget' | 'deadline' | undefined;
  const maxAttempts = wanted * 2 + 4;
  let complete: { prompt: string; sent: string[]; estimate: number } | undefined;
  // Re-sends abort at fractions of the fastest re-send seen answering (a prompt served from a cache answers
  // far sooner than it prefills). Re-sends that still answer before their abort cannot exercise a load race:
  // after two in a row the re-send phases give way to fresh planters.
  let resendTtft: number | undefined;
  let resendsAnswered = 0;
  let resendsReplaced = 0;
  try {
    await ballast.ensure();
    // An identical planter, not aborted: its time to first token spans its prefill and transfer.
    const probe = await plant(ctx, sizing, { tokens: planterTokens, maxTokens: 1, stream: true });
    if (out.add(probe.ex) === undefined) cut = ctx.signal.aborted ? 'deadline' : 'budget';
    const ttft = probe.ex !== undefined && decoded(probe.ex) ? probe.ex.result.ttftMs : undefined;
    out.note(ttft === undefined ? `no time to first token measured: aborts at fixed moments (${FALLBACK_MS.join(', ')} ms)` : `planter time to first token ${Math.round(ttft)} ms: aborts at ${ABORT_FRACTIONS.map((f) => Math.round(f * 100)).join('/')}% of it`);
    while (cut === undefined && windows < wanted && attempts < maxAttempts && out.findings.length === 0) {
      if (ctx.signal.aborted) {
        cut = 'deadline';
        break;
      }
      await ballast.ensure();
      // A mid-stream abort completes a prompt's KV (an engine with a host tier writes it back); the windows
      // after it re-send that same prompt and abort it early, while a load of it from the host tier (or its
      // prefill and transfer) is still landing.
      const phase = PHASES[attempts % PHASES.length]!;
      const midStream = phase === 'mid-stream';
      const resend = phase === 'resend' && resendsAnswered < 2 ? complete : undefined;
      if (phase === 'resend' && complete !== undefined && resend === undefined) resendsReplaced++;
      if (phase !== 'resend') complete = undefined;
      const abortAfter: AbortAfter = midStream
        ? { chars: 1 + (attempts % 12) }
        : resend !== undefined && ttft !== undefined
          ? { ms: Math.max(1, Math.round(Math.min(ttft, resendTtft ?? ttft) * RESEND_FRACTIONS[attempts % RESEND_FRACTIONS.length]!)) }
          : ttft === undefined
          ? { ms: FALLBACK_MS[attempts % FALLBACK_MS.length]! }
          : { ms: Math.max(1, Math.round(ttft * ABORT_FRACTIONS[attempts % ABORT_FRACTIONS.length]!)) };
      attempts++;
      let ex: Exchange | undefined;
      if (resend !== undefined) {
        ex = await exchange(ctx, { role: 'planter', prompt: resend.prompt, promptTokens: resend.estimate, maxTokens, stream: true, abortAfter });
        if (ex !== undefined) ex = sentBySelf(ex, resend.sent);
        const answeredIn = ex !== undefined && ex.result.generatedChars > 0 ? ex.result.ttftMs : undefined;
        if (answeredIn !== undefined) resendTtft = Math.min(resendTtft ?? Infinity, answeredIn);
        resendsAnswered = answeredIn !== undefined ? resendsAnswered + 1 : 0;
      } else {
        const planted = await plant(ctx, sizing, { tokens: planterTokens, maxTokens, stream: true, abortAfter });
        ex = planted.ex;
        if (midStream && ex !== undefined && ex.result.generatedChars > 0) {
          complete = planted;
          tally.newGroup();
        }
      }
      if (out.add(ex) === undefined) {
        cut = ctx.signal.aborted ? 'deadline' : 'budget';
        break;
      }
      // The moment the abort lands: readers, together.
      const readers = await Promise.all(
        // Reader i's first half is the same in every window and differs from the other readers': a cache or
        // host tier that keeps its pages past their release (or copies them after it) serves them to reader i
        // of the next window, fast. A line new every window ends that shared run, so the second half and the
        // cue are computed and transferred every time: the served half stays open to a late copy until
        // decoding starts, and the cue is always the reader's own, so what a polluted page holds is read.
        // The ledger's reference is this run's (promptRef): no cache serves a reader last run's twin whole.
        Array.from({ length: readersPerWindow }, (_, i) =>
          exchange(ctx, { role: 'reader', prompt: `Ledger ${promptRef(ctx.runId, i + 1)}. ${readerPrompt(readerReps, `Entry ${attempts}.${i + 1}.`)}`, promptTokens: readerEstimate + 8, maxTokens, stream: true }),
        ),
      );
      let ok = 0;
      let sent = 0;
      for (const r of readers) {
        if (out.add(r) === undefined) continue;
        sent++;
        if (decoded(r!)) ok++;
      }
      readersOk += ok;
      readersSent += sent;
      if (sent < readersPerWindow && !ctx.signal.aborted) cut = 'budget';
      // Counted: aborted before it ended (mid-prefill or mid-transfer when no text came; mid-stream otherwise).
      const inFlight = ex!.result.transport === 'aborted' && (midStream || ex!.result.generatedChars === 0);
      if (inFlight && ok * 2 > readersPerWindow) {
        windows++;
        tally.count(midStream ? 'midStream' : resend !== undefined ? 'resend' : 'midTransfer');
      } else missed++;
    }
  } finally {
    await ballast.release();
  }
  out.power = abortRacePower(windows, tally.windows);
  for (const line of powerNotes(out.power, tally.windows, { windows, attempts, missed, readersOk, readersSent, enough }, ballast.borrowed)) out.note(line);
  if (resendTtft !== undefined) {
    out.note(
      `re-sent planters answered in ${Math.round(resendTtft)} ms at the fastest (served from a cache): their aborts moved to fractions of that` +
        (resendsReplaced > 0 ? `; still answered before the abort twice in a row, so ${resendsReplaced} re-send(s) gave way to fresh planters` : ''),
    );
  }
  if (out.findings.length > 0) return out.finish('inconclusive'); // fail: findings decide
  if (cut !== undefined) {
    out.note(cut === 'budget' ? 'cut short by the token budget: isolation not established (not the endpoint\'s fault)' : 'cut short by the cycle deadline');
    out.reason = cut;
    return out.finish('inconclusive');
  }
  if (windows < enough) {
    out.note(`fewer than the ${enough} windows a pass needs (the workload whose power was measured)`);
    out.reason = 'power';
    return out.finish('inconclusive');
  }
  if (readersSent === 0 || readersOk * 2 < readersSent) {
    out.note('too few readers answered to establish isolation');
    return out.finish('inconclusive');
  }
  return out.finish('pass');
}

/** Counted windows by what they can show; re-sends of one prompt form a group, counted once (race-power.ts). */
class WindowTally {
  readonly windows: AbortWindows = { midTransfer: 0, midStream: 0, resends: 0, resendGroups: 0 };
  private group = 0;
  private counted = -1;

  /** A mid-stream planter completed a prompt: the re-sends after it are a new group. */
  newGroup(): void {
    this.group++;
  }

  count(kind: 'midStream' | 'resend' | 'midTransfer'): void {
    if (kind !== 'resend') {
      this.windows[kind]++;
      return;
    }
    this.windows.resends++;
    if (this.counted !== this.group) this.windows.resendGroups++;
    this.counted = this.group;
  }
}

function powerNotes(
  power: Power,
  w: AbortWindows,
  n: { windows: number; attempts: number; missed: number; readersOk: number; readersSent: number; enough: number },
  borrowed: ReadonlyMap<string, number>,
): string[] {
  const independent = independentWindows(w);
  return [
    ...[...borrowed].map(([other, times]) => `${other}'s ballast held the pool at ${times} window(s): this scenario's was not started beside it (one ballast an endpoint at a time)`),
    `${n.windows} race window(s) exercised in ${n.attempts} attempt(s) (${n.missed} not counted: planter answered before the abort, or readers failed): ` +
      `${w.midTransfer} mid-transfer, ${w.midStream} mid-stream, ${w.resends} re-send(s) in ${w.resendGroups} group(s); ` +
      `windows that can show a transfer late write ${independent.transfer}, a host-copy race ${independent.copy} (a group of re-sends counted once); ` +
      `${n.readersOk}/${n.readersSent} readers decoded (answered, or streamed text before an error)`,
    power.basis === 'measured'
      ? `power (measured on the bundled engine's ${ABORT_RACE_MEASURED_FAULTS.join(' and ')}, bench/race-calibration.json): such a race fault firing on ≥${power.detectableRate * 100}% of its eligible events was caught in ≥${power.confidence} of runs of this workload (Wilson 95% lower bound)`
      : `power (scaled from the measured workload of ${n.enough} windows, not measured at ${n.windows}): ≥${power.detectableRate * 100}% of eligible events, probability ${power.confidence}`,
  ];
}
