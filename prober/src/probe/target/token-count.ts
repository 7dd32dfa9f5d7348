/**
 * Reads the token count out of a /tokenize response as it streams, without parsing it. Tokenizing a
 * million-token prompt returns a million-element `tokens` array (several MB of JSON); all we need is its
 * length, or vLLM's `count` field. A byte-level scanner over the JSON structure counts the elements of the
 * top-level `tokens` array (numbers, or llama.cpp's `{id, piece}` objects with `with_pieces`) and reads a
 * top-level `count`. Structural bytes are ASCII and never occur inside a UTF-8 multi-byte sequence, so
 * scanning bytes is exact. Memory is constant whatever the response size.
 */

export interface TokenCountScanner {
  push(chunk: Uint8Array): void;
  /** The count, or undefined when the body was not a complete JSON object with `count` or `tokens`. */
  result(): number | undefined;
}

const MAX_KEY = 64;

export function createTokenCountScanner(): TokenCountScanner {
  let depth = 0;
  let inString = false;
  let escaped = false;
  let sawRoot = false;
  let closedRoot = false;
  let broken = false;
  // Depth-1 bookkeeping: are we reading a key, which key owns the current value.
  let expectKey = false;
  let keyBytes: number[] = [];
  let readingKey = false;
  let currentKey = '';
  // `count` value digits.
  let countDigits = '';
  let readingCount = false;
  let count: number | undefined;
  // `tokens` array.
  let inTokens = false;
  let tokensElements = 0;
  let tokensPending = false; // saw content since the last comma
  let tokens: number | undefined;

  /** Ends the `count` value at a delimiter; whitespace before the first digit does not end it. */
  const finishCount = (delimiter: boolean): void => {
    if (readingCount && (delimiter || countDigits !== '')) {
      readingCount = false;
      const n = Number(countDigits);
      if (countDigits !== '' && Number.isInteger(n) && n >= 0) count = n;
    }
  };

  const step = (b: number): void => {
    if (inString) {
      if (escaped) escaped = false;
      else if (b === 0x5c /* \ */) escaped = true;
      else if (b === 0x22 /* " */) {
        inString = false;
        if (readingKey) {
          readingKey = false;
          currentKey = String.fromCharCode(...keyBytes);
        }
      } else if (readingKey && keyBytes.length < MAX_KEY) keyBytes.push(b);
      return;
    }
    if (b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09) {
      finishCount(false);
      return;
    }
    if (closedRoot) {
      broken = true; // trailing garbage after the root object
      return;
    }
    if (inTokens && depth === 2 && b !== 0x5d /* ] */ && b !== 0x2c /* , */) tokensPending = true;
    switch (b) {
      case 0x22: // "
        inString = true;
        if (depth === 1 && expectKey) {
          readingKey = true;
          keyBytes = [];
        }
        return;
      case 0x7b: // {
      case 0x5b: // [
        if (depth === 0) {
          if (b !== 0x7b) broken = true;
          sawRoot = true;
          expectKey = true;
        } else if (depth === 1 && currentKey === 'tokens' && b === 0x5b) {
          inTokens = true;
          tokensElements = 0;
          tokensPending = false;
        }
        depth++;
        return;
      case 0x7d: // }
      case 0x5d: // ]
        finishCount(true);
        if (inTokens && depth === 2 && b === 0x5d) {
          if (tokensPending) tokensElements++;
          tokens = tokensElements;
          inTokens = false;
        }
        depth--;
        if (depth < 0) broken = true;
        if (depth === 0) closedRoot = true;
        return;
      case 0x3a: // :
        if (depth === 1) {
          expectKey = false;
          if (currentKey === 'count') {
            readingCount = true;
            countDigits = '';
          }
        }
        return;
      case 0x2c: // ,
        finishCount(true);
        if (depth === 1) {
          expectKey = true;
          currentKey = '';
        } else if (inTokens && depth === 2) {
          if (tokensPending) tokensElements++;
          tokensPending = false;
        }
        return;
      default:
        if (readingCount && countDigits.length < 20) countDigits += String.fromCharCode(b);
    }
  };

  return {
    push(chunk) {
      if (broken) return;
      for (let i = 0; i < chunk.length; i++) step(chunk[i] as number);
    },
    result() {
      if (broken || !sawRoot || !closedRoot) return undefined;
      return count ?? tokens;
    },
  };
}
