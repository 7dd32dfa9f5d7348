/** Server-sent events as OpenAI streams them: `data: <json>\n\n` per chunk, then `data: [DONE]\n\n`. */
import type { ServerResponse } from 'node:http';

export function startSse(res: ServerResponse): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  res.flushHeaders();
}

export function writeEvent(res: ServerResponse, data: unknown): void {
  if (res.destroyed || res.writableEnded) return;
  res.write(`data: ${JSON.stringify(data)}\n\n`);
}

export function endSse(res: ServerResponse): void {
  if (res.destroyed || res.writableEnded) return;
  res.end('data: [DONE]\n\n');
}
