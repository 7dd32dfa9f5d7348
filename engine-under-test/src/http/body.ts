/**
 * Reads a request body up to a byte limit. Past the limit it stops buffering at once (a declared
 * Content-Length over the limit is refused before reading anything), answers 413 and discards the rest,
 * so a client cannot make the engine hold more than `limit` bytes for it.
 */
import type { IncomingMessage } from 'node:http';
import { ApiError } from './api-error.js';

export function tooLarge(limit: number, got: string): ApiError {
  return new ApiError(413, `Request body too large: the limit is ${limit} bytes, got ${got}.`, { code: 'request_too_large' });
}

export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) {
    req.resume(); // discard without buffering
    return Promise.reject(tooLarge(limit, `${declared} bytes`));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) {
        done = true;
        chunks.length = 0;
        req.off('data', onData);
        req.resume(); // keep draining (without buffering) so the 413 can be delivered
        reject(tooLarge(limit, `more than ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => {
      if (done) return;
      done = true;
      resolve(Buffer.concat(chunks, size));
    });
    const fail = (err: Error): void => {
      if (done) return;
      done = true;
      chunks.length = 0;
      reject(err);
    };
    req.once('error', fail);
    // A client that disconnects mid-body: nothing to answer, but release what was buffered.
    req.once('close', () => fail(new ApiError(400, 'The client closed the connection before the body was complete.', { code: 'incomplete_body' })));
  });
}

/** No OpenAI request nests deeper than this; deeper JSON would overflow the stack of whatever walks it. */
export const MAX_JSON_DEPTH = 64;

/** The deepest nesting of arrays and objects in a JSON text, counted without parsing (strings skipped). */
export function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92) i++;               // backslash: skip the escaped character
      else if (c === 34) inString = false;
    } else if (c === 34) {
      inString = true;
    } else if (c === 91 || c === 123) { // [ {
      if (++depth > max) max = depth;
    } else if (c === 93 || c === 125) { // ] }
      depth--;
    }
  }
  return max;
}

export async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const body = await readBody(req, limit);
  if (body.length === 0) throw new ApiError(400, 'The request body is empty; a JSON object was expected.', { code: 'invalid_json' });
  const text = body.toString('utf8');
  if (jsonDepth(text) > MAX_JSON_DEPTH) {
    throw new ApiError(400, `The JSON body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels.`, { code: 'invalid_json' });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new ApiError(400, `Could not parse the JSON body of the request: ${(err as Error).message}`, { code: 'invalid_json' });
  }
}
