/**
 * GET /metrics, written metric by metric.
 *
 * prom-client's `registry.metrics()` asks every metric for its values at once (one object per exposed line,
 * with its labels), then joins every metric's text into one string: at 50 targets running every scenario
 * that is about 2.5 MB of text and some 40,000 value objects alive together, a few MiB of heap that V8 keeps
 * committed once it has grown for them, and Prometheus asks every 30 s. Here one metric's values and text
 * are alive at a time and go out as a chunk of a chunked response, with the socket's backpressure respected.
 * The bytes are the same as `registry.metrics()` gives (test/service/metrics-exposition.test.ts).
 */
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { Registry } from 'prom-client';

/** The exposition in chunks, one a metric: joined, exactly `registry.metrics()` (text format 0.0.4). */
export async function* expositionChunks(registry: Registry): AsyncGenerator<string> {
  if (registry.contentType !== Registry.PROMETHEUS_CONTENT_TYPE) {
    // OpenMetrics renames counters while it formats them; kvcanary's registry never uses it.
    yield await registry.metrics();
    return;
  }
  const names = registry.getMetricsAsArray().map((m) => m.name);
  for (let i = 0; i < names.length; i++) {
    const text = await registry.getSingleMetricAsString(names[i]!);
    yield i === 0 ? text : `\n\n${text}`;
  }
  yield '\n';
}

/** Waits for the socket to take more, or to go away; the loser's listener is removed (not left per chunk). */
async function drainedOrClosed(res: ServerResponse): Promise<void> {
  const ac = new AbortController();
  try {
    await Promise.race([once(res, 'drain', { signal: ac.signal }), once(res, 'close', { signal: ac.signal })]);
  } finally {
    ac.abort();
  }
}

/**
 * Answers with the exposition, chunked, under `headers` and the registry's content type. A metric that
 * fails before the first chunk rejects before anything is written (the caller can still answer 500); one
 * that fails later rejects with the response started (the caller ends the connection, a failed scrape).
 */
export async function writeExposition(res: ServerResponse, registry: Registry, headers: Readonly<Record<string, string>>, headOnly: boolean): Promise<void> {
  const head = { ...headers, 'content-type': registry.contentType };
  if (headOnly) {
    res.writeHead(200, head).end();
    return;
  }
  const chunks = expositionChunks(registry);
  let next = await chunks.next();
  res.writeHead(200, head);
  while (next.done !== true) {
    if (res.destroyed) {
      await chunks.return(undefined);
      return;
    }
    if (!res.write(next.value)) await drainedOrClosed(res);
    next = await chunks.next();
  }
  res.end();
}
