/**
 * The status page behind a reverse proxy at a path prefix (external_url `https://host/kvcanary/`): every link
 * on it is relative, so each one, followed from the page as a browser would, stays under the prefix and
 * answers. Before the fix the page linked `/metrics`, `/api/runs`, `/api/runs?target=…` and the fleet
 * section's `/api/targets` from the server root, which through the proxy are someone else's paths (404).
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ProbeRun } from '../../prober/src/probe/result.js';
import { parseExternalUrl, statusPageUrl } from '../../prober/src/service/external-url.js';
import { renderFleetSection } from '../../prober/src/service/fleet-status.js';
import { startServiceServer, type ServiceServer } from '../../prober/src/service/server.js';
import { openStore, type Store } from '../../prober/src/service/store.js';
import { listen, type FakeServer } from '../helpers/fake-endpoints.js';

const PREFIX = '/kvcanary/';
const dir = mkdtempSync(path.join(tmpdir(), 'kvc-prefix-'));
let store: Store;
let server: ServiceServer;
let proxy: FakeServer;

beforeAll(async () => {
  store = openStore({ path: path.join(dir, 's.sqlite'), retentionMs: 86_400_000 });
  const at = new Date(Date.now() - 60_000).toISOString();
  const run = (runId: string, target: string): ProbeRun => ({ runId, target, baseUrl: `http://${target}`, model: 'm', startedAt: at, finishedAt: at, outcome: 'pass', up: true,
    capacity: { contextTokens: 4096 }, scenarios: [{ name: 'abort-race', outcome: 'pass', findings: [], requests: [], notes: [], tokens: { sent: 1, billed: 1 }, durationMs: 1 }] });
  store.recordRun(run('00000000-0000-4000-8000-000000000001', 'prod'));
  // A `kvcanary run --store` run: its section links to /api/runs?target=….
  store.recordRun(run('run-00000000-0000-4000-8000-000000000002', '10.0.0.9:8000'));
  server = await startServiceServer({
    port: 0, registry: new Registry(), store,
    targets: () => [{ name: 'prod', baseUrl: 'http://prod', scenarios: ['abort-race'] }],
    extraHtml: () => renderFleetSection({ shard: '0/1', targets: 1, sources: [] }),
  });
  // A reverse proxy serving the status server under PREFIX (and nothing else), as an ingress would.
  const upstream = new URL(server.url);
  proxy = await listen((req, res) => {
    if (!req.url?.startsWith(PREFIX)) {
      res.statusCode = 404;
      res.end('not under the prefix\n');
      return;
    }
    const fwd = httpRequest({ host: upstream.hostname, port: upstream.port, method: req.method, path: `/${req.url.slice(PREFIX.length)}`, headers: { host: upstream.host } }, (up: IncomingMessage) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    fwd.on('error', () => res.destroy());
    fwd.end();
  });
});
afterAll(async () => {
  await proxy?.close();
  await server?.close();
  store?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('status page under a path prefix', () => {
  it('every link followed from the page through the proxy answers 200', async () => {
    const pageUrl = `${proxy.url}${PREFIX}`;
    const page = await fetch(pageUrl);
    expect(page.status).toBe(200);
    const html = await page.text();
    const links = [...html.matchAll(/href="([^"]*)"/g)].map((m) => m[1]!.replaceAll('&amp;', '&')).filter((h) => !h.startsWith('#'));
    // The links the page is known to carry: the footer's four, a --store run's history, the fleet section's.
    expect(links.length).toBeGreaterThanOrEqual(6);
    for (const href of links) {
      expect(href.startsWith('/'), `${href} is relative to the server root`).toBe(false);
      const url = new URL(href, pageUrl);
      expect(url.pathname.startsWith(PREFIX), href).toBe(true);
      expect((await fetch(url)).status, href).toBe(200);
    }
  });

  it('alerts\' status_page label stays the absolute external_url-based link, anchored at the target', () => {
    const r = parseExternalUrl('https://host.example/kvcanary');
    expect(r).toEqual({ url: 'https://host.example/kvcanary/' });
    expect(statusPageUrl((r as { url: string }).url, 0, 'prod')).toBe('https://host.example/kvcanary/#target-prod');
  });
});
