/**
 * Maps what undici and the socket layer throw to the transport classes a scenario reasons about. A fault
 * of the target is data: refused (could not connect at all: refused, DNS, TLS), reset (the exchange broke
 * after it started), timeout, malformed (the peer did not speak HTTP). Anything unrecognised is a reset:
 * the exchange did not complete and nothing more specific can be said; `detail` keeps the code for humans.
 */
import type { TransportClass } from '../result.js';

const REFUSED = new Set([
  'ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EAI_FAIL', 'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN',
  'ENETDOWN', 'EADDRNOTAVAIL', 'ERR_TLS_CERT_ALTNAME_INVALID', 'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'CERT_HAS_EXPIRED', 'ERR_SSL_WRONG_VERSION_NUMBER',
]);
const TIMEOUT = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);
const TOO_LARGE = new Set(['UND_ERR_HEADERS_OVERFLOW', 'UND_ERR_RES_EXCEEDED_MAX_SIZE']);

export interface TransportFault {
  transport: TransportClass;
  /** The error's code (and a short message), for humans; never carries request data. */
  detail: string;
}

export function classifyFault(err: unknown): TransportFault {
  const code = codeOf(err);
  const detail = describeFault(err, code);
  if (code !== undefined) {
    if (REFUSED.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_')) return { transport: 'refused', detail };
    if (TIMEOUT.has(code)) return { transport: 'timeout', detail };
    if (TOO_LARGE.has(code)) return { transport: 'too-large', detail };
    // llhttp parse errors: the peer answered with something that is not HTTP.
    if (code.startsWith('HPE_')) return { transport: 'malformed', detail };
  }
  return { transport: 'reset', detail };
}

/** The first `code` along the cause chain (undici sometimes wraps the socket error). */
function codeOf(err: unknown): string | undefined {
  let cur: unknown = err;
  for (let depth = 0; depth < 5 && typeof cur === 'object' && cur !== null; depth++) {
    const code = (cur as { code?: unknown }).code;
    if (typeof code === 'string' && code !== '') return code;
    cur = (cur as { cause?: unknown }).cause;
  }
  return undefined;
}

function describeFault(err: unknown, code: string | undefined): string {
  const message = err instanceof Error ? err.message : String(err);
  const short = message.length > 200 ? `${message.slice(0, 200)}…` : message;
  return code === undefined ? short : `${code}: ${short}`;
}
