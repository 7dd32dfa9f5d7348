/**
 * Ballast: long-running generations of plain filler (ending with the marker cue, so they read as well) that
 * hold most of a KV pool, so that pages freed by an abort are reused at once — the state of a busy
 * production endpoint, made on purpose. Held across many race windows: `ensure()` (re)starts any piece that
 * is not running and waits until each holds its pages (its first text arrived) or ended; `release()` aborts
 * every piece and waits for them. Every ballast exchange is recorded (and scanned) as it ends.
 *
 * One ballast holds an endpoint at a time (pool-hold.ts): `ensure()` starts the pieces only once it has taken
 * the pool, and while another scenario's ballast holds it, starts nothing and says so (`'other'`): the pool
 * is already full. It tries again at the next `ensure()`; `release()` gives the pool back.
 */
import { overlimitPrompt, tokensFor, type TokenLine } from '../prompts.js';
import type { ScenarioContext } from './context.js';
import { exchange, type Exchange } from './exchange.js';

export interface BallastSpec {
  /** Tokens to hold in all (prompt + generation); 0 for none. */
  tokens: number;
  /** The longest prompt one request may have (the admission bound). */
  admitTokens: number;
  /** The longest prompt + generation one request may have (the context limit). */
  contextTokens: number;
  line: TokenLine | undefined;
  record: (ex: Exchange | undefined) => void;
  /** Longest wait for the pieces to hold. @default 15000 */
  holdTimeoutMs?: number;
  /** 'generation': a short prompt and the rest as max_tokens (ProbeTuning.ballastHold). @default 'prompt' */
  hold?: 'prompt' | 'generation';
  /**
   * Each piece's prompt carries its own number in its opening reference (the same in every run, as an
   * undistinguished ballast's is), so that a prefix cache cannot serve one piece's prompt pages to another
   * (identical pieces would share them, and hold that much less of the pool). @default false
   */
  distinct?: boolean;
  /** The scenario holding it, as other scenarios' notes name the holder. */
  scenario: string;
}

/** Who held the pool at an `ensure()`: these pieces, another scenario's ballast, or nothing (no ballast). */
export type BallastState = 'own' | 'other' | 'none';

export interface Ballast {
  pieces: number;
  ensure(): Promise<BallastState>;
  release(): Promise<void>;
  /** Scenarios whose ballast held the pool at an `ensure()` instead of this one, with how many times. */
  borrowed: Map<string, number>;
}

interface Piece {
  running: boolean;
  holding: Promise<void>;
  done: Promise<void>;
}

export function holdBallast(ctx: ScenarioContext, spec: BallastSpec): Ballast {
  const { tokens, line } = spec;
  // As few pieces as the context limit allows: each piece's prompt fits the admission bound, its generation
  // holds the rest of its share (an engine that reserves prompt + max_tokens holds it all at once).
  const perPiece = Math.max(1, Math.min(spec.contextTokens * 0.9, spec.admitTokens * 0.8 * 2));
  const pieces = tokens <= 0 || line === undefined || !Number.isFinite(perPiece) ? 0 : Math.ceil(tokens / perPiece);
  const stop = new AbortController();
  const slots: Array<Piece | undefined> = Array.from({ length: pieces }, () => undefined);
  const each = pieces === 0 ? 0 : Math.floor(tokens / pieces);
  // The prompt in whole filler repetitions (coarse on some tokenizers), never over its share; the generation
  // takes the rest, so prompt + generation stays within `each` and the sliver left for the race stays free.
  // `target` is the generation's share; held by generation, all but a 256-token prompt.
  const target = spec.hold === 'generation' ? Math.max(256, each - 256) : Math.min(Math.floor(spec.admitTokens * 0.8), Math.max(256, Math.floor(each / 2)));
  const reps = line === undefined ? 0 : Math.max(1, Math.floor((Math.max(16, each - target) - line.overhead) / line.perRepetition));
  const opening = spec.distinct === true ? 8 : 0; // "-N" after the reference: well within 8 tokens on any tokenizer
  const maxTokens = line === undefined ? target : Math.max(16, each - tokensFor(line, reps) - opening);

  const start = (i: number): Piece => {
    let onFirst!: () => void;
    const holding = new Promise<void>((resolve) => (onFirst = resolve));
    const piece: Piece = { running: true, holding, done: Promise.resolve() };
    piece.done = exchange(ctx, {
      role: 'ballast',
      prompt: spec.distinct === true ? overlimitPrompt(reps, `000000-${i + 1}`) : overlimitPrompt(reps),
      promptTokens: tokensFor(line!, reps) + opening,
      maxTokens,
      stream: true,
      signal: stop.signal,
      onFirstText: onFirst,
    }).then((ex) => {
      piece.running = false;
      onFirst();
      spec.record(ex);
    });
    return piece;
  };

  const owner = {};
  const borrowed = new Map<string, number>();
  return {
    pieces,
    borrowed,
    async ensure() {
      if (pieces === 0 || stop.signal.aborted || ctx.signal.aborted) return 'none';
      if (ctx.poolHold !== undefined && !ctx.poolHold.take(owner, spec.scenario)) {
        const other = ctx.poolHold.holder() ?? 'another scenario';
        borrowed.set(other, (borrowed.get(other) ?? 0) + 1);
        return 'other';
      }
      for (let i = 0; i < slots.length; i++) if (slots[i]?.running !== true) slots[i] = start(i);
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(slots.map((p) => p!.holding)),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, spec.holdTimeoutMs ?? 15_000))),
      ]);
      clearTimeout(timer);
      return 'own';
    },
    async release() {
      stop.abort();
      await Promise.all(slots.map((p) => p?.done));
      ctx.poolHold?.give(owner);
    },
  };
}
