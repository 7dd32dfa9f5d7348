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
  if (!ctx.introspection.reachable) {
    out.note('endpoint unreachable');
    out.reason = 'unreachable';
    return out.finish('inconclusive');
  }
  const line = await tokenLine(ctx, (ex) => out.add(ex));
  const plan = planWindows(ctx, line);
  const ballast = holdBallast(ctx, {
    tokens: plan.ballastTokens, admitTokens: plan.admitTokens, contextTokens: ctx.introspection.contextTokens ?? plan.admitTokens, line, record: (ex) => out.add(ex), scenario: ABORT_RACE,
    ...(ctx.tuning.ballastHold !== undefined ? { hold: ctx.tuning.ballastHold } : {}),
  });
  out.note(
    `window: 1 planter of ~${plan.planterTokens} tokens aborted in flight (mid-transfer, mid-stream, or re-sent), then ${plan.readersPerWindow} readers of ~${plan.readerEstimate} tokens` +
      (plan.ballastTokens > 0 ? `; ballast ~${plan.ballastTokens} tokens in ${ballast.pieces} request(s) (reservation pool ${plan.reservationPool})` : '; no ballast (pool not exposed)'),
  );
  const run = new WindowRun();
  try {
    await ballast.ensure();
    await runWindows(ctx, out, plan, run, () => ballast.ensure());
  } finally {
    await ballast.release();
  }
  out.power = abortRacePower(run.windows, run.tally.windows);
  for (const note of powerNotes(out.power, run, ballast.borrowed)) out.note(note);
  const resends = run.resends.note();
  if (resends !== undefined) out.note(resends);
  return verdict(out, run);
}

/** The sizes of one window, from what the endpoint advertises and the prompt calibration. */
interface WindowPlan {
  /** Windows to run: the measured workload's, or `abortRounds`. */
  wanted: number;
  planterTokens: number;
  maxTokens: number;
  readerReps: number;
  readerEstimate: number;
  readersPerWindow: number;
  ballastTokens: number;
  reservationPool: number | undefined;
  admitTokens: number;
}

function planWindows(ctx: ScenarioContext, line: Awaited<ReturnType<typeof tokenLine>>): WindowPlan {
  const { poolTokens, contextTokens } = ctx.introspection;
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
  const readersPerWindow = clamp(Math.ceil((planterReserve + slack) / (readerEstimate + maxTokens)) + 1, 4, 64);
  return {
    wanted: ctx.tuning.abortRounds ?? ABORT_RACE_WINDOWS,
    planterTokens, maxTokens, readerReps, readerEstimate, readersPerWindow, ballastTokens, reservationPool,
    admitTokens: Math.min(bound, ctx.introspection.maxInputTokens ?? Infinity),
  };
}

/** What the windows reached. */
class WindowRun {
  windows = 0;
  attempts = 0;
  missed = 0;
  readersOk = 0;
  readersSent = 0;
  cut: 'budget' | 'deadline' | undefined;
  readonly tally = new WindowTally();
  readonly resends = new Resends();
}

