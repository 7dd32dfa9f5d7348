import { Writable } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import { makeFinding } from '../../prober/src/probe/findings.js';
import { createLogger } from '../../prober/src/service/logger.js';

const KEY = 'sk-proj-9f8e7d6c5b4a39281706abcdef';

function sink(isTTY = false): { stream: Writable & { isTTY?: boolean }; text: () => string } {
  const chunks: string[] = [];
  const stream: Writable & { isTTY?: boolean } = new Writable({ write(c: Buffer, _e, cb) { chunks.push(c.toString()); cb(); } });
  if (isTTY) stream.isTTY = true;
  return { stream, text: () => chunks.join('') };
}

describe('logger', () => {
  it('writes JSON lines at the configured level', () => {
    const out = sink();
    const log = createLogger({ level: 'warn', destination: out.stream });
    log.info('hidden');
    log.warn({ target: 'prod' }, 'shown');
    const lines = out.text().trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 40, target: 'prod', msg: 'shown' });
  });

  it('redacts authorization headers, API-key fields and evidence excerpts by field', () => {
    const out = sink();
    const log = createLogger({ destination: out.stream });
    const finding = makeFinding('cross-request-leak', 'abort-race', { match: 'kvcanary-abc', excerpt: 'Alice SSN 078-05-1120' });
    log.info({
      headers: { authorization: 'Token xyz', 'x-api-key': 'hk-1' },
      req: { headers: { Authorization: 'Token abc' } },
      apiKey: 'ak-2',
      client: { api_key: 'ak-3' },
      finding,
      run: { findings: [finding] },
      evidence: finding.evidence,
    }, 'probe');
    const text = out.text();
    for (const s of ['Token xyz', 'hk-1', 'Token abc', 'ak-2', 'ak-3', '078-05-1120']) expect(text).not.toContain(s);
    const line = JSON.parse(text) as { finding: { evidence: { excerpt: string; match: string } } };
    expect(line.finding.evidence.excerpt).toBe('[redacted]');
    // The marker is ours, not the leaked text: it stays, so a responder can grep for it.
    expect(line.finding.evidence.match).toBe('kvcanary-abc');
  });

  it('scrubs configured key values wherever they appear, including pieces and in errors', () => {
    const out = sink();
    let secrets = [KEY];
    const log = createLogger({ destination: out.stream, secrets: () => secrets });
    log.error({ err: new Error(`401 from target: invalid key ${KEY}`), note: `echo …${KEY.slice(6)}` }, `calling with ${KEY}`);
    log.info({ raw: 'Authorization: Bearer abcdefghijklmnop' }, 'header dump');
    secrets = ['rotated-key-value-0001'];
    log.info('now rotated-key-value-0001');
    const text = out.text();
    for (let i = 0; i + 12 <= KEY.length; i++) expect(text).not.toContain(KEY.slice(i, i + 12));
    expect(text).not.toContain('abcdefghijklmnop');
    expect(text).not.toContain('rotated-key-value-0001');
    expect(text.match(/\[redacted\]/g)?.length).toBeGreaterThanOrEqual(5);
  });

  it('is human-readable (pino-pretty) when the destination is a TTY, still redacted', async () => {
    const out = sink(true);
    const log = createLogger({ destination: out.stream, secrets: [KEY] });
    log.warn({ target: 'prod', kind: 'cross-request-leak', apiKey: KEY }, 'finding cross-request-leak on prod');
    // pino-pretty formats on its own stream: wait for the line rather than for a fixed time.
    await vi.waitFor(() => expect(out.text()).toContain('finding cross-request-leak on prod'));
    const text = out.text();
    expect(() => JSON.parse(text) as unknown).toThrow();
    expect(text).toMatch(/WARN/);
    expect(text).not.toContain(KEY);
  });
});
