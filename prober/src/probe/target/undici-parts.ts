/**
 * The two parts of undici the target client uses (its connection-pooling `Agent` and the `request` API),
 * loaded without the rest of the package.
 *
 * `import 'undici'` runs its index, which loads every part at once: fetch, WebSocket, EventSource, the
 * cache stores, mocks, interceptors and proxy agents. In a `serve` process that was about 21 MiB of RSS;
 * these two files and what they need are about 11 (measured by importing each way into a bare Node 20
 * process after a full GC). undici has no `exports` map, so these are files of the published package, and
 * the lockfile pins its version; test/prober/undici-parts.test.ts fails if an upgrade moves them.
 */
import { createRequire } from 'node:module';
import type { Agent as UndiciAgent, Dispatcher } from 'undici';

const load = createRequire(import.meta.url);

export const Agent = load('undici/lib/dispatcher/agent.js') as typeof UndiciAgent;

const dispatcherRequest = load('undici/lib/api/api-request.js') as (this: Dispatcher, opts: Dispatcher.RequestOptions) => Promise<Dispatcher.ResponseData>;

/** undici's `request(url, { dispatcher, ... })`, on the given dispatcher (never the global one). */
export function request(url: string, opts: Omit<Dispatcher.RequestOptions, 'origin' | 'path'> & { dispatcher: Dispatcher }): Promise<Dispatcher.ResponseData> {
  const { dispatcher, ...rest } = opts;
  const u = new URL(url);
  return dispatcherRequest.call(dispatcher, { ...rest, origin: u.origin, path: `${u.pathname}${u.search}` });
}
