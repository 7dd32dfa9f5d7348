/**
 * A recording pass-through proxy between the prober and the engine, so the benchmark can join the
 * engine's ground truth (which speaks in engine request ids) to what the prober saw (which speaks in its
 * own request ids) without either side knowing about the other.
 *
 * For every completion request it records: whether the prompt carried canary markers (so the pages that
 * request writes hold planted content), the engine's id for the request (the `id` field of the response,
 * `cmpl-17` → 17), the status, and the generated text (bounded), parsed from the SSE stream or the JSON
 * body as it passes. Bytes are forwarded as they arrive in both directions, and a client that hangs up
 * makes the proxy hang up on the engine at once: abort timing is what abort-race measures, so the tap
 * must not hold anything back. Other requests (introspection, /tokenize) pass through unrecorded.
 */
import { Agent, createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface TapRecord {
  /** Arrival order at the tap. */
  seq: number;
  path: string;
  status?: number;
  /** The engine's request id, from the response's `id` (absent for rejections, which carry none). */
  engineId?: number;
  /** Bodies (the 26 random characters, lowercased) of canary markers in the prompt (its first `maxInspectBytes`). */
  promptMarkers: string[];
  /**
   * Every 26-character window of base32 runs in the generated text, lowercased: candidate marker bodies (a
   * reader's prompt ends with the `kvcanary-` cue, so a copied marker comes back without its prefix).
   */
  textMarkers: string[];
  bodyBytes: number;
  /** Generated text as the tap saw it pass (bounded by maxTextChars). */
  text: string;
  /** The client hung up before the response ended. */
  clientClosed: boolean;
}

export interface TapOptions {
  /** @default 65_536 */
  maxTextChars?: number;
  /** Request bytes searched for markers; the rest is forwarded unread. @default 16 MiB */
  maxInspectBytes?: number;
}

export interface Tap {
  /** e.g. http://127.0.0.1:41234 */
  url: string;
  /** Records of completion requests that have ended since the last take, in arrival order. */
  take(): TapRecord[];
  /** Completion requests still open. */
  inFlight(): number;
  close(): Promise<void>;
}

const MARKER_RE = /kvcanary-[a-z2-7]{26}/gi;
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection', 'te', 'trailer']);

function forwardable(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  return out;
}

function markersIn(text: string): string[] {
  return (text.match(MARKER_RE) ?? []).map((m) => m.slice(9).toLowerCase());
}

const BASE32_RUN = /[a-z2-7]{26,}/gi;

/** Candidate marker bodies in generated text: each 26-character window of each base32 run. */
export function bodiesIn(text: string): string[] {
  const out: string[] = [];
  for (const run of text.match(BASE32_RUN) ?? []) {
    const r = run.toLowerCase();
    for (let i = 0; i + 26 <= r.length; i++) out.push(r.slice(i, i + 26));
  }
  return out;
}

/** The engine's numeric id from an OpenAI-style response id (`cmpl-17`, `chatcmpl-17`). */
export function engineIdOf(id: unknown): number | undefined {
  if (typeof id !== 'string') return undefined;
  const m = /-(\d+)$/.exec(id);
  return m === null ? undefined : Number(m[1]);
}

/** Text of one completion object or chunk (legacy `text`, chat `delta.content` or `message.content`). */
export function textOf(doc: unknown): string {
  if (typeof doc !== 'object' || doc === null) return '';
  const choices = (doc as { choices?: unknown }).choices;
  if (!Array.isArray(choices)) return '';
  let out = '';
  for (const c of choices) {
    if (typeof c !== 'object' || c === null) continue;
    const ch = c as { text?: unknown; delta?: { content?: unknown }; message?: { content?: unknown } };
    if (typeof ch.text === 'string') out += ch.text;
    else if (typeof ch.delta?.content === 'string') out += ch.delta.content;
    else if (typeof ch.message?.content === 'string') out += ch.message.content;
  }
  return out;
}

/** Incremental reader of a completion response body: SSE or one JSON document. */
export function createResponseParser(contentType: string, maxTextChars: number): { push(chunk: Buffer): void; end(): { id: unknown; text: string } } {
  const sse = contentType.includes('text/event-stream');
  let id: unknown;
  let text = '';
  let pending = '';
  const json: Buffer[] = [];
  let jsonBytes = 0;
  const take = (doc: unknown): void => {
    if (typeof doc !== 'object' || doc === null) return;
    if (id === undefined) id = (doc as { id?: unknown }).id;
    if (text.length < maxTextChars) text = (text + textOf(doc)).slice(0, maxTextChars);
  };
  const line = (l: string): void => {
    if (!l.startsWith('data:')) return;
    const data = l.slice(5).trim();
    if (data === '' || data === '[DONE]') return;
    try {
      take(JSON.parse(data));
    } catch {
      // not JSON: the prober judges malformed streams; the tap only records
    }
  };
  return {
    push(chunk) {
      if (!sse) {
        // Completion JSON is small; an oversized body is not parsed (the prober bounds it anyway).
        if (jsonBytes < 8 * 1024 * 1024) json.push(chunk);
        jsonBytes += chunk.length;
        return;
      }
      pending += chunk.toString('utf8');
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        line(pending.slice(0, nl).replace(/\r$/, ''));
        pending = pending.slice(nl + 1);
      }
    },
    end() {
      if (sse) {
        if (pending !== '') line(pending);
      } else if (jsonBytes <= 8 * 1024 * 1024) {
        try {
          take(JSON.parse(Buffer.concat(json).toString('utf8')));
        } catch {
          // error bodies and non-JSON: nothing to record
        }
      }
      return { id, text };
    },
  };
}

