/**
 * Prompt builders: planters dense with canary markers, readers that cue a copy of whatever the attention
 * covers, and over-limit prompts sized to a token count on a tokenizer we do not know.
 *
 * Sizing: the filler is one fixed paragraph repeated, so every tokenizer maps it to a constant number of
 * tokens per repetition plus a constant overhead (template, BOS, the cue). Two measurements — via the
 * endpoint's /tokenize where it has one, otherwise `usage.prompt_tokens` of a one-token completion — fix
 * that line, and the repetition count for a target follows. Big prompts are never materialised: a
 * PromptSource yields the repetitions lazily and the client streams them into the request body.
 */

import { createHash } from 'node:crypto';
import type { PromptSource as TargetPromptSource } from './target/prompt-body.js';

/** The text every marker starts with; ending a prompt with it invites a copy of whatever follows it in the KV the model attends over. */
export const MARKER_CUE = 'kvcanary-';

/** A prompt the client can stream without holding it whole (chunks() must yield the same text each call). */
export type PromptSource = Required<Pick<TargetPromptSource, 'totalChars'>> & TargetPromptSource;

const FILLER =
  'The committee reviewed the quarterly figures for the northern region and agreed that the ' +
  'warehouse schedule should move to a weekly rhythm, with deliveries grouped by district so that ' +
  'drivers spend less time waiting at the loading bay. Several members asked for the maintenance ' +
  'budget to be split between the older vehicles and the new refrigerated units, and the chair noted ' +
  'that the spring inspection would settle the question. ';

const OVERLIMIT_HEAD = 'Summarise the following meeting notes';
const READER_HEADER = 'Here is a reference code from our records: ';

export function repeatedSource(header: string, unit: string, repetitions: number, trailer: string): PromptSource {
  return {
    totalChars: header.length + unit.length * repetitions + trailer.length,
    *chunks() {
      yield header;
      // Batch repetitions into ~64 KiB strings: few chunks, bounded memory.
      const perChunk = Math.max(1, Math.floor(65_536 / unit.length));
      const block = unit.repeat(Math.min(perChunk, Math.max(repetitions, 1)));
      let left = repetitions;
      while (left >= perChunk) {
        yield block;
        left -= perChunk;
      }
      if (left > 0) yield unit.repeat(left);
      yield trailer;
    },
  };
}

export function sourceText(source: PromptSource): string {
  return Array.from(source.chunks()).join('');
}

/**
 * A reference that makes a prompt unlike every earlier run's: six decimal digits from the run id (no run of
 * base32 characters long enough to look like a marker). Fixed prompts recur from run to run, and a prefix
 * cache (llama.cpp's host prompt cache, vLLM's or SGLang's block cache) that still holds last run's twin
 * serves it whole: nothing past the shared text is computed, so a bug at the boundary of reuse (a reuse
 * length longer than the common prefix, a stale page past it) never reaches the reader. With the reference
 * early in the prompt, a reader shares only its opening with anything cached, as on a fresh server.
 */
export function promptRef(runId: string, n?: number): string {
  const digits = String(parseInt(createHash('sha256').update(runId).digest('hex').slice(0, 12), 16) % 1_000_000).padStart(6, '0');
  return n === undefined ? digits : `${digits}-${n}`;
}

/** The reference calibration uses: the same width as a run's, so token counts carry over. */
const CALIBRATION_REF = '000000';

/**
 * An over-limit (or near-limit) prompt of `repetitions` filler paragraphs, ending with the marker cue;
 * `ref` (promptRef) makes it this run's own.
 */
export function overlimitPrompt(repetitions: number, ref = CALIBRATION_REF): PromptSource {
  return repeatedSource(`${OVERLIMIT_HEAD} (ref ${ref}).\n\n`, FILLER, repetitions, `\n\nQuote the reference code: ${MARKER_CUE}`);
}

/**
 * A planter: `count` markers separated by spaces, so every KV page it fills carries marker text, then the
 * cue, so that an endpoint that copies at all echoes one of its own markers (the self-echo control).
 */
export function planterPrompt(markers: readonly string[]): string {
  return `${PLANTER_OPENING}${markers.join(' ')}\nQuote one reference code: ${MARKER_CUE}`;
}

const PLANTER_OPENING = 'Keep these reference codes on file: ';

/**
 * A reader that opens exactly as a planter does and parts from it where a planter's markers begin (its
 * `ref`, promptRef, in their place): a reuse that trusts cells past the common prefix, or a cache entry
 * matched on that opening, gives it a planter's markers right where its own text would be.
 */
export function openerPrompt(ref: string): string {
  return `${PLANTER_OPENING}(none, ref ${ref})\nQuote one reference code: ${MARKER_CUE}`;
}

/** The line every reader and over-limit prompt ends with, without its leading newline(s). */
export const CUE_LINE = `Quote the reference code: ${MARKER_CUE}`;

/**
 * A planter of one marker repeated `count` times, each copy led by the cue line readers end with, so the
 * text before every copy matches the reader's last 35 characters (any induction context up to that length
 * finds it) and every match continues the same way. Ends with the cue line too (the self-echo control).
 */
export function repeatedPlanterPrompt(marker: string, count: number): string {
  const body = marker.slice(MARKER_CUE.length);
  return `Keep this reference code on file.${`\n${CUE_LINE}${body}`.repeat(Math.max(1, count))}\n${CUE_LINE}`;
}

/**
 * A short reader: no markers of its own, ends with the cue. Anything marker-like it returns came from elsewhere.
 * `tag`, when given, is a line halfway through the filler: readers that share everything before it share
 * cacheable pages, and the tag ends that shared run, so the second half and the cue are always computed.
 */
export function readerPrompt(padRepetitions = 1, tag?: string): string {
  const cue = `\nQuote the reference code: ${MARKER_CUE}`;
  if (tag === undefined) return READER_HEADER + FILLER.repeat(padRepetitions) + cue;
  const head = Math.ceil(padRepetitions / 2);
  return READER_HEADER + FILLER.repeat(head) + `\n${tag}\n` + FILLER.repeat(padRepetitions - head) + cue;
}

/** Characters one marker occupies in a planter (marker plus separator). */
export function markerStride(sampleMarker: string): number {
  return sampleMarker.length + 1;
}

/** tokens = overhead + perRepetition × repetitions, fitted from two measured points. */
export interface TokenLine {
  overhead: number;
  perRepetition: number;
  /** How the line was measured: 'tokenize' (the endpoint's tokenizer) or 'usage' (billed prompt tokens). */
  via: 'tokenize' | 'usage';
}

export type TokenCounter = (source: PromptSource) => Promise<number | undefined>;

/** Calibrate the over-limit prompt family with two probes of different sizes. */
export async function calibrate(
  count: TokenCounter,
  via: TokenLine['via'],
  build: (repetitions: number) => PromptSource = overlimitPrompt,
  points: readonly [number, number] = [2, 18],
): Promise<TokenLine | undefined> {
  const [r1, r2] = points;
  const t1 = await count(build(r1));
  const t2 = await count(build(r2));
  if (t1 === undefined || t2 === undefined || t2 <= t1) return undefined;
  const perRepetition = (t2 - t1) / (r2 - r1);
  return { overhead: t1 - perRepetition * r1, perRepetition, via };
}

/** Repetitions whose prompt is closest to `targetTokens` (never below 1). */
export function repetitionsFor(line: TokenLine, targetTokens: number): number {
  return Math.max(1, Math.round((targetTokens - line.overhead) / line.perRepetition));
}

export function tokensFor(line: TokenLine, repetitions: number): number {
  return Math.round(line.overhead + line.perRepetition * repetitions);
}
