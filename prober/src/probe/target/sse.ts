/**
 * A server-sent-events parser for bytes as they arrive, after the WHATWG event-stream rules, plus what
 * real inference servers actually send:
 * - lines end in CRLF, LF or CR, and a CRLF may be split across two network chunks;
 * - a multi-byte UTF-8 character may be split anywhere (a streaming TextDecoder holds the partial bytes);
 * - `:` comments (keep-alives) are ignored; several `data:` lines join with "\n";
 * - llama.cpp reports a failure mid-stream as a non-standard `error: {...}` line, which the spec would
 *   silently drop: it is surfaced as an event named "error";
 * - an event still open when the body ends (no trailing blank line) is dispatched, not discarded: a server
 *   that forgets the final blank line has still said what it said.
 * Cost is linear in the input: a long line arriving in many chunks is kept as pieces, not re-scanned.
 */

export interface SseEvent {
  /** The `event:` field, or "message"; "error" for llama.cpp's `error:` lines. */
  event: string;
  data: string;
}

export interface SseParser {
  push(bytes: Uint8Array): void;
  /** The body ended: flushes a partial character, a partial line and an open event. */
  end(): void;
}

export function createSseParser(onEvent: (event: SseEvent) => void): SseParser {
  const decoder = new TextDecoder('utf-8');
  // Per parser: a shared global regex would carry lastIndex across parsers fed from each other's callbacks.
  const LINE_END = /[\r\n]/g;
  let partial: string[] = [];
  let skipLeadingLf = false;
  let eventName = '';
  let data: string[] = [];
  let hasData = false;

  const dispatch = (): void => {
    if (hasData) {
      const event = { event: eventName === '' ? 'message' : eventName, data: data.join('\n') };
      data = [];
      hasData = false;
      eventName = '';
      onEvent(event);
    } else {
      eventName = '';
    }
  };

  const line = (text: string): void => {
    if (text === '') {
      dispatch();
      return;
    }
    if (text.charCodeAt(0) === 0x3a /* ':' */) return;
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.charCodeAt(0) === 0x20) value = value.slice(1);
    switch (field) {
      case 'data':
        data.push(value);
        hasData = true;
        break;
      case 'event':
        eventName = value;
        break;
      case 'error':
        eventName = 'error';
        data.push(value);
        hasData = true;
        break;
      default:
        // id, retry and unknown fields carry nothing we use.
        break;
    }
  };

  const feed = (text: string): void => {
    let start = 0;
    if (skipLeadingLf && text.length > 0) {
      if (text.charCodeAt(0) === 0x0a) start = 1;
      skipLeadingLf = false;
    }
    LINE_END.lastIndex = start;
    for (;;) {
      const match = LINE_END.exec(text);
      if (match === null) break;
      const at = match.index;
      const piece = text.slice(start, at);
      let whole: string;
      if (partial.length > 0) {
        partial.push(piece);
        whole = partial.join('');
        partial = [];
      } else {
        whole = piece;
      }
      start = at + 1;
      if (text.charCodeAt(at) === 0x0d) {
        if (start < text.length) {
          if (text.charCodeAt(start) === 0x0a) start += 1;
        } else {
          skipLeadingLf = true;
        }
      }
      LINE_END.lastIndex = start;
      line(whole);
    }
    if (start < text.length) partial.push(text.slice(start));
  };

  return {
    push(bytes) {
      const text = decoder.decode(bytes, { stream: true });
      if (text.length > 0) feed(text);
    },
    end() {
      const rest = decoder.decode();
      if (rest.length > 0) feed(rest);
      if (partial.length > 0) {
        const whole = partial.join('');
        partial = [];
        line(whole);
      }
      dispatch();
    },
  };
}
