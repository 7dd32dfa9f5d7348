/**
 * The host-offload tier: KV pages kept in host memory, keyed by the chain of token blocks they hold (page
 * k's key hashes every token up to the end of page k), so a request whose prompt starts with the same full
 * pages can load them instead of having them prefilled and transferred. Entries hold the page's K and V,
 * its tokens (a hit is confirmed token by token, never on the hash alone) and each slot's ground-truth
 * writer tag, so whatever a copy captured keeps naming its author.
 *
 * Bounded: least recently used pages are evicted past `capacityPages`. A write-back replaces the entry of
 * each key it covers (the freshest copy wins). Like the prefix cache, the tier honours `cache_salt`: the
 * key chain starts from the salt and each entry keeps the salt it was written under, which a hit must
 * match too, so tenants with different salts never share a page here.
 */
import { FLOATS_PER_SLOT, type SlotSource } from '../kv-memory.js';
import { fmix32, murmurRound } from '../hash.js';

export class HostPage implements SlotSource {
  readonly data: Float32Array;
  readonly slotWriter: Int32Array;

  constructor(
    readonly pageSize: number,
    readonly tokens: Uint16Array,
    /** The request whose write-back produced this copy. */
    readonly origin: number,
    /** The `cache_salt` the origin was sent with. */
    readonly salt: string | undefined,
  ) {
    this.data = new Float32Array(pageSize * FLOATS_PER_SLOT);
    this.slotWriter = new Int32Array(pageSize);
  }
}

export class HostTier {
  private readonly index = new Map<string, HostPage>();
  /** Lookups the salt check refused under `host-tier-ignores-salt` (`salted-host-tier`), each request once. */
  saltRefusals = 0;

  constructor(
    readonly pageSize: number,
    readonly capacityPages: number,
    /**
     * `ignore`: `host-tier-ignores-salt`, keys leave the salt out and a hit does not compare salts (SGLang
     * HiCache, PR #37058); `check`: a hit must match the loader's salt whatever the key said (the tier's own
     * design, and with the fault, `salted-host-tier`).
     */
    readonly salt: { ignore: boolean; check: boolean } = { ignore: false, check: true },
  ) {}

  get size(): number {
    return this.index.size;
  }

  /** Keys of the first `pages` full pages of `tokens` under `salt`. */
  keys(tokens: ArrayLike<number>, pages: number, salt: string | undefined): string[] {
    const P = this.pageSize;
    const keys: string[] = [];
    let h1 = 0x9747b28c | 0;
    let h2 = 0x2f8d6e13 | 0;
    if (salt !== undefined && !this.salt.ignore) {
      h2 = murmurRound(h2, 0x5a17);
      for (let i = 0; i < salt.length; i++) {
        h1 = murmurRound(h1, salt.charCodeAt(i));
        h2 = murmurRound(h2, salt.charCodeAt(i) ^ 0x5bd1e995);
      }
    }
    for (let k = 0; k < pages; k++) {
      for (let i = k * P; i < (k + 1) * P; i++) {
        const t = tokens[i] as number;
        h1 = murmurRound(h1, t);
        h2 = murmurRound(h2, t ^ 0x5bd1e995);
      }
      keys.push(`${fmix32(h1 ^ k).toString(36)}.${fmix32(h2 ^ h1).toString(36)}`);
    }
    return keys;
  }

  /** The longest run of leading pages of `tokens` the tier holds for `salt`, at most `maxPages`. */
  lookup(tokens: ArrayLike<number>, maxPages: number, salt: string | undefined): HostPage[] {
    const P = this.pageSize;
    const hits: HostPage[] = [];
    const keys = this.keys(tokens, maxPages, salt);
    for (let k = 0; k < keys.length; k++) {
      const key = keys[k] as string;
      const page = this.index.get(key);
      if (page === undefined) break;
      if (page.salt !== salt && this.salt.check) {
        if (this.salt.ignore) this.saltRefusals++;
        break;
      }
      let same = true;
      for (let s = 0; s < P && same; s++) same = page.tokens[s] === tokens[k * P + s];
      if (!same) break;
      this.index.delete(key); // most recently used last
      this.index.set(key, page);
      hits.push(page);
    }
    return hits;
  }

  insert(keys: readonly string[], pages: readonly HostPage[]): void {
    for (let k = 0; k < pages.length; k++) {
      const key = keys[k] as string;
      this.index.delete(key);
      this.index.set(key, pages[k] as HostPage);
    }
    while (this.index.size > this.capacityPages) {
      const oldest = this.index.keys().next().value as string;
      this.index.delete(oldest);
    }
  }
}
