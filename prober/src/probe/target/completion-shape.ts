/**
 * Reading generated text, finish reason and usage out of OpenAI-compatible JSON, streamed or not, as
 * vLLM, SGLang, llama.cpp and the bundled engine write it. Every piece of model-written text counts,
 * because the scanner must see all of it: completion `text`, chat `content` (string or parts),
 * `reasoning_content` / `reasoning` (reasoning models answer there first), refusals and tool-call
 * arguments. Text from every choice is taken, in order.
 */
import { isRecord } from './error-body.js';

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens served from a prefix cache, where the server reports it. */
  cachedTokens?: number;
}

/** Generated text in one chunk or response, in emission order. */
export function textsOf(obj: Record<string, unknown>): string[] {
  const out: string[] = [];
  const choices = obj['choices'];
  if (!Array.isArray(choices)) return out;
  for (const choice of choices) {
    if (!isRecord(choice)) continue;
    pushString(out, choice['text']);
    for (const key of ['delta', 'message'] as const) {
      const msg = choice[key];
      if (!isRecord(msg)) continue;
      pushString(out, msg['reasoning_content']);
      pushString(out, msg['reasoning']);
      pushContent(out, msg['content']);
      pushString(out, msg['refusal']);
      const calls = msg['tool_calls'];
      if (Array.isArray(calls)) {
        for (const call of calls) {
          if (isRecord(call) && isRecord(call['function'])) pushString(out, call['function']['arguments']);
        }
      }
    }
  }
  return out;
}

/** True when the value looks like a completion (chunk): it has a `choices` array. */
export function hasChoices(obj: Record<string, unknown>): boolean {
  return Array.isArray(obj['choices']);
}

export function finishReasonOf(obj: Record<string, unknown>): string | undefined {
  const choices = obj['choices'];
  if (!Array.isArray(choices)) return undefined;
  for (const choice of choices) {
    if (!isRecord(choice)) continue;
    const reason = choice['finish_reason'];
    if (typeof reason === 'string' && reason !== '') return reason.slice(0, 64);
    // SGLang has used {"type": "abort", "message": ...} objects here.
    if (isRecord(reason) && typeof reason['type'] === 'string') return reason['type'].slice(0, 64);
  }
  return undefined;
}

export function usageOf(obj: Record<string, unknown>): Usage | undefined {
  const usage = obj['usage'];
  if (isRecord(usage)) {
    const prompt = count(usage['prompt_tokens']);
    const completion = count(usage['completion_tokens']);
    if (prompt !== undefined && completion !== undefined) {
      const out: Usage = { promptTokens: prompt, completionTokens: completion };
      const details = usage['prompt_tokens_details'];
      const cached = isRecord(details) ? count(details['cached_tokens']) : undefined;
      const timingsCached = cachedFromTimings(obj['timings']);
      if (cached !== undefined) out.cachedTokens = cached;
      else if (timingsCached !== undefined) out.cachedTokens = timingsCached;
      return out;
    }
  }
  // llama.cpp's `timings` (prompt_n excludes the cache_n tokens it reused).
  const timings = obj['timings'];
  if (isRecord(timings)) {
    const promptN = count(timings['prompt_n']);
    const cacheN = count(timings['cache_n']);
    const predicted = count(timings['predicted_n']);
    if (promptN !== undefined && predicted !== undefined) {
      const out: Usage = { promptTokens: promptN + (cacheN ?? 0), completionTokens: predicted };
      if (cacheN !== undefined) out.cachedTokens = cacheN;
      return out;
    }
  }
  return undefined;
}

function cachedFromTimings(timings: unknown): number | undefined {
  return isRecord(timings) ? count(timings['cache_n']) : undefined;
}

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}

function pushString(out: string[], value: unknown): void {
  if (typeof value === 'string' && value !== '') out.push(value);
}

function pushContent(out: string[], content: unknown): void {
  if (typeof content === 'string') {
    pushString(out, content);
  } else if (Array.isArray(content)) {
    for (const part of content) {
      if (isRecord(part)) pushString(out, part['text']);
    }
  }
}
