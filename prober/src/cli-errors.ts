/**
 * The CLI's one error boundary. Every command runs inside it:
 * - bad usage or config (UsageError, ConfigError, a store that is not usable, an address that cannot be
 *   listened on) → exit 64, the message (which names the flag or field, never a value that could be a key);
 * - anything else → exit 70 with one line; the stack only with --debug or KVCANARY_DEBUG=1.
 * Messages pass through oneLine/forTerminal and the bearer scrub before they are printed.
 */
import { EXIT, type ExitCode } from './exit-codes.js';
import { scrubSecrets } from './probe/redact.js';
import { forTerminal, oneLine } from './terminal-text.js';

export interface Boundary {
  command: string;
  debug: boolean;
  /** Help text appended after a usage error (the command's usage). */
  usage?: string;
  write: (text: string) => void;
}

/** Errors that are the operator's to fix: their message is the whole story. */
export function isUsageProblem(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const e = err as Error & { code?: unknown; syscall?: unknown };
  if (e.name === 'UsageError' || e.name === 'ConfigError') return true;
  if (e.name === 'StoreError' && e.code !== 'KVC_STORE_INVALID_RUN' && e.code !== 'KVC_STORE_DUPLICATE_RUN' && e.code !== 'KVC_STORE_CLOSED') return true;
  return e.syscall === 'listen' || (typeof e.code === 'string' && ['EADDRINUSE', 'EADDRNOTAVAIL', 'EACCES', 'ERR_SOCKET_BAD_PORT'].includes(e.code));
}

/** One line for an error the operator can fix. */
export function usageLine(err: Error): string {
  const e = err as Error & { code?: unknown; address?: unknown; port?: unknown };
  if (e.code === 'EADDRINUSE') return `--listen/listen: address ${String(e.address ?? '')}:${String(e.port ?? '')} is already in use`;
  if (e.code === 'EADDRNOTAVAIL') return `--listen/listen: address ${String(e.address ?? '')} is not local to this machine`;
  if (e.code === 'EACCES' && (e as { syscall?: unknown }).syscall === 'listen') return `--listen/listen: not permitted to listen on port ${String(e.port ?? '')}`;
  if (e.code === 'ERR_SOCKET_BAD_PORT') return '--listen/listen: port must be 0-65535';
  return e.message;
}

export function debugEnabled(env: Record<string, string | undefined> = process.env): boolean {
  const v = env['KVCANARY_DEBUG'];
  return v !== undefined && v !== '' && v !== '0' && v.toLowerCase() !== 'false';
}

/** Runs a command; whatever it throws becomes exit 64 or 70 and one line on stderr. */
export async function withBoundary(b: Boundary, run: () => Promise<number>): Promise<number> {
  try {
    return await run();
  } catch (err) {
    return report(b, err);
  }
}

export function report(b: Boundary, err: unknown): ExitCode {
  const safe = (s: string): string => forTerminal(scrubSecrets(s, []));
  if (isUsageProblem(err)) {
    const lines = safe(usageLine(err as Error)).split('\n');
    // A ConfigError lists every problem, one per line, each naming its field; anything else is one line.
    const message = (err as Error).name === 'ConfigError' ? lines.join('\n') : oneLine(lines.join(' '));
    b.write(`kvcanary ${b.command}: ${message}\n${b.usage !== undefined && (err as Error).name === 'UsageError' ? `\n${b.usage}\n` : ''}`);
    return EXIT.usage;
  }
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  b.write(`kvcanary ${b.command}: internal error: ${oneLine(safe(message)).slice(0, 300)}${b.debug ? '' : ' (KVCANARY_DEBUG=1 or --debug shows the stack)'}\n`);
  if (b.debug && err instanceof Error && err.stack !== undefined) b.write(safe(err.stack) + '\n');
  return EXIT.internal;
}
