/**
 * Turns the bytes of a 2xx completion response into generated text and facts, whichever form the server
 * chose: an SSE stream, or one JSON document (servers may answer a stream request with plain JSON, and a
 * JSON request with an error object). A JSON Content-Type is trusted; otherwise a body whose first non-blank
 * byte is `{` or `[` is JSON and anything else is SSE when SSE was labelled or asked for. Text is handed on as it arrives; nothing but the current line (SSE) or the bounded body
 * (JSON) is held.
 *
 * A stream is `malformed` when any event's data is neither JSON nor `[DONE]`, or when it carried nothing
 * recognisable at all; an `error` object (in a data line, or llama.cpp's `error:` line) makes it an error
 * response whatever the HTTP status said.
 */
import { Buffer } from 'node:buffer';
import { textsOf, finishReasonOf, usageOf, hasChoices, type Usage } from './completion-shape.js';
import { bound, errorFromJson, isRecord, type TargetErrorInfo } from './error-body.js';
import { createSseParser, type SseEvent, type SseParser } from './sse.js';

export interface CompletionFacts {
  finishReason?: string;
  usage?: Usage;
  /** The error the body carried (stream `error` event, or a JSON error object in a 2xx body). */
  error?: TargetErrorInfo;
  /** The error as the server wrote it (bounded): keeps codes and fields the message drops. */
  errorRaw?: string;
  /** Why the body could not be read as a completion, if it could not. */
  malformed?: string;
  /** The stream ended with `data: [DONE]`. */
  sawDone: boolean;
}

export interface CompletionReader {
  push(chunk: Uint8Array): void;
  end(): void;
  facts(): CompletionFacts;
}

type Mode = 'sse' | 'json';

export function createCompletionReader(opts: {
  contentType: string;
  /** Whether a stream was requested: decides an unlabelled body that does not start like JSON. */
  streamRequested: boolean;
  emit: (text: string) => void;
  /** Removes secrets from target text before any of it is kept (applied before bounding). */
  redact?: (text: string) => string;
}): CompletionReader {
  const redact = opts.redact ?? ((text: string) => text);
  const facts: CompletionFacts = { sawDone: false };
  const labelled = modeFromContentType(opts.contentType);
  // A JSON label is trusted; anything else is sniffed (servers label error JSON as text/event-stream too).
  let mode: Mode | undefined = labelled === 'json' ? 'json' : undefined;
  let sse: SseParser | undefined;
  let jsonParts: Buffer[] = [];
  let recognised = 0;
  let badEvents = 0;
  let firstBad: string | undefined;

  const setError = (info: TargetErrorInfo, raw: string): void => {
    if (facts.error !== undefined) return;
    facts.error = info;
    facts.errorRaw = bound(raw);
  };

  const onEvent = (ev: SseEvent): void => {
    const data = redact(ev.data).trim();
    // Empty data lines are keep-alives some proxies send; they carry nothing.
    if (data === '' && ev.event !== 'error') return;
    if (data === '[DONE]') {
      facts.sawDone = true;
      recognised++;
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(data);
    } catch {
      if (ev.event === 'error') {
        setError({ message: data === '' ? 'error event without data' : bound(data) }, data);
        recognised++;
        return;
      }
      badEvents++;
      firstBad ??= data.slice(0, 80);
      return;
    }
    if (!isRecord(value)) {
      badEvents++;
      firstBad ??= data.slice(0, 80);
      return;
    }
    const err = errorFromJson(value, ev.event !== 'error');
    if (err !== undefined || ev.event === 'error') {
      setError(err ?? { message: bound(data) }, data);
      recognised++;
      return;
    }
    readCompletionObject(value);
  };

  const readCompletionObject = (value: Record<string, unknown>): void => {
    const known = hasChoices(value) || value['usage'] !== undefined || value['timings'] !== undefined;
    if (known) recognised++;
    for (const text of textsOf(value)) opts.emit(text);
    const finish = finishReasonOf(value);
    if (finish !== undefined) facts.finishReason = finish;
    const usage = usageOf(value);
    if (usage !== undefined) facts.usage = usage;
  };

  const startMode = (chunk: Uint8Array): void => {
    const first = firstNonBlank(chunk);
    if (first === undefined) return;
    if (first === 0x7b /* { */ || first === 0x5b /* [ */) mode = 'json';
    else mode = labelled === 'sse' || opts.streamRequested ? 'sse' : 'json';
  };

  let undecided: Uint8Array[] = [];

  return {
    push(chunk) {
      let chunks: Uint8Array[] = [chunk];
      if (mode === undefined) {
        undecided.push(chunk);
        startMode(chunk);
        if (mode === undefined) return; // only whitespace so far
        chunks = undecided;
        undecided = [];
      }
      if (mode === 'sse') {
        sse ??= createSseParser(onEvent);
        for (const c of chunks) sse.push(c);
      } else {
        for (const c of chunks) jsonParts.push(Buffer.isBuffer(c) ? c : Buffer.from(c));
      }
    },
    end() {
      if (mode === 'sse') {
        sse?.end();
        if (badEvents > 0) facts.malformed = `${badEvents} stream event(s) were not JSON (first: ${JSON.stringify(firstBad)})`;
        else if (recognised === 0 && facts.error === undefined) facts.malformed = 'the stream carried no completion events';
        return;
      }
      const text = redact(Buffer.concat(jsonParts).toString('utf8'));
      jsonParts = [];
      if (text.trim() === '') {
        facts.malformed = 'empty response body';
        return;
      }
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        facts.malformed = `response body is not JSON (starts ${JSON.stringify(text.trim().slice(0, 40))})`;
        return;
      }
      if (!isRecord(value)) {
        facts.malformed = 'response body is JSON but not an object';
        return;
      }
      const err = errorFromJson(value, true);
      if (err !== undefined) {
        setError(err, text.trim());
        return;
      }
      if (!hasChoices(value)) {
        facts.malformed = 'response JSON has no `choices`';
        return;
      }
      const whole = textsOf(value).join('');
      if (whole !== '') opts.emit(whole);
      const finish = finishReasonOf(value);
      if (finish !== undefined) facts.finishReason = finish;
      const usage = usageOf(value);
      if (usage !== undefined) facts.usage = usage;
    },
    facts: () => facts,
  };
}

function modeFromContentType(contentType: string): Mode | undefined {
  const ct = contentType.toLowerCase();
  if (ct.includes('text/event-stream')) return 'sse';
  if (ct.includes('json')) return 'json';
  return undefined;
}

function firstNonBlank(chunk: Uint8Array): number | undefined {
  for (const byte of chunk) {
    if (byte !== 0x20 && byte !== 0x0a && byte !== 0x0d && byte !== 0x09) return byte;
  }
  return undefined;
}
