/**
 * String order and number formatting that do not touch ICU, for code a `serve` process runs. The first
 * `localeCompare` loads ICU's collator and the first `toLocaleString` its number formatting: about 4 and
 * 6 MiB of RSS (Node 20, measured in a bare process), held for the process's life. What kvcanary sorts
 * (marker bodies, host:port, ISO timestamps) needs a stable order, not a locale's.
 */

/** Order by UTF-16 code units, the same in every locale. */
export function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** An integer with thousands separators (`12,345`), without ICU's number formatting (`toLocaleString`). */
export function groupThousands(n: number): string {
  const s = String(Math.trunc(n));
  return s.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}
