import { describe, expect, it } from 'vitest';
import {
  BOS,
  PLACEHOLDER,
  TokenTextDecoder,
  countPromptTokens,
  decodeTokens,
  encodePrompt,
  renderChat,
} from '../../engine-under-test/src/tokenizer.js';

describe('tokenizer', () => {
  it('counts exactly: BOS plus one token per UTF-8 byte', () => {
    expect(countPromptTokens('')).toBe(1);
    expect(countPromptTokens('hello')).toBe(6);
    expect(countPromptTokens('é')).toBe(3); // 2 bytes
    expect(countPromptTokens('€')).toBe(4); // 3 bytes
    expect(countPromptTokens('😀')).toBe(5); // 4 bytes
    expect(countPromptTokens('a€😀')).toBe(1 + 1 + 3 + 4);
    const long = 'x'.repeat(100_000);
    expect(countPromptTokens(long)).toBe(100_001);
    expect(encodePrompt(long).length).toBe(100_001);
  });

  it('encodes as [BOS, ...bytes]', () => {
    expect(Array.from(encodePrompt('hé'))).toEqual([BOS, 0x68, 0xc3, 0xa9]);
  });

  it('renders chat with a fixed template whose token count is exact', () => {
    const messages = [
      { role: 'system' as const, content: 'be brief' },
      { role: 'user' as const, content: 'hi €' },
    ];
    const text = renderChat(messages);
    expect(text).toBe('<|system|>\nbe brief\n<|user|>\nhi €\n<|assistant|>\n');
    expect(encodePrompt(text).length).toBe(countPromptTokens(text));
    expect(countPromptTokens(text)).toBe(1 + Buffer.byteLength(text));
  });

  it('decodes incrementally without splitting a code point', () => {
    const d = new TokenTextDecoder();
    const bytes = Array.from(Buffer.from('a😀b', 'utf8'));
    const deltas = bytes.map((b) => d.push(b));
    expect(deltas).toEqual(['a', '', '', '', '😀', 'b']);
    expect(d.flush()).toBe('');
  });

  it('gives special tokens no text and turns invalid bytes into U+FFFD', () => {
    expect(decodeTokens([BOS, 0x68, 0x69, PLACEHOLDER])).toBe('hi');
    expect(decodeTokens([0xff, 0x41])).toBe('\ufffdA');
    const d = new TokenTextDecoder();
    expect(d.push(0xe2)).toBe('');
    expect(d.flush()).toBe('\ufffd'); // an incomplete code point at the end
  });

  it('round-trips arbitrary text', () => {
    const text = 'kvcanary-abc234 ünïcödé 漢字 🧪 \u0000 end';
    expect(decodeTokens(encodePrompt(text))).toBe(text);
  });
});
