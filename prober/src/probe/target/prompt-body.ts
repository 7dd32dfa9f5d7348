/**
 * A JSON request body whose one big string field (the prompt) is streamed, never materialised.
 *
 * A 1,048,576-token prompt is several MB; building `JSON.stringify({prompt})` would hold the prompt, its
 * escaped copy and the encoded buffer at once. Instead the template object is serialised with a sentinel in
 * the prompt's place, split around it, and the prompt is escaped slice by slice between the two halves.
 *
 * The body carries a Content-Length (some gateways refuse chunked uploads), so the source is walked twice:
 * once to count bytes, once to send. `chunks()` must therefore yield the same text on every call; a source
 * that changes between passes is caught (the byte count no longer matches) and reported as a caller error.
 *
 * Surrogate pairs split across chunks are re-joined before escaping, so the server receives plain UTF-8
 * rather than two escaped halves.
 */
import { Buffer } from 'node:buffer';
import { PromptSourceError, TargetError } from './errors.js';

/** A prompt the client streams into the request body without holding it whole. */
export interface PromptSource {
  /** Advisory length in UTF-16 code units (for notes and progress); the body length is measured, not trusted. */
  totalChars?: number;
  /** Yields the prompt text in order. Called once per pass; must yield identical text every time. */
  chunks(): Iterable<string>;
}

export type Prompt = string | PromptSource;

export interface StreamedJsonBody {
  /** Exact UTF-8 length of the whole body. */
  readonly byteLength: number;
  /** Characters of the prompt (UTF-16 code units), measured on the first pass. */
  readonly promptChars: number;
  /** The body in buffers of about `BODY_BUFFER_BYTES`. Throws PromptSourceError if the source changed. */
  chunks(): AsyncGenerator<Uint8Array>;
}

/** Where the prompt goes in a template passed to `streamedJsonBody`. */
export const PROMPT_HOLE = '\u0000kvcanary:prompt-hole\u0000';

/** Escaping works on slices of this many code units: bounds the transient copies whatever the source yields. */
const SLICE_CHARS = 16_384;
/** Target size of each buffer handed to the socket. */
const BODY_BUFFER_BYTES = 64 * 1024;

export function streamedJsonBody(template: unknown, prompt: Prompt): StreamedJsonBody {
  const source: PromptSource = typeof prompt === 'string' ? { totalChars: prompt.length, chunks: () => [prompt] } : prompt;
  const json = JSON.stringify(template);
  const hole = JSON.stringify(PROMPT_HOLE);
  const at = json.indexOf(hole);
  if (at < 0 || json.indexOf(hole, at + hole.length) >= 0) {
    // A programming error in the client itself, not in the caller's input.
    throw new TargetError('KVC_TARGET_INVALID_ARG', 'request template must hold the prompt hole exactly once');
  }
  const prefix = json.slice(0, at + 1); // keeps the opening quote
  const suffix = json.slice(at + hole.length - 1); // keeps the closing quote

  let promptBytes = 0;
  let promptChars = 0;
  for (const piece of escapedPieces(source)) {
    promptBytes += Buffer.byteLength(piece.escaped, 'utf8');
    promptChars += piece.chars;
  }
  const byteLength = Buffer.byteLength(prefix, 'utf8') + promptBytes + Buffer.byteLength(suffix, 'utf8');

  return {
    byteLength,
    promptChars,
    async *chunks() {
      let sent = 0;
      let pending: string[] = [prefix];
      let pendingChars = prefix.length;
      const flush = (): Uint8Array => {
        const buf = Buffer.from(pending.join(''), 'utf8');
        pending = [];
        pendingChars = 0;
        sent += buf.byteLength;
        if (sent > byteLength) throw unstable(byteLength, sent);
        return buf;
      };
      for (const piece of escapedPieces(source)) {
        pending.push(piece.escaped);
        pendingChars += piece.escaped.length;
        if (pendingChars >= BODY_BUFFER_BYTES / 2) yield flush();
      }
      pending.push(suffix);
      yield flush();
      if (sent !== byteLength) throw unstable(byteLength, sent);
    },
  };
}

/** A small JSON body with nothing streamed (introspection requests). */
export function fixedJsonBody(value: unknown): StreamedJsonBody {
  const buf = Buffer.from(JSON.stringify(value), 'utf8');
  return {
    byteLength: buf.byteLength,
    promptChars: 0,
    async *chunks() {
      yield buf;
    },
  };
}

function unstable(expected: number, got: number): PromptSourceError {
  return new PromptSourceError(
    'KVC_PROMPT_SOURCE_UNSTABLE',
    `PromptSource.chunks() yielded different text on the second pass: body was measured at ${expected} bytes, sending reached ${got}`,
  );
}

interface EscapedPiece {
  /** JSON string-literal content (no quotes). */
  escaped: string;
  /** Code units of prompt text this piece carries. */
  chars: number;
}

/** The prompt as JSON-escaped slices, with surrogate pairs never split between slices. */
function* escapedPieces(source: PromptSource): Generator<EscapedPiece> {
  let carry = '';
  let iterable: Iterable<string>;
  try {
    iterable = source.chunks();
  } catch (err) {
    throw new PromptSourceError('KVC_PROMPT_SOURCE_FAILED', 'PromptSource.chunks() threw', { cause: err });
  }
  if (iterable === null || typeof iterable !== 'object' || typeof (iterable as Iterable<string>)[Symbol.iterator] !== 'function') {
    throw new PromptSourceError('KVC_PROMPT_SOURCE_FAILED', 'PromptSource.chunks() must return an iterable of strings');
  }
  const iterator = iterable[Symbol.iterator]();
  for (;;) {
    let step: IteratorResult<string>;
    try {
      step = iterator.next();
    } catch (err) {
      throw new PromptSourceError('KVC_PROMPT_SOURCE_FAILED', 'PromptSource.chunks() threw while iterating', { cause: err });
    }
    if (step.done === true) break;
    const chunk: unknown = step.value;
    if (typeof chunk !== 'string') {
      throw new PromptSourceError('KVC_PROMPT_SOURCE_FAILED', `PromptSource.chunks() yielded ${typeof chunk}, expected string`);
    }
    let text = carry + chunk;
    carry = '';
    if (text.length > 0 && isHighSurrogate(text.charCodeAt(text.length - 1))) {
      carry = text.slice(-1);
      text = text.slice(0, -1);
    }
    for (let i = 0; i < text.length; ) {
      let end = Math.min(i + SLICE_CHARS, text.length);
      if (end < text.length && isHighSurrogate(text.charCodeAt(end - 1))) end -= 1;
      const slice = text.slice(i, end);
      yield { escaped: escapeJsonString(slice), chars: slice.length };
      i = end;
    }
  }
  // A lone high surrogate at the very end: JSON.stringify writes it as \udXXX, which is still valid JSON.
  if (carry !== '') yield { escaped: escapeJsonString(carry), chars: carry.length };
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

function escapeJsonString(text: string): string {
  return JSON.stringify(text).slice(1, -1);
}