export async function startTap(upstream: string, opts: TapOptions = {}): Promise<Tap> {
  const target = new URL(upstream);
  const maxText = opts.maxTextChars ?? 65_536;
  const maxInspect = opts.maxInspectBytes ?? 16 * 1024 * 1024;
  let seq = 0;
  let open = 0;
  let done: TapRecord[] = [];
  const agent = new Agent({ keepAlive: true });

  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const recorded = req.method === 'POST' && /\/completions(\?|$)/.test(req.url ?? '');
    const record: TapRecord = { seq: seq++, path: req.url ?? '', promptMarkers: [], textMarkers: [], bodyBytes: 0, text: '', clientClosed: false };
    const inspected: Buffer[] = [];
    let inspectedBytes = 0;
    let finished = false;
    if (recorded) open++;
    const finish = (): void => {
      if (finished) return;
      finished = true;
      if (!recorded) return;
      open--;
      done.push(record);
    };

    const up = httpRequest(
      { agent, host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...forwardable(req.headers), host: target.host } },
      (upRes) => {
        record.status = upRes.statusCode;
        res.writeHead(upRes.statusCode ?? 502, forwardable(upRes.headers));
        const parser = recorded ? createResponseParser(String(upRes.headers['content-type'] ?? ''), maxText) : undefined;
        upRes.on('data', (chunk: Buffer) => {
          parser?.push(chunk);
          res.write(chunk);
        });
        upRes.on('end', () => {
          if (parser !== undefined) {
            const r = parser.end();
            record.text = r.text;
            record.textMarkers = bodiesIn(r.text);
            const id = engineIdOf(r.id);
            if (id !== undefined) record.engineId = id;
          }
          res.end();
          finish();
        });
        upRes.on('error', () => {
          res.destroy();
          finish();
        });
      },
    );
    up.on('error', () => {
      if (!res.headersSent) {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"tap: upstream unreachable"}}');
      } else res.destroy();
      finish();
    });
    req.on('data', (chunk: Buffer) => {
      record.bodyBytes += chunk.length;
      if (recorded && inspectedBytes < maxInspect) {
        inspected.push(chunk);
        inspectedBytes += chunk.length;
      }
      up.write(chunk);
    });
    req.on('end', () => {
      if (recorded) record.promptMarkers = markersIn(Buffer.concat(inspected).toString('utf8'));
      inspected.length = 0;
      up.end();
    });
    // The client hung up (an abort): hang up on the engine now, as the client's own connection would have.
    res.on('close', () => {
      if (!res.writableFinished) {
        record.clientClosed = true;
        up.destroy();
        finish();
      }
    });
  };

  const server = createServer(handle);
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    take() {
      const out = done.sort((a, b) => a.seq - b.seq);
      done = [];
      return out;
    },
    inFlight: () => open,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        agent.destroy();
        server.close(() => resolve());
      }),
  };
}
