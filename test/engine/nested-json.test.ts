/** The engine answers a deeply nested JSON body with 400 invalid_json, never a 500 from a stack overflow. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonDepth } from '../../engine-under-test/src/http/body.js';
import { startEngine, type RunningEngine } from '../../engine-under-test/src/start.js';

describe('engine: deeply nested JSON', () => {
  let engine: RunningEngine;
  beforeAll(async () => { engine = await startEngine({ contextTokens: 4096, poolTokens: 8192, port: 0 }); });
  afterAll(async () => { await engine.close(); });

  it.each(['stop', 'logit_bias'])('a %s nested 100k deep is a 400', async (field) => {
    const depth = 100_000;
    const nested = field === 'stop' ? `${'['.repeat(depth)}${']'.repeat(depth)}` : `${'{"a":'.repeat(depth / 5)}1${'}'.repeat(depth / 5)}`;
    const res = await fetch(`${engine.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: `{"model":"kvcanary-engine","prompt":"hi","max_tokens":2,"${field}":${nested}}`,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('invalid_json');
  });

  it('counts depth outside strings only', () => {
    expect(jsonDepth('{"a":[1,{"b":"[[[[{{{{"}]}')).toBe(3);
    expect(jsonDepth('"\\"[["')).toBe(0);
  });
});
