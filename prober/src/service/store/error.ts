/** The evidence store's typed error: a stable code and the file or run it is about. */
export type StoreErrorCode = 'KVC_STORE_OPEN' | 'KVC_STORE_SCHEMA_NEWER' | 'KVC_STORE_NOT_KVCANARY' | 'KVC_STORE_SCHEMA_OLDER' | 'KVC_STORE_INVALID_RUN' | 'KVC_STORE_DUPLICATE_RUN' | 'KVC_STORE_CLOSED';

export class StoreError extends Error {
  override readonly name = 'StoreError';
  constructor(readonly code: StoreErrorCode, message: string, opts: { cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
  }
}

