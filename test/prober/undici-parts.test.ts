import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import * as undici from 'undici';
import { Agent, request } from '../../prober/src/probe/target/undici-parts.js';

// The client loads two files of undici instead of its index (prober/src/probe/target/undici-parts.ts).
// What it relies on: they are still where it looks, they are the classes and function the index exports,
// and `request` sends method, path, query, headers and body to the URL given, on the dispatcher given.
describe('undici parts', () => {
  it('are the index’s own Agent and request, on the given dispatcher', async () => {
    expect(Agent).toBe(undici.Agent);
    const seen: Array<{ method?: string; url?: string; header?: string; body: string }> = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => { body += c.toString('utf8'); });
      req.on('end', () => {
        seen.push({ method: req.method, url: req.url, header: req.headers['x-probe'] as string | undefined, body });
        res.writeHead(201, { 'content-type': 'text/plain' }).end('ok');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const agent = new Agent();
    try {
      const { port } = server.address() as AddressInfo;
      const res = await request(`http://127.0.0.1:${port}/v1/completions?x=1`, { method: 'POST', headers: { 'x-probe': 'yes' }, body: 'hello', dispatcher: agent });
      expect(res.statusCode).toBe(201);
      expect(await res.body.text()).toBe('ok');
      expect(seen).toEqual([{ method: 'POST', url: '/v1/completions?x=1', header: 'yes', body: 'hello' }]);
    } finally {
      await agent.close();
      server.close();
    }
  });
});
