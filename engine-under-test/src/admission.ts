/**
 * Admission: decides, before anything is allocated, whether a request can ever run here.
 * - prompt + max_tokens against the context limit (the model's maximum context length);
 * - prompt + max_tokens against the KV pool's capacity. The two limits are independent: the incident's
 *   pool held 681,280 tokens under a 1,048,576-token context limit, and a prompt between the two must be
 *   rejected, not squeezed through.
 * Rejections name the limit and the count, in the wording real engines use, so clients can recognise them.
 */

export type PromptKind = 'prompt' | 'messages';

export interface AdmissionLimits {
  contextTokens: number;
  poolTokens: number;
}

export interface AdmissionInput {
  promptTokens: number;
  maxTokens: number;
  /** Whether the prompt came as chat messages or a completion prompt (only changes the wording). */
  promptKind: PromptKind;
}

export type RejectionCode = 'context_length_exceeded' | 'kv_pool_capacity_exceeded';

export interface Rejection {
  code: RejectionCode;
  message: string;
  param: PromptKind;
  limit: number;
  count: number;
}

export function checkAdmission(input: AdmissionInput, limits: AdmissionLimits): Rejection | undefined {
  const { promptTokens, maxTokens, promptKind } = input;
  const requested = promptTokens + maxTokens;
  if (requested > limits.contextTokens) {
    return {
      code: 'context_length_exceeded',
      param: promptKind,
      limit: limits.contextTokens,
      count: requested,
      message:
        `This model's maximum context length is ${limits.contextTokens} tokens. However, you requested ` +
        `${requested} tokens (${promptTokens} in the ${promptKind}, ${maxTokens} in the completion). ` +
        `Please reduce the length of the ${promptKind} or completion.`,
    };
  }
  if (requested > limits.poolTokens) {
    return {
      code: 'kv_pool_capacity_exceeded',
      param: promptKind,
      limit: limits.poolTokens,
      count: promptTokens > limits.poolTokens ? promptTokens : requested,
      message:
        promptTokens > limits.poolTokens
          ? `The prompt (${promptTokens} tokens) exceeds the KV cache pool capacity (${limits.poolTokens} tokens).`
          : `The prompt (${promptTokens} tokens) plus max_tokens (${maxTokens}) exceeds the KV cache pool capacity (${limits.poolTokens} tokens).`,
    };
  }
  return undefined;
}
