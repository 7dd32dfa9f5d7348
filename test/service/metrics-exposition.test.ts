/**
 * /metrics is written metric by metric (metrics-exposition.ts) to keep a scrape's memory small; Prometheus
 * must read exactly what prom-client's `registry.metrics()` would have given, over a chunked response.
 */
import { request } from 'node:http';
import { Gauge, Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { expositionChunks } from '../../prober/src/service/metrics-exposition.js';
import { createMetrics, initTargetMetrics } from '../../prober/src/service/metrics.js';
import { startServiceServer } from '../../prober/src/service/server.js';
import { openStore } from '../../prober/src/service/store.js';

const SCENARIOS = ['overlimit-handoff', 'abort-race', 'capacity-audit'];

function populated(): Registry {
  const registry = new Registry();
  const m = createMetrics(registry);
  for (const target of ['a', 'b/10.0.0.7:8000', 'quote"back\\slash']) {
    initTargetMetrics(m, target, SCENARIOS);
    m.probeDuration.observe({ target, scenario: 'abort-race' }, 3.5);
    m.requestDuration.observe({ target, role: 'planter' }, 0.2);
    m.timeToFirstToken.observe({ target, role: 'planter' }, 0.03);
    m.findings.inc({ target, scenario: 'overlimit-handoff', kind: 'cross-request-leak', severity: 'critical' });
  }
  return registry;
}

async function joined(registry: Registry): Promise<string> {
  let out = '';
  for await (const chunk of expositionChunks(registry)) out += chunk;
  return out;
}

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (closers.length > 0) await closers.pop()!();
});

describe('metrics exposition', () => {
  it('gives, chunk by chunk, exactly the text registry.metrics() gives', async () => {
    const registry = populated();
    expect(await joined(registry)).toBe(await registry.metrics());
    expect(await joined(new Registry())).toBe(await new Registry().metrics());
    const one = new Registry();
    new Gauge({ name: 'only_one', help: 'h', registers: [one] }).set(2);
    expect(await joined(one)).toBe(await one.metrics());
  });

  it('serves the same bytes over HTTP, chunked, and HEAD without a body', async () => {
    const registry = populated();
    const store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
    const server = await startServiceServer({ port: 0, registry, store });
    closers.push(() => store.close(), () => server.close());
    const res = await fetch(`${server.url}metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe(registry.contentType);
    expect(res.headers.get('transfer-encoding')).toBe('chunked');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(await res.text()).toBe(await registry.metrics());
    const head = await fetch(`${server.url}metrics`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
  });

  it('waits for a slow socket chunk by chunk without piling up listeners', async () => {
    const registry = new Registry();
    for (let m = 0; m < 40; m++) {
      const g = new Gauge({ name: `big_${m}`, help: 'h', labelNames: ['series'], registers: [registry] });
      for (let i = 0; i < 3000; i++) g.set({ series: `series-number-${i}-with-some-length` }, i);
    }
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => void warnings.push(w);
    process.on('warning', onWarning);
    closers.push(() => void process.off('warning', onWarning));
    const store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
    const server = await startServiceServer({ port: 0, registry, store });
    closers.push(() => store.close(), () => server.close());
    // A reader that stops between reads, so nearly every chunk meets a full socket.
    const body = await new Promise<string>((resolve, reject) => {
      request(`${server.url}metrics`, (res) => {
        const parts: Buffer[] = [];
        res.on('data', (d: Buffer) => {
          parts.push(d);
          res.pause();
          setTimeout(() => res.resume(), 1);
        });
        res.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
        res.on('error', reject);
      }).on('error', reject).end();
    });
    expect(body).toBe(await registry.metrics());
    await new Promise((r) => setTimeout(r, 50));
    expect(warnings.map((w) => w.name)).toEqual([]);
  });

  it('answers 500 when a metric fails before anything is written, and cuts the connection when one fails later', async () => {
    const failing = (name: string): Registry => {
      const r = new Registry();
      if (name !== 'first') new Gauge({ name: 'fine', help: 'h', registers: [r] }).set(1);
      new Gauge({ name: 'broken', help: 'h', registers: [r], collect() { throw new Error('collector broke'); } });
      return r;
    };
    const store = openStore({ path: ':memory:', retentionMs: 86_400_000 });
    const early = await startServiceServer({ port: 0, registry: failing('first'), store });
    const late = await startServiceServer({ port: 0, registry: failing('later'), store });
    closers.push(() => store.close(), () => early.close(), () => late.close());
    expect((await fetch(`${early.url}metrics`)).status).toBe(500);
    // The status line has gone out with the first metric; the body must not end as if complete.
    const outcome = await new Promise<string>((resolve) => {
      request(`${late.url}metrics`, (res) => {
        res.on('data', () => undefined);
        res.on('end', () => resolve(res.complete ? 'complete' : 'cut'));
        res.on('error', () => resolve('cut'));
        res.on('aborted', () => resolve('cut'));
      }).on('error', () => resolve('cut')).end();
    });
    expect(outcome).toBe('cut');
  });
});
