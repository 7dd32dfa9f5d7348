/**
 * `kvcanary report` as text: each finding's evidence is labelled by what it is. A marker (or a fragment of one)
 * is labelled "marker"; the observation behind a finding that carries no marker (pool against context, cached
 * tokens served across tenants, a timing effect, an answered over-limit prompt) is not.
 */
import { describe, expect, it } from 'vitest';
import { reportText } from '../../prober/src/commands/report-text.js';
import { makeFinding, type Finding } from '../../prober/src/probe/findings.js';
import type { StoredFinding } from '../../prober/src/service/store.js';

let id = 0;
const stored = (f: Finding): StoredFinding => ({ ...f, id: ++id, runId: 'r1', target: 'prod', at: `2026-01-01T00:00:0${id}.000Z` });

describe('report: evidence labelled by kind', () => {
  it('labels a marker "marker" and an observation "observed:", never "marker"', () => {
    const text = reportText({
      since: 0, runs: [],
      findings: [
        stored(makeFinding('cross-request-leak', 'overlimit-handoff', { match: 'kvcanary-abcdefghijklmnopqrstuvwxyz', planted: { runId: 'r0', requestId: 'q1', role: 'planter', tenant: 'a', at: '2026-01-01T00:00:00.000Z' } })),
        stored(makeFinding('pool-below-context', 'capacity-audit', { match: 'pool 8320 < context 16384' })),
        stored(makeFinding('prefix-timing-side-channel', 'prefix-isolation', { match: "b's time to first token on a's prefix was 40% shorter in median (p = 0.0001)" })),
        stored(makeFinding('rejection-not-enforced', 'overlimit-rejection', { match: 'beyond context: a 200 with output' })),
      ],
    });
    expect(text).toMatch(/overlimit-handoff {2}marker kvcanary-abcdefghijklmnopqrstuvwxyz/);
    expect(text).toMatch(/capacity-audit {2}observed: pool 8320 < context 16384/);
    expect(text).toMatch(/prefix-isolation {2}observed: b's time/);
    expect(text).toMatch(/overlimit-rejection {2}observed: beyond context/);
    expect(text).not.toMatch(/marker (pool|b's|beyond)/);
  });
});
