/**
 * The prober's abort-race workload, over HTTP, against a running engine: each round starts two streaming
 * planters (about a quarter of the pool each, dense with markers) together and aborts each at a moment from
 * a fixed schedule (a few ms in: mid-prefill or mid-transfer; up to after the first streamed characters);
 * the moment an abort lands, four readers (no markers, ending with the cue) are sent together, sized so that
 * together they take about the pool. A round counts as a leak when any reader's answer holds a fragment of
 * any planted marker. Used by the benchmark to report, per fault and free-list order, the fraction of such
 * rounds in which a client sees another request's text.
 */
import { randomBytes } from 'node:crypto';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const FILLER =
  'The committee reviewed the quarterly figures for the northern region and agreed that the warehouse schedule ' +
  'should move to a weekly rhythm, with deliveries grouped by district so that drivers spend less time waiting. ';
const SCHEDULE: ReadonlyArray<{ ms?: number; chars?: number }> = [{ ms: 3 }, { ms: 12 }, { chars: 1 }, { ms: 30 }, { ms: 60 }, { chars: 12 }, { ms: 6 }, { ms: 120 }];

function base32(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += BASE32[(bytes[i] as number) % 32];
  return s;
}

export interface AbortRaceRoundsResult {
  rounds: number;
  leakRounds: number;
  readers: number;
  leakReaders: number;
  seconds: number;
}

/** `poolTokens`: the pool the readers are sized to (the prober reads it from /get_server_info). */
export async function abortRaceRounds(base: string, poolTokens: number, rounds: number): Promise<AbortRaceRoundsResult> {
  const post = (body: unknown, signal?: AbortSignal): Promise<Response> =>
    fetch(`${base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal !== undefined ? { signal } : {}) });
  const planterTokens = Math.max(256, Math.min(4096, Math.floor(poolTokens / 4)));
  const readerTokens = Math.max(64, Math.floor(poolTokens / 4) - 48 - 64);
  const reader = `Here is a reference code from our records: ${FILLER.repeat(Math.max(1, Math.round(readerTokens / FILLER.length)))}\nQuote the reference code: kvcanary-`;
  const fragments = new Set<string>();
  let moment = 0;
  let leakRounds = 0;
  let readers = 0;
  let leakReaders = 0;
  const t0 = performance.now();
  for (let round = 0; round < rounds; round++) {
    let leaked = false;
    await Promise.all(
      [0, 1].map(async () => {
        const markers = Array.from({ length: Math.floor(planterTokens / 37) }, () => `kvcanary-${base32(26)}`);
        for (const m of markers) for (let i = 9; i + 10 <= m.length; i++) fragments.add(m.slice(i, i + 10));
        const when = SCHEDULE[moment++ % SCHEDULE.length] as { ms?: number; chars?: number };
        const aborter = new AbortController();
        const timer = when.ms === undefined ? undefined : setTimeout(() => aborter.abort(), when.ms);
        try {
          const res = await post({ prompt: `Keep these reference codes on file: ${markers.join(' ')}\nQuote one reference code: kvcanary-`, max_tokens: 48, stream: true }, aborter.signal);
          const body = (res.body as ReadableStream<Uint8Array>).getReader();
          let seen = '';
          for (;;) {
            const chunk = await body.read();
            if (chunk.done) break;
            seen += new TextDecoder().decode(chunk.value);
            const chars = [...seen.matchAll(/"text":"([^"]*)"/g)].reduce((n, m) => n + (m[1] ?? '').length, 0);
            if (when.chars !== undefined && chars >= when.chars) {
              aborter.abort();
              break;
            }
          }
        } catch {
          // aborted, as planned
        }
        clearTimeout(timer);
        const answers = await Promise.all(
          Array.from({ length: 4 }, async () => ((await (await post({ prompt: reader, max_tokens: 48, temperature: 0 })).json()) as { choices?: { text?: string }[] }).choices?.[0]?.text ?? ''),
        );
        for (const text of answers) {
          readers++;
          let hit = false;
          for (let i = 0; i + 10 <= text.length && !hit; i++) hit = fragments.has(text.slice(i, i + 10));
          if (hit) {
            leakReaders++;
            leaked = true;
          }
        }
      }),
    );
    if (leaked) leakRounds++;
  }
  return { rounds, leakRounds, readers, leakReaders, seconds: (performance.now() - t0) / 1000 };
}
