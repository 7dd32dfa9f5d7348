/**
 * A synchronous question to a worker: the router posts a message and blocks in Atomics.wait until the
 * worker has written its JSON answer into a shared reply area. Only for the Engine contract's synchronous
 * diagnostics (checkInvariants), never on a request path. It cannot deadlock: workers never wait on the
 * main thread, and the main thread asks one question at a time. A worker that does not answer within the
 * timeout (dead, or stuck) yields undefined.
 */

const HEADER_BYTES = 8;

export function createReplyArea(bytes = 1 << 16): SharedArrayBuffer {
  return new SharedArrayBuffer(HEADER_BYTES + bytes);
}

export function callSync(post: (message: unknown) => void, area: SharedArrayBuffer, message: unknown, timeoutMs = 10_000): unknown {
  const header = new Int32Array(area, 0, 2);
  Atomics.store(header, 0, 0);
  post(message);
  const deadline = Date.now() + timeoutMs;
  while (Atomics.load(header, 0) === 0) {
    const left = deadline - Date.now();
    if (left <= 0) return undefined;
    Atomics.wait(header, 0, 0, left);
  }
  const length = Atomics.load(header, 1);
  const text = new TextDecoder().decode(new Uint8Array(area, HEADER_BYTES, length).slice());
  return JSON.parse(text) as unknown;
}

/** Worker side: writes the answer (JSON; cut to fit by `shrink` when too long) and wakes the caller. */
export function answerSync(area: SharedArrayBuffer, value: unknown, shrink: (value: unknown) => unknown = () => null): void {
  const header = new Int32Array(area, 0, 2);
  const room = area.byteLength - HEADER_BYTES;
  let bytes = new TextEncoder().encode(JSON.stringify(value));
  if (bytes.length > room) bytes = new TextEncoder().encode(JSON.stringify(shrink(value)));
  new Uint8Array(area, HEADER_BYTES, bytes.length).set(bytes);
  Atomics.store(header, 1, bytes.length);
  Atomics.store(header, 0, 1);
  Atomics.notify(header, 0);
}
