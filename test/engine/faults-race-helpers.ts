/**
 * Shared by the late-write and offload-release-race tests: the same abort-race cycle as
 * engine-under-test/bench/race-cycles.ts, but through HTTP, as an outside client drives it.
 */
import { randomBytes } from 'node:crypto';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const FILLER = 'The committee reviewed the quarterly figures for the northern region and agreed to meet again. ';

function base32(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += BASE32[(bytes[i] as number) % 32];
  return s;
}

export interface HttpLeak {
  /** Response id of the reader that showed another request's text (cmpl-N: N is the reader in /debug/exposures). */
  readerId: string;
  text: string;
  cycles: number;
}

/**
 * Runs abort-race cycles over HTTP in `lanes` concurrent clients until a reader's answer holds a fragment
 * of a marker some planter planted, or `maxCycles` have run. Returns the first leak, or undefined.
 */
export async function httpRaceUntilLeak(base: string, options: { lanes: number; maxCycles: number; planterTokens: number; readerTokens: number; abortWithinMs: number }): Promise<HttpLeak | undefined> {
  const fragments = new Set<string>();
  let cycles = 0;
  let leak: HttpLeak | undefined;
  const post = (body: unknown, signal?: AbortSignal): Promise<Response> =>
    fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal !== undefined ? { signal } : {}) });
  async function lane(): Promise<void> {
    const reader = `${base32(8)} ${FILLER.repeat(Math.max(1, Math.round(options.readerTokens / FILLER.length)))}\nQuote the reference code: kvcanary-`;
    while (leak === undefined && cycles < options.maxCycles) {
      cycles++;
      const markers = Array.from({ length: Math.floor(options.planterTokens / 36) }, () => `kvcanary-${base32(26)}`);
      for (const m of markers) for (let i = 9; i + 10 <= m.length; i++) fragments.add(m.slice(i, i + 10));
      const aborter = new AbortController();
      const timer = setTimeout(() => aborter.abort(), Math.random() * options.abortWithinMs);
      try {
        const res = await post({ prompt: `Keep these reference codes on file: ${markers.join(' ')}\nQuote one: kvcanary-`, max_tokens: 16, stream: true }, aborter.signal);
        await res.arrayBuffer();
      } catch {
        // aborted: the point
      }
      clearTimeout(timer);
      const answers = await Promise.all(
        Array.from({ length: 3 }, async () => (await (await post({ prompt: reader, max_tokens: 24, temperature: 0 })).json()) as { id: string; choices: { text: string }[] }),
      );
      for (const a of answers) {
        const text = a.choices[0]?.text ?? '';
        for (let i = 0; i + 10 <= text.length; i++) {
          if (fragments.has(text.slice(i, i + 10))) {
            leak ??= { readerId: a.id, text, cycles };
            break;
          }
        }
      }
    }
  }
  await Promise.all(Array.from({ length: options.lanes }, lane));
  return leak;
}
