/**
 * Runs independent series a few at a time in this process. A probe cycle against the bundled engine spends
 * much of its wall time waiting (transfer latency, streaming), so a few series in flight use the machine
 * without changing what each measures; results come back in input order.
 */
export async function mapPool<T, R>(items: readonly T[], concurrency: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError(`mapPool: expected a concurrency >= 1, got ${String(concurrency)}`);
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return out;
}
