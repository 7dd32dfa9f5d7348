/**
 * CompactHistogram is exposed exactly as prom-client's Histogram would expose the same observations, so
 * dashboards and alert rules (histogram_quantile over _bucket, _sum, _count) read it unchanged.
 */
import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CompactHistogram, HistogramLabelError } from '../../prober/src/service/compact-histogram.js';

const BUCKETS = [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];
const OBSERVATIONS: Array<[Record<'target' | 'scenario', string>, number]> = [
  [{ target: 'a', scenario: 's' }, 0.2], [{ target: 'a', scenario: 's' }, 0.5], [{ target: 'a', scenario: 's' }, 7],
  [{ target: 'a', scenario: 's' }, 900], [{ target: 'b', scenario: 's' }, 60], [{ target: 'b', scenario: 'he said "hi"\n' }, 1.25],
];

function both(): { ours: CompactHistogram<'target' | 'scenario'>; theirs: Histogram<'target' | 'scenario'>; oursReg: Registry; theirsReg: Registry } {
  const oursReg = new Registry();
  const theirsReg = new Registry();
  const config = { name: 'x_seconds', help: 'help text', labelNames: ['target', 'scenario'] as const, buckets: BUCKETS };
  return {
    ours: new CompactHistogram({ ...config, registers: [oursReg] }),
    theirs: new Histogram({ ...config, labelNames: [...config.labelNames], registers: [theirsReg] }),
    oursReg, theirsReg,
  };
}

describe('CompactHistogram', () => {
  it('exposes the same text and JSON as prom-client\'s Histogram for the same observations', async () => {
    const { ours, theirs, oursReg, theirsReg } = both();
    for (const [labels, v] of OBSERVATIONS) {
      ours.observe(labels, v);
      theirs.observe(labels, v);
    }
    expect(await oursReg.metrics()).toBe(await theirsReg.metrics());
    // prom-client adds `exemplar: null` to buckets; nothing reads it without exemplars enabled.
    const json = async (r: Registry): Promise<unknown> => (await r.getMetricsAsJSON()).map((m) => ({
      ...m, values: (m.values as Array<{ metricName?: string; labels: object; value: number }>).map(({ metricName, labels, value }) => ({ metricName, labels, value })),
    }));
    expect(await json(oursReg)).toEqual(await json(theirsReg));
  });

  it('removes one label set, and resets all', async () => {
    const { ours, theirs, oursReg, theirsReg } = both();
    for (const [labels, v] of OBSERVATIONS) {
      ours.observe(labels, v);
      theirs.observe(labels, v);
    }
    ours.remove({ target: 'a', scenario: 's' });
    theirs.remove({ target: 'a', scenario: 's' });
    expect(await oursReg.metrics()).toBe(await theirsReg.metrics());
    ours.reset();
    expect(await oursReg.metrics()).toBe('# HELP x_seconds help text\n# TYPE x_seconds histogram\n');
  });

  it('refuses labels it does not have, non-string label values and non-finite observations, naming them', () => {
    const { ours } = both();
    expect(() => ours.observe({ target: 'a', scenario: 's', role: 'r' } as never, 1)).toThrow(HistogramLabelError);
    expect(() => ours.observe({ target: 'a', scenario: 's', role: 'r' } as never, 1)).toThrow(/unknown label "role"/);
    expect(() => ours.observe({ target: 'a' } as never, 1)).toThrow(/label "scenario" must be a string/);
    expect(() => ours.observe({ target: 'a', scenario: 's' }, Number.NaN)).toThrow(/finite number/);
    expect(() => new CompactHistogram({ name: 'y', help: 'h', labelNames: ['le'], buckets: [1], registers: [] })).toThrow(/reserved/);
    expect(() => new CompactHistogram({ name: 'y', help: 'h', labelNames: [], buckets: [2, 1], registers: [] })).toThrow(/ascending/);
  });
});
