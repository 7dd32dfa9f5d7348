/**
 * A Scanner that hands every response to the prober's real scanner and keeps a bounded copy of the text
 * it was given, per prober request id. The benchmark needs that copy to find which of the engine's
 * requests (seen by the tap) each prober request was; the prober's judgement is untouched.
 */
import type { ReaderIdentity, Scanner } from '../prober/src/probe/scanner.js';

export interface ScannedResponse {
  requestId: string;
  role: string;
  text: string;
}

export interface RecordingScanner extends Scanner {
  /** Responses scanned since the last take. */
  take(): ScannedResponse[];
}

export function recordingScanner(inner: Scanner, maxTextChars = 65_536): RecordingScanner {
  let seen: ScannedResponse[] = [];
  return {
    open(reader: ReaderIdentity) {
      const session = inner.open(reader);
      const rec: ScannedResponse = { requestId: reader.requestId, role: reader.role, text: '' };
      seen.push(rec);
      return {
        push(chunk: string) {
          if (rec.text.length < maxTextChars) rec.text = (rec.text + chunk).slice(0, maxTextChars);
          session.push(chunk);
        },
        end: () => session.end(),
        stats: () => session.stats(),
      };
    },
    take() {
      const out = seen;
      seen = [];
      return out;
    },
  };
}