async function runWindows(ctx: ScenarioContext, out: ResultBuilder, plan: WindowPlan, run: WindowRun, holdPool: () => Promise<unknown>): Promise<void> {
  const sizing = initialSizing();
  // An identical planter, not aborted: its time to first token spans its prefill and transfer.
  const probe = await plant(ctx, sizing, { tokens: plan.planterTokens, maxTokens: 1, stream: true });
  if (out.add(probe.ex) === undefined) run.cut = ctx.signal.aborted ? 'deadline' : 'budget';
  // Any text at all dates the first token (the probe asks for one), whatever ended the stream after it.
  const ttft = probe.ex !== undefined && (probe.ex.result.transport === 'ok' || probe.ex.result.generatedChars > 0) ? probe.ex.result.ttftMs : undefined;
  out.note(ttft === undefined ? `no time to first token measured: aborts at fixed moments (${FALLBACK_MS.join(', ')} ms)` : `planter time to first token ${Math.round(ttft)} ms: aborts at ${ABORT_FRACTIONS.map((f) => Math.round(f * 100)).join('/')}% of it`);
  const maxAttempts = plan.wanted * 2 + 4;
  while (run.cut === undefined && run.windows < plan.wanted && run.attempts < maxAttempts && out.findings.length === 0) {
    if (ctx.signal.aborted) {
      run.cut = 'deadline';
      break;
    }
    await holdPool();
    // A mid-stream abort completes a prompt's KV (an engine with a host tier writes it back); the windows
    // after it re-send that same prompt and abort it early, while a load of it from the host tier (or its
    // prefill and transfer) is still landing.
    const phase = PHASES[run.attempts % PHASES.length]!;
    const resend = run.resends.pick(phase);
    const abortAfter = abortMoment(phase, resend !== undefined, run.attempts, ttft, run.resends.fastest);
    run.attempts++;
    let ex: Exchange | undefined;
    if (resend !== undefined) {
      ex = await exchange(ctx, { role: 'planter', prompt: resend.prompt, promptTokens: resend.estimate, maxTokens: plan.maxTokens, stream: true, abortAfter });
      if (ex !== undefined) ex = sentBySelf(ex, resend.sent);
      run.resends.answered(ex);
    } else {
      const planted = await plant(ctx, sizing, { tokens: plan.planterTokens, maxTokens: plan.maxTokens, stream: true, abortAfter });
      ex = planted.ex;
      if (phase === 'mid-stream' && ex !== undefined && ex.result.generatedChars > 0) {
        run.resends.completed(planted);
        run.tally.newGroup();
      }
    }
    if (out.add(ex) === undefined) {
      run.cut = ctx.signal.aborted ? 'deadline' : 'budget';
      break;
    }
    const readers = await sendReaders(ctx, out, plan, run.attempts);
    run.readersOk += readers.ok;
    run.readersSent += readers.sent;
    if (readers.sent < plan.readersPerWindow && !ctx.signal.aborted) run.cut = 'budget';
    // Counted: aborted before it ended (mid-prefill or mid-transfer when no text came; mid-stream otherwise).
    const inFlight = ex!.result.transport === 'aborted' && (phase === 'mid-stream' || ex!.result.generatedChars === 0);
    if (inFlight && readers.ok * 2 > plan.readersPerWindow) {
      run.windows++;
      run.tally.count(phase === 'mid-stream' ? 'midStream' : resend !== undefined ? 'resend' : 'midTransfer');
    } else run.missed++;
  }
}

/** When a window's planter is aborted: a fraction of the measured time to first token (fixed moments without one). */
function abortMoment(phase: (typeof PHASES)[number], resend: boolean, attempt: number, ttft: number | undefined, resendTtft: number | undefined): AbortAfter {
  if (phase === 'mid-stream') return { chars: 1 + (attempt % 12) };
  if (ttft === undefined) return { ms: FALLBACK_MS[attempt % FALLBACK_MS.length]! };
  if (resend) return { ms: Math.max(1, Math.round(Math.min(ttft, resendTtft ?? ttft) * RESEND_FRACTIONS[attempt % RESEND_FRACTIONS.length]!)) };
  return { ms: Math.max(1, Math.round(ttft * ABORT_FRACTIONS[attempt % ABORT_FRACTIONS.length]!)) };
}

/**
 * The moment the abort lands: readers, together. Reader i's first half is the same in every window and
 * differs from the other readers': a cache or host tier that keeps its pages past their release (or copies
 * them after it) serves them to reader i of the next window, fast. A line new every window ends that shared
 * run, so the second half and the cue are computed and transferred every time: the served half stays open to
 * a late copy until decoding starts, and the cue is always the reader's own, so what a polluted page holds is
 * read. The ledger's reference is this run's (promptRef): no cache serves a reader last run's twin whole.
 */
async function sendReaders(ctx: ScenarioContext, out: ResultBuilder, plan: WindowPlan, attempt: number): Promise<{ ok: number; sent: number }> {
  const readers = await Promise.all(
    Array.from({ length: plan.readersPerWindow }, (_, i) =>
      exchange(ctx, {
        role: 'reader', prompt: `Ledger ${promptRef(ctx.runId, i + 1)}. ${readerPrompt(plan.readerReps, `Entry ${attempt}.${i + 1}.`)}`,
        promptTokens: plan.readerEstimate + 8, maxTokens: plan.maxTokens, stream: true,
      }),
    ),
  );
  let ok = 0;
  let sent = 0;
  for (const r of readers) {
    if (out.add(r) === undefined) continue;
    sent++;
    if (decoded(r!, ctx.registry.fragmentLength)) ok++;
  }
  return { ok, sent };
}

