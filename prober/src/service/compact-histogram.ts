/**
 * A Prometheus histogram whose label sets each keep their bucket counts in one small array.
 *
 * Why not prom-client's Histogram: it keeps each label set's counts in an object keyed by the bucket
 * bounds, and V8 stores integer-like keys (1, 2, 5 … 600) as array elements sized past the largest one, so a
 * label set of bounds up to 600 s holds about 7.6 KiB and one up to 120 s about 1.5 KiB. With a histogram per
 * target and scenario and two per target and role, that was most of a replica's heap at 1,000 targets
 * (bench/SCALE.md). Here a label set is its labels, a key and one array of numbers, a few hundred bytes.
 *
 * It registers on a prom-client Registry like the built-in metrics and is exposed the same way: cumulative
 * `_bucket{le}` series ending in `+Inf`, `_sum` and `_count`.
 */
import type { Registry } from 'prom-client';

export class HistogramLabelError extends Error {
  readonly code = 'KVC_HISTOGRAM_LABELS';
  constructor(message: string) {
    super(message);
    this.name = 'HistogramLabelError';
  }
}

interface Series<T extends string> {
  labels: Record<T, string>;
  /** Per bucket (not cumulative), then the count above the last bound, then the sum. */
  counts: number[];
}

interface ExportedValue {
  labels: Record<string, string | number>;
  sharedLabels?: Record<string, string>;
  value: number;
  metricName: string;
}

export interface CompactHistogramConfig<T extends string> {
  name: string;
  help: string;
  labelNames: readonly T[];
  /** Upper bounds, ascending; `+Inf` is implied. */
  buckets: readonly number[];
  registers: readonly Registry[];
}

export class CompactHistogram<T extends string> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly name: string;
  readonly help: string;
  readonly labelNames: readonly T[];
  readonly #bounds: readonly number[];
  #series = new Map<string, Series<T>>();

  constructor(config: CompactHistogramConfig<T>) {
    const { name, help, labelNames, buckets } = config;
    if (buckets.length === 0 || buckets.some((b, i) => !Number.isFinite(b) || (i > 0 && b <= buckets[i - 1]!))) {
      throw new RangeError(`histogram ${name}: buckets must be finite and strictly ascending, got [${buckets.join(', ')}]`);
    }
    if (labelNames.includes('le' as T)) throw new HistogramLabelError(`histogram ${name}: "le" is reserved for the bucket bound`);
    this.name = name;
    this.help = help;
    this.labelNames = [...labelNames];
    this.#bounds = [...buckets];
    // prom-client's Registry accepts any object with name, help, type, get() and reset().
    for (const registry of config.registers) registry.registerMetric(this as never);
  }

  observe(labels: Record<T, string>, value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`histogram ${this.name}: observed value must be a finite number, got ${String(value)}`);
    const key = this.#key(labels);
    let series = this.#series.get(key);
    if (series === undefined) {
      const own = {} as Record<T, string>;
      for (const n of this.labelNames) own[n] = labels[n];
      series = { labels: own, counts: new Array<number>(this.#bounds.length + 2).fill(0) };
      this.#series.set(key, series);
    }
    let i = 0;
    while (i < this.#bounds.length && value > this.#bounds[i]!) i++;
    series.counts[i]! += 1;
    series.counts[this.#bounds.length + 1]! += value;
  }

  remove(labels: Record<T, string>): void {
    this.#series.delete(this.#key(labels));
  }

  reset(): void {
    this.#series = new Map();
  }

  /** Label sets are passed to the Registry as shared labels, as prom-client's own histogram does. */
  async getForPromString(): Promise<{ name: string; help: string; type: 'histogram'; aggregator: 'sum'; values: ExportedValue[] }> {
    const values: ExportedValue[] = [];
    const n = this.#bounds.length;
    for (const { labels, counts } of this.#series.values()) {
      let cumulative = 0;
      for (let i = 0; i < n; i++) {
        cumulative += counts[i]!;
        values.push({ labels: { le: this.#bounds[i]! }, sharedLabels: labels, value: cumulative, metricName: `${this.name}_bucket` });
      }
      const count = cumulative + counts[n]!;
      values.push({ labels: { le: '+Inf' }, sharedLabels: labels, value: count, metricName: `${this.name}_bucket` });
      values.push({ labels: {}, sharedLabels: labels, value: counts[n + 1]!, metricName: `${this.name}_sum` });
      values.push({ labels: {}, sharedLabels: labels, value: count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** As getForPromString, with each value's labels merged (what Registry.getMetricsAsJSON reports). */
  async get(): Promise<{ name: string; help: string; type: 'histogram'; aggregator: 'sum'; values: ExportedValue[] }> {
    const data = await this.getForPromString();
    return { ...data, values: data.values.map(({ labels, sharedLabels, value, metricName }) => ({ labels: { ...sharedLabels, ...labels }, value, metricName })) };
  }

  #key(labels: Record<T, string>): string {
    const given = Object.keys(labels);
    const unknown = given.find((k) => !this.labelNames.includes(k as T));
    if (unknown !== undefined) throw new HistogramLabelError(`histogram ${this.name}: unknown label "${unknown}" (labels are ${this.labelNames.join(', ')})`);
    const values = this.labelNames.map((n) => {
      const v = labels[n];
      if (typeof v !== 'string') throw new HistogramLabelError(`histogram ${this.name}: label "${n}" must be a string, got ${typeof v}`);
      return v;
    });
    return JSON.stringify(values);
  }
}
