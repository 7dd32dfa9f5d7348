/**
 * linkSignals: the combined signal fires with the reason of whichever source fired first, and dispose()
 * lets go of the sources, so a long-lived source (a cycle's or serve's shutdown signal) does not collect a
 * listener per request it ever governed, nor warn about them.
 */
import { getEventListeners } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import { linkSignals } from '../../prober/src/probe/linked-signal.js';

describe('linkSignals', () => {
  it('fires with the reason of the source that fired', () => {
    const a = new AbortController();
    const b = new AbortController();
    const link = linkSignals([a.signal, b.signal]);
    expect(link.signal.aborted).toBe(false);
    b.abort(new Error('deadline'));
    expect(link.signal.aborted).toBe(true);
    expect((link.signal.reason as Error).message).toBe('deadline');
    a.abort(new Error('later'));
    expect((link.signal.reason as Error).message).toBe('deadline');
  });

  it('is aborted at once when a source already is', () => {
    const a = new AbortController();
    a.abort('gone');
    const link = linkSignals([new AbortController().signal, a.signal]);
    expect(link.signal.aborted).toBe(true);
    expect(link.signal.reason).toBe('gone');
  });

  it('is the source itself when there is only one (nothing to link, nothing to dispose)', () => {
    const a = new AbortController();
    expect(linkSignals([a.signal, undefined]).signal).toBe(a.signal);
    expect(linkSignals([a.signal, a.signal]).signal).toBe(a.signal);
  });

  it('leaves no listener on a long-lived source once disposed, and no listener-count warning however many are in flight', async () => {
    const warn = vi.fn();
    process.on('warning', warn);
    try {
      const long = new AbortController();
      const links = Array.from({ length: 50 }, () => linkSignals([long.signal, new AbortController().signal]));
      expect(getEventListeners(long.signal, 'abort')).toHaveLength(50);
      for (const l of links) l.dispose();
      expect(getEventListeners(long.signal, 'abort')).toHaveLength(0);
      long.abort();
      expect(links.every((l) => !l.signal.aborted)).toBe(true);
      await new Promise((r) => setImmediate(r)); // warnings are emitted on a later tick
    } finally {
      process.off('warning', warn);
    }
    expect(warn).not.toHaveBeenCalled();
  });
});
