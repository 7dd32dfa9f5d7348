import { describe, expect, it } from 'vitest';
import { createSseParser, type SseEvent } from '../../prober/src/probe/target/sse.js';

const enc = new TextEncoder();

function parseAll(chunks: Array<Uint8Array | string>): SseEvent[] {
  const events: SseEvent[] = [];
  const parser = createSseParser((e) => events.push(e));
  for (const c of chunks) parser.push(typeof c === 'string' ? enc.encode(c) : c);
  parser.end();
  return events;
}

describe('SSE parser', () => {
  it('reads LF, CRLF and CR line endings alike', () => {
    for (const nl of ['\n', '\r\n', '\r']) {
      const body = `data: {"a":1}${nl}${nl}data: [DONE]${nl}${nl}`;
      expect(parseAll([body])).toEqual([
        { event: 'message', data: '{"a":1}' },
        { event: 'message', data: '[DONE]' },
      ]);
    }
  });

  it('ignores comments and id/retry fields, joins multi-line data with \\n, keeps event names', () => {
    const body = ': keep-alive\n\nid: 7\nretry: 100\nevent: delta\ndata: line one\ndata:line two\n\n';
    expect(parseAll([body])).toEqual([{ event: 'delta', data: 'line one\nline two' }]);
  });

  it('dispatches an event left open at end of body (no trailing blank line)', () => {
    expect(parseAll(['data: {"x":1}\n\ndata: {"x":2}'])).toEqual([
      { event: 'message', data: '{"x":1}' },
      { event: 'message', data: '{"x":2}' },
    ]);
  });

  it("surfaces llama.cpp's non-standard `error:` line as an error event", () => {
    const body = 'data: {"choices":[]}\n\nerror: {"code":500,"message":"boom","type":"server_error"}\n\n';
    const events = parseAll([body]);
    expect(events[1]).toEqual({ event: 'error', data: '{"code":500,"message":"boom","type":"server_error"}' });
  });

  it('gives the same events however the bytes are split, including inside CRLF and inside multi-byte characters', () => {
    const body = enc.encode('data: {"t":"é漢😀"}\r\n\r\n: c\r\ndata: a\r\ndata: 😀b\r\n\r\ndata: [DONE]\r\n\r\n');
    const expected = parseAll([body]);
    expect(expected).toEqual([
      { event: 'message', data: '{"t":"é漢😀"}' },
      { event: 'message', data: 'a\n😀b' },
      { event: 'message', data: '[DONE]' },
    ]);
    for (let i = 0; i <= body.length; i++) {
      expect(parseAll([body.subarray(0, i), body.subarray(i)])).toEqual(expected);
    }
    // And one byte at a time.
    expect(parseAll(Array.from(body, (b) => Uint8Array.of(b)))).toEqual(expected);
  });

  it('treats a lone CR at a chunk end followed by LF as one line end, not two', () => {
    // Two line ends would read as a blank line and dispatch "a" early, splitting it from "b".
    expect(parseAll(['data: a\r', '\ndata: b\n\n'])).toEqual([{ event: 'message', data: 'a\nb' }]);
  });

  it('keeps a long line arriving in many pieces intact', () => {
    const long = 'x'.repeat(200_000);
    const body = `data: ${long}\n\n`;
    const pieces: string[] = [];
    for (let i = 0; i < body.length; i += 997) pieces.push(body.slice(i, i + 997));
    expect(parseAll(pieces)).toEqual([{ event: 'message', data: long }]);
  });
});