/**
 * The prompt a mid-stream planter completed, re-sent by the windows after it. Re-sends abort at fractions of
 * the fastest re-send seen answering (a prompt served from a cache answers far sooner than it prefills).
 * Re-sends that still answer before their abort cannot exercise a load race: after two in a row the re-send
 * phases give way to fresh planters.
 */
class Resends {
  fastest: number | undefined;
  private complete: { prompt: string; sent: string[]; estimate: number } | undefined;
  private answeredInARow = 0;
  private replaced = 0;

  /** The prompt this phase re-sends, or undefined for a fresh planter. */
  pick(phase: (typeof PHASES)[number]): { prompt: string; sent: string[]; estimate: number } | undefined {
    if (phase !== 'resend') {
      this.complete = undefined;
      return undefined;
    }
    if (this.complete !== undefined && this.answeredInARow >= 2) this.replaced++;
    return this.answeredInARow < 2 ? this.complete : undefined;
  }

  completed(planted: { prompt: string; sent: string[]; estimate: number }): void {
    this.complete = planted;
  }

  answered(ex: Exchange | undefined): void {
    const answeredIn = ex !== undefined && ex.result.generatedChars > 0 ? ex.result.ttftMs : undefined;
    if (answeredIn !== undefined) this.fastest = Math.min(this.fastest ?? Infinity, answeredIn);
    this.answeredInARow = answeredIn !== undefined ? this.answeredInARow + 1 : 0;
  }

  note(): string | undefined {
    if (this.fastest === undefined) return undefined;
    return (
      `re-sent planters answered in ${Math.round(this.fastest)} ms at the fastest (served from a cache): their aborts moved to fractions of that` +
      (this.replaced > 0 ? `; still answered before the abort twice in a row, so ${this.replaced} re-send(s) gave way to fresh planters` : '')
    );
  }
}

function verdict(out: ResultBuilder, run: WindowRun): ScenarioResult {
  if (out.findings.length > 0) return out.finish('inconclusive'); // fail: findings decide
  if (run.cut !== undefined) {
    out.note(run.cut === 'budget' ? 'cut short by the token budget: isolation not established (not the endpoint\'s fault)' : 'cut short by the cycle deadline');
    out.reason = run.cut;
    return out.finish('inconclusive');
  }
  if (run.windows < ABORT_RACE_WINDOWS) {
    out.note(`fewer than the ${ABORT_RACE_WINDOWS} windows a pass needs (the workload whose power was measured)`);
    out.reason = 'power';
    return out.finish('inconclusive');
  }
  if (run.readersSent === 0 || run.readersOk * 2 < run.readersSent) {
    out.note('too few readers decoded to establish isolation');
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

function powerNotes(power: Power, run: WindowRun, borrowed: ReadonlyMap<string, number>): string[] {
  const w = run.tally.windows;
  const independent = independentWindows(w);
  return [
    ...[...borrowed].map(([other, times]) => `${other}'s ballast held the pool at ${times} window(s): this scenario's was not started beside it (one ballast an endpoint at a time)`),
    `${run.windows} race window(s) exercised in ${run.attempts} attempt(s) (${run.missed} not counted: planter answered before the abort, or readers failed): ` +
      `${w.midTransfer} mid-transfer, ${w.midStream} mid-stream, ${w.resends} re-send(s) in ${w.resendGroups} group(s); ` +
      `windows that can show a transfer late write ${independent.transfer}, a host-copy race ${independent.copy} (a group of re-sends counted once); ` +
      `${run.readersOk}/${run.readersSent} readers decoded (answered, or streamed a marker fragment's length of text before an error)`,
    power.basis === 'measured'
      ? `power (measured on the bundled engine's ${ABORT_RACE_MEASURED_FAULTS.join(' and ')}, bench/race-calibration.json): such a race fault firing on ≥${power.detectableRate * 100}% of its eligible events was caught in ≥${power.confidence} of runs of this workload (Wilson 95% lower bound)`
      : `power (scaled from the measured workload of ${ABORT_RACE_WINDOWS} windows, not measured at ${run.windows}): ≥${power.detectableRate * 100}% of eligible events, probability ${power.confidence}`,
  ];
}
