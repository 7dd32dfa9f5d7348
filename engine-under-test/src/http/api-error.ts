/**
 * Errors answered to clients, in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
 * Every 4xx names what was wrong; the message is safe to show (no request bodies, no keys).
 */

export type ApiErrorType = 'invalid_request_error' | 'not_found_error' | 'server_error' | 'overloaded_error';

export class ApiError extends Error {
  readonly status: number;
  readonly type: ApiErrorType;
  readonly code: string | null;
  readonly param: string | null;
  /** Extra response headers (e.g. Allow on 405). */
  readonly headers: Record<string, string>;

  constructor(
    status: number,
    message: string,
    options: { type?: ApiErrorType; code?: string | null; param?: string | null; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.type = options.type ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
    this.code = options.code ?? null;
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
  }

  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export function invalidParam(param: string, message: string, code = 'invalid_value'): ApiError {
  return new ApiError(400, message, { param, code });
}
