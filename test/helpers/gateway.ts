/**
 * A gateway in front of an OpenAI-compatible upstream (node:http, 127.0.0.1, port 0), for tests of evasive
 * endpoints: it forwards every request to the upstream and streams the answer back, and can
 * - `delayMs: [lo, hi]`: hold each completion request a uniform random time before forwarding it (a slow,
 *   noisy front: queueing, auth, routing), so the first token's time carries the upstream's cache saving
 *   inside a larger delay;
 * - `usage: 'zero-cached'`: rewrite `usage.prompt_tokens_details.cached_tokens` to 0 (a gateway that zeroes
 *   the detail, vLLM dialect), or `'drop-details'`: remove `prompt_tokens_details` (and llama.cpp's
 *   `timings`) altogether.
 * Streams are rewritten event by event (each `data:` line is JSON or `[DONE]`). Nothing here knows what the
 * prober expects: the upstream really caches, and the gateway only does what real gateways do.
 */
import { request as httpRequest } from 'node:http';
import { listen, type FakeServer } from './fake-endpoints.js';

export interface GatewayOptions {
  upstream: string;
  delayMs?: [number, number];
  usage?: 'pass' | 'zero-cached' | 'drop-details';
}

export async function startGateway(opts: GatewayOptions): Promise<FakeServer> {
  const up = new URL(opts.upstream);
  const rewrite = (value: unknown): unknown => {
    if (opts.usage === undefined || opts.usage === 'pass' || typeof value !== 'object' || value === null) return value;
    const usage = (value as { usage?: Record<string, unknown> }).usage;
    if (usage === undefined || usage === null) return value;
    if (opts.usage === 'drop-details') {
      delete usage['prompt_tokens_details'];
      delete (value as Record<string, unknown>)['timings'];
    } else if (typeof usage['prompt_tokens_details'] === 'object' && usage['prompt_tokens_details'] !== null) {
      (usage['prompt_tokens_details'] as Record<string, unknown>)['cached_tokens'] = 0;
    } else {
      usage['prompt_tokens_details'] = { cached_tokens: 0 };
    }
    return value;
  };
  return listen((req, res, body) => {
    const completion = req.method === 'POST' && (req.url ?? '').includes('completions');
    const [lo, hi] = opts.delayMs ?? [0, 0];
    const wait = completion ? lo + Math.random() * (hi - lo) : 0;
    setTimeout(() => {
      const headers = { ...req.headers, host: up.host, 'content-length': String(Buffer.byteLength(body)) };
      const out = httpRequest({ hostname: up.hostname, port: up.port, path: req.url, method: req.method, headers }, (upRes) => {
        const sse = String(upRes.headers['content-type'] ?? '').includes('text/event-stream');
        const { 'content-length': _drop, ...rest } = upRes.headers;
        res.writeHead(upRes.statusCode ?? 502, rest);
        if (sse) {
          let pending = '';
          upRes.setEncoding('utf8');
          upRes.on('data', (chunk: string) => {
            pending += chunk;
            let i: number;
            while ((i = pending.indexOf('\n\n')) >= 0) {
              const event = pending.slice(0, i);
              pending = pending.slice(i + 2);
              const data = event.startsWith('data: ') ? event.slice(6) : undefined;
              if (data === undefined || data === '[DONE]') res.write(`${event}\n\n`);
              else {
                try {
                  res.write(`data: ${JSON.stringify(rewrite(JSON.parse(data)))}\n\n`);
                } catch {
                  res.write(`${event}\n\n`);
                }
              }
            }
          });
          upRes.on('end', () => res.end(pending));
        } else {
          const parts: Buffer[] = [];
          upRes.on('data', (c: Buffer) => parts.push(c));
          upRes.on('end', () => {
            const text = Buffer.concat(parts).toString('utf8');
            try {
              res.end(JSON.stringify(rewrite(JSON.parse(text))));
            } catch {
              res.end(text);
            }
          });
        }
        upRes.on('error', () => res.destroy());
      });
      out.on('error', () => res.destroy());
      res.on('close', () => out.destroy());
      out.end(body);
    }, wait);
  });
}
