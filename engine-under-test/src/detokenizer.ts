/**
 * Engine tokens -> text deltas, with stop strings. Like vLLM's output processor: the engine generates
 * tokens, this layer decodes them incrementally and, when a stop string appears, cuts the text before it
 * and aborts the request (which frees its pages). Text that might be the start of a stop string is held
 * back until it is known not to be, so a streamed response never shows part of a stop string.
 */
import type { Rejection } from './admission.js';
import type { RequestHandle } from './engine.js';
import { TokenTextDecoder } from './tokenizer.js';

export class StopMatcher {
  private held = '';
  private readonly longest: number;

  constructor(private readonly stops: readonly string[]) {
    this.longest = stops.reduce((m, s) => Math.max(m, s.length), 0);
  }

  /** Feeds decoded text; returns what can be emitted now and whether a stop string was reached. */
  push(text: string): { text: string; stopped: boolean } {
    if (this.stops.length === 0) return { text, stopped: false };
    const buffer = this.held + text;
    let cut = -1;
    for (const s of this.stops) {
      const i = buffer.indexOf(s);
      if (i >= 0 && (cut < 0 || i < cut)) cut = i;
    }
    if (cut >= 0) {
      this.held = '';
      return { text: buffer.slice(0, cut), stopped: true };
    }
    // Hold back the longest suffix that is a proper prefix of some stop string.
    let keep = 0;
    for (let k = Math.min(this.longest - 1, buffer.length); k > 0; k--) {
      const suffix = buffer.slice(buffer.length - k);
      if (this.stops.some((s) => s.startsWith(suffix))) {
        keep = k;
        break;
      }
    }
    this.held = buffer.slice(buffer.length - keep);
    return { text: buffer.slice(0, buffer.length - keep), stopped: false };
  }

  /** Text held back at the end of generation (it did not turn into a stop string). */
  flush(): string {
    const rest = this.held;
    this.held = '';
    return rest;
  }
}

export type FinishReason = 'length' | 'stop';

export interface TextEnd {
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens served from the prefix cache; undefined when the engine has none. */
  cachedTokens: number | undefined;
}

export class GenerationFailed extends Error {
  constructor(
    readonly code: 'ENGINE_REQUEST_FAILED' | 'ENGINE_REQUEST_ABORTED' | 'ENGINE_REQUEST_REJECTED',
    message: string,
    /** Set for ENGINE_REQUEST_REJECTED: what admission refused, with the limit and the count. */
    readonly rejection?: Rejection,
  ) {
    super(message);
    this.name = 'GenerationFailed';
  }
}

/**
 * Yields text deltas (never empty) and returns how generation ended. Throws GenerationFailed when the
 * engine failed or aborted the request (e.g. the engine is shutting down).
 */
export async function* textStream(handle: RequestHandle, stops: readonly string[]): AsyncGenerator<string, TextEnd> {
  const decoder = new TokenTextDecoder();
  const matcher = new StopMatcher(stops);
  let completionTokens = 0;
  for await (const event of handle.events) {
    if (event.type === 'token') {
      completionTokens++;
      const { text, stopped } = matcher.push(decoder.push(event.token));
      if (text.length > 0) yield text;
      if (stopped) {
        handle.abort();
        return { finishReason: 'stop', promptTokens: handle.promptTokens, completionTokens, cachedTokens: handle.cachedTokens };
      }
      continue;
    }
    if (event.reason === 'length') {
      const { text, stopped } = matcher.push(decoder.flush());
      const rest = stopped ? text : text + matcher.flush();
      if (rest.length > 0) yield rest;
      return {
        finishReason: stopped ? 'stop' : 'length',
        promptTokens: event.promptTokens,
        completionTokens: event.completionTokens,
        cachedTokens: event.cachedTokens ?? handle.cachedTokens,
      };
    }
    if (event.reason === 'rejected' && event.rejection !== undefined) {
      throw new GenerationFailed('ENGINE_REQUEST_REJECTED', event.rejection.message, event.rejection);
    }
    throw new GenerationFailed(
      event.reason === 'error' ? 'ENGINE_REQUEST_FAILED' : 'ENGINE_REQUEST_ABORTED',
      event.reason === 'error' ? `generation failed: ${event.message ?? 'unknown error'}` : 'the request was aborted by the engine',
    );
  }
  throw new GenerationFailed('ENGINE_REQUEST_ABORTED', 'the request ended without a result');
}
