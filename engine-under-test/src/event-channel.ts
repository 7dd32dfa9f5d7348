/**
 * A single-consumer async queue: the scheduler pushes a request's events, the API layer iterates them.
 * Ending the iteration early (break, return, throw in a for-await) calls `onAbort`, so a consumer that
 * stops listening (a stop string matched, a client went away) releases the request's pages.
 */

export class EventChannel<T> implements AsyncIterable<T> {
  private readonly queue: T[] = [];
  private waiter: ((r: IteratorResult<T>) => void) | undefined;
  private closed = false;
  private iterated = false;

  constructor(private readonly onAbort: () => void) {}

  push(value: T): void {
    if (this.closed) return;
    if (this.waiter !== undefined) {
      const w = this.waiter;
      this.waiter = undefined;
      w({ value, done: false });
    } else {
      this.queue.push(value);
    }
  }

  /** No more values; pending ones are still delivered. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.waiter !== undefined && this.queue.length === 0) {
      const w = this.waiter;
      this.waiter = undefined;
      w({ value: undefined, done: true });
    }
  }

  get isClosed(): boolean {
    return this.closed;
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    if (this.iterated) throw new Error('an EventChannel can be iterated once');
    this.iterated = true;
    return {
      next: () => {
        const value = this.queue.shift();
        if (value !== undefined) return Promise.resolve({ value, done: false });
        if (this.closed) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => {
          this.waiter = resolve;
        });
      },
      return: () => {
        if (!this.closed) this.onAbort();
        this.queue.length = 0;
        this.closed = true;
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
