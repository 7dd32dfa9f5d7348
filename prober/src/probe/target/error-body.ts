/**
 * What a target said when it refused or failed, read from the shapes real servers use:
 * - OpenAI, recent vLLM, llama.cpp, the bundled engine: `{"error": {"message", "type", "code", ...}}`
 *   (llama.cpp adds `n_prompt_tokens` and `n_ctx`);
 * - older vLLM and SGLang: `{"object": "error", "message", "type", "code"}`;
 * - streaming errors wrapped once more: `{"error": {"object": "error", "message", ...}}`;
 * - FastAPI: `{"detail": "..."}` or `{"detail": [{"msg": ...}]}`; proxies: `{"error": "..."}`, plain text.
 * Text is bounded: an error body can echo the prompt, and evidence must stay small.
 */

export const ERROR_TEXT_LIMIT = 2048;

export interface TargetErrorInfo {
  /** The error's message (or the whole text when it is not JSON), at most ERROR_TEXT_LIMIT characters. */
  message: string;
  type?: string;
  /** The `code` field as text: "400", "context_length_exceeded", ... */
  code?: string;
  /** llama.cpp's exceed_context_size_error fields. */
  nPromptTokens?: number;
  nCtx?: number;
}

export function bound(text: string, limit = ERROR_TEXT_LIMIT): string {
  return text.length <= limit ? text : `${text.slice(0, limit)}…[${text.length - limit} more chars]`;
}

/** Reads an error body of a non-2xx response (JSON or not). */
export function parseErrorText(text: string): TargetErrorInfo {
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) {
    try {
      const info = errorFromJson(JSON.parse(trimmed), false);
      if (info !== undefined) return info;
    } catch {
      // Not JSON after all (or cut by the read bound): keep the text.
    }
  }
  return { message: bound(trimmed) };
}

/**
 * The error a parsed JSON value carries, if any. `strict` (for 2xx bodies and stream events) accepts only
 * explicit error markers (`error` key, `object: "error"`); otherwise `message`/`detail` count too.
 */
export function errorFromJson(value: unknown, strict: boolean): TargetErrorInfo | undefined {
  if (!isRecord(value)) return undefined;
  const err = value['error'];
  if (isRecord(err)) {
    // {"error": {"error": {...}}} happens behind proxies that wrap a wrapped error.
    const inner = isRecord(err['error']) ? err['error'] : err;
    return fromRecord(inner) ?? { message: bound(JSON.stringify(err)) };
  }
  if (typeof err === 'string' && err !== '') return { message: bound(err), ...codeAndType(value) };
  if (value['object'] === 'error') return fromRecord(value) ?? { message: bound(JSON.stringify(value)) };
  if (strict) return undefined;
  return fromRecord(value) ?? fromDetail(value['detail']);
}

function fromRecord(rec: Record<string, unknown>): TargetErrorInfo | undefined {
  const message = rec['message'] ?? rec['msg'];
  const detail = fromDetail(rec['detail']);
  if (typeof message !== 'string' && detail === undefined) return undefined;
  const info: TargetErrorInfo = { message: typeof message === 'string' ? bound(message) : (detail as TargetErrorInfo).message, ...codeAndType(rec) };
  const nPrompt = rec['n_prompt_tokens'];
  const nCtx = rec['n_ctx'];
  if (typeof nPrompt === 'number' && Number.isFinite(nPrompt)) info.nPromptTokens = nPrompt;
  if (typeof nCtx === 'number' && Number.isFinite(nCtx)) info.nCtx = nCtx;
  return info;
}

function fromDetail(detail: unknown): TargetErrorInfo | undefined {
  if (typeof detail === 'string' && detail !== '') return { message: bound(detail) };
  if (Array.isArray(detail) && detail.length > 0) {
    const msgs = detail.map((d) => (isRecord(d) && typeof d['msg'] === 'string' ? d['msg'] : JSON.stringify(d)));
    return { message: bound(msgs.join('; ')) };
  }
  return undefined;
}

function codeAndType(rec: Record<string, unknown>): { code?: string; type?: string } {
  const out: { code?: string; type?: string } = {};
  const code = rec['code'];
  if (typeof code === 'string' || typeof code === 'number') out.code = bound(String(code), 100);
  const type = rec['type'];
  if (typeof type === 'string') out.type = bound(type, 100);
  return out;
}

/** The HTTP-like status an error object names in its `code` (vLLM and SGLang put 400 there), if any. */
export function statusOfError(info: TargetErrorInfo): number | undefined {
  if (info.code === undefined || !/^\d{3}$/.test(info.code)) return undefined;
  const status = Number(info.code);
  return status >= 400 && status <= 599 ? status : undefined;
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
