/**
 * The prefix cache: full KV pages shared between requests whose prompts start with the same tokens.
 *
 * As in vLLM's automatic prefix caching:
 * - a prompt is cut into page-sized blocks; block i's key is a chained hash H(key_{i-1}, tokens of block i),
 *   and block 0's chain starts from the request's `cache_salt`, so tenants with different salts never share;
 * - a completed, fully written prompt page is registered under its key; a later request looks its blocks up
 *   in order, borrows every page up to the first miss (the pool's reference count pins them) and skips
 *   their prefill; at least one prompt token is always computed (the first token needs a fresh position);
 * - a page whose last holder releases it goes back on the free list with its key kept: cached pages are
 *   free pages, evicted (key dropped) only when the allocator hands them out again, in free-list order (FIFO
 *   = least recently released first). So "used" pages are exactly those some sequence holds.
 *
 * The faults change what the key is or when an entry becomes visible, never the model:
 * - `prefix-cache-ignores-salt`: the salt is not mixed in (SGLang HiCache, PR #37058);
 * - `weak-prefix-hash`: a 32-bit hash over the multiset of a block's tokens (order-insensitive), chained:
 *   any permutation of a block collides with it (CVE-2025-25183's class: a hash an outside client can make
 *   collide); a hit serves the other prompt's KV;
 * - `prompt-cache-restore-race`: an entry is not dropped when its page is handed to another request
 *   (llama.cpp #27148: a slot's prompt-cache entry restored into a fresh sequence while the slot's cells are
 *   already being reused by another conversation, without a fence): a later request with the entry's
 *   prefix restores pages that another request is using or has just written, and attends over its KV.
 * Defenses are checks of their own at lookup, run after the key (faulty or not) has matched, so with a fault
 * and its defense both on the faulty path runs and the defense stops it, and counts it (`stats().blocked`):
 * - `salted-prefix-cache`: every entry carries the salt of the request that wrote it; a lookup refuses an
 *   entry of another salt even when the key matched (it did under `prefix-cache-ignores-salt`);
 * - `strong-prefix-hash`: every entry carries the exact token ids of its block; a hit is confirmed token by
 *   token against them (as llama.cpp confirms its cache), so a colliding key (`weak-prefix-hash`) is refused;
 * - `restore-fencing`: a restore verifies that the page still has the generation it had when the entry was
 *   made (entries are registered only once their page is fully written), so a stale entry is refused
 *   whatever the eviction path missed.
 * A refused block ends the run of hits there (the request prefills from it on), counted once per request.
 *
 * Ground truth is independent of all of that: each page written in full carries a truth key (a SHA-256
 * chain of salt and exact tokens, always salted) and the writer id. A read of a borrowed page is
 * legitimate when the reader's own truth key for that block equals the page's and every written slot is
 * that writer's: same tenant, same tokens. Any other read of another request's slots counts as foreign.
 */
import { createHash } from 'node:crypto';
import { fmix32, murmurRound } from './hash.js';
import type { KvMemory } from './kv-memory.js';
import { NEVER_WRITTEN } from './kv-memory.js';
import type { ForeignRead } from './model.js';
import type { EngineConfig } from './config.js';
import { faultTrigger } from './faults.js';

export type PrefixHashKind = 'chained-64' | 'multiset-32' | 'sha256';

export interface PrefixCacheOptions {
  pageSize: number;
  numPages: number;
  /** The salt is mixed into block 0's hash (false: the `prefix-cache-ignores-salt` fault). */
  salted: boolean;
  hash: PrefixHashKind;
  /** salted-prefix-cache: a lookup refuses an entry written under another salt. */
  checkSalt: boolean;
  /** strong-prefix-hash: a hit is confirmed token by token against the entry's exact ids. */
  confirmTokens: boolean;
  /**
   * Whether an entry survives its page being handed out again: the restore-race fault, drawn once per such
   * event (always false without the fault; always true with it unrated).
   */
  keepOnReuse: () => boolean;
  /** On restore, check the page's generation against the entry's (the restore-fencing defense). */
  verifyOnRestore: boolean;
}

export interface PrefixCacheStats {
  /** Blocks registered and still valid. */
  entries: number;
  /** Lookups that found at least one block / prompt tokens served from the cache. */
  hitRequests: number;
  lookups: number;
  cachedTokensTotal: number;
  /** Entries dropped because their page was handed out again or zeroed. */
  evictions: number;
  /** restore-fencing: stale entries refused at restore. */
  staleRestoresRefused: number;
  /** Requests whose lookup a defense refused, by defense (each request counted once per defense). */
  blocked: { 'salted-prefix-cache': number; 'strong-prefix-hash': number; 'restore-fencing': number };
}

/** Per-request view: the engine's keys for its cacheable blocks and the ground-truth keys. */
export interface PrefixPlan {
  /** Engine keys of the prompt's cacheable blocks (full pages, at least one prompt token left over). */
  keys: string[];
  /** Ground truth keys of the same blocks. */
  truth: string[];
  /** The request's salt and prompt tokens (entries keep their block's ids and salt for the defenses' checks). */
  salt: string | undefined;
  tokens: Uint16Array;
  /** Defenses that already refused this request's lookup (counted once per request). */
  refusedBy?: Set<string>;
}

interface Entry {
  page: number;
  gen: number;
  salt: string | undefined;
  ids: Uint16Array;
}

const SALT_SEED = 0x9747b28c;

export class PrefixCache {
  private readonly byKey = new Map<string, Entry>();
  private readonly keyOf: (string | undefined)[];
  private readonly truthOf: (string | undefined)[];
  private readonly truthWriter: Int32Array;
  /** reader -> (borrowed page -> the reader's truth key for the block it stands for). */
  private readonly entitled = new Map<number, Map<number, string>>();
  private readonly counters = { hitRequests: 0, lookups: 0, cachedTokensTotal: 0, evictions: 0, staleRestoresRefused: 0 };
  private readonly blocked = { 'salted-prefix-cache': 0, 'strong-prefix-hash': 0, 'restore-fencing': 0 };

  constructor(private readonly memory: KvMemory, readonly options: PrefixCacheOptions) {
    this.keyOf = new Array<string | undefined>(options.numPages);
    this.truthOf = new Array<string | undefined>(options.numPages);
    this.truthWriter = new Int32Array(options.numPages).fill(NEVER_WRITTEN);
  }

  /** Keys for the prompt's cacheable blocks: floor((length - 1) / pageSize) of them. */
  plan(tokens: Uint16Array, salt: string | undefined): PrefixPlan {
    const P = this.options.pageSize;
    const blocks = Math.floor((tokens.length - 1) / P);
    return {
      keys: engineKeys(tokens, blocks, P, this.options.salted ? salt : undefined, this.options.hash),
      truth: sha256Keys(tokens, blocks, P, salt),
      salt,
      tokens,
    };
  }

  /** Pages of the longest cached run of the plan's blocks (stops at the first miss or refused entry). */
  lookup(plan: PrefixPlan): number[] {
    const pages: number[] = [];
    const P = this.options.pageSize;
    for (let b = 0; b < plan.keys.length; b++) {
      const key = plan.keys[b] as string;
      const entry = this.byKey.get(key);
      if (entry === undefined) break;
      if (this.options.checkSalt && entry.salt !== plan.salt) {
        this.refuse(plan, 'salted-prefix-cache');
        break;
      }
      if (this.options.confirmTokens && !sameIds(entry.ids, plan.tokens, b * P)) {
        this.refuse(plan, 'strong-prefix-hash');
        break;
      }
      if (this.options.verifyOnRestore && this.memory.generation[entry.page] !== entry.gen) {
        this.counters.staleRestoresRefused++;
        this.refuse(plan, 'restore-fencing');
        this.byKey.delete(key);
        if (this.keyOf[entry.page] === key) this.keyOf[entry.page] = undefined;
        break;
      }
      pages.push(entry.page);
    }
    return pages;
  }

  private refuse(plan: PrefixPlan, defense: keyof PrefixCacheStats['blocked']): void {
    plan.refusedBy ??= new Set();
    if (plan.refusedBy.has(defense)) return;
    plan.refusedBy.add(defense);
    this.blocked[defense]++;
  }

  /** Records an admitted request's lookup and the pages it pinned in its page table. */
  borrowed(reader: number, plan: PrefixPlan, pages: readonly number[]): void {
    this.counters.lookups++;
    if (pages.length === 0) return;
    this.counters.hitRequests++;
    this.counters.cachedTokensTotal += pages.length * this.options.pageSize;
    const map = new Map<number, string>();
    pages.forEach((page, i) => map.set(page, plan.truth[i] as string));
    this.entitled.set(reader, map);
  }

  /** The reader is gone: its entitlements go with it. */
  finished(reader: number): void {
    this.entitled.delete(reader);
  }

  /** Makes block `index` of `plan` findable at `page` (first registration of a key wins). */
  register(plan: PrefixPlan, index: number, page: number): void {
    const key = plan.keys[index];
    if (key === undefined || this.byKey.has(key)) return;
    const P = this.options.pageSize;
    this.byKey.set(key, { page, gen: this.memory.generation[page] as number, salt: plan.salt, ids: plan.tokens.slice(index * P, (index + 1) * P) });
    this.keyOf[page] = key;
  }

  /** Ground truth: `writer` has written every slot of `page` for block `index` of `plan`. */
  written(plan: PrefixPlan, index: number, page: number, writer: number): void {
    const truth = plan.truth[index];
    if (truth === undefined) return;
    this.truthOf[page] = truth;
    this.truthWriter[page] = writer;
  }

  /** The page's data is about to be overwritten or was zeroed: drop its entry and its ground truth. */
  invalidate(page: number): void {
    const key = this.keyOf[page];
    if (key !== undefined && !this.options.keepOnReuse()) {
      if (this.byKey.get(key)?.page === page) this.byKey.delete(key);
      this.keyOf[page] = undefined;
      this.counters.evictions++;
    }
    // Ground truth follows the bytes whatever the cache does: the page no longer holds that block.
    this.truthOf[page] = undefined;
    this.truthWriter[page] = NEVER_WRITTEN;
  }

  /** The page backs an entry (a free page kept for its contents). */
  holds(page: number): boolean {
    return this.keyOf[page] !== undefined;
  }

  /** Drops every entry (pages stay where they are: held ones with their holders, the rest on the free list). */
  flush(): number {
    const n = this.byKey.size;
    for (const entry of this.byKey.values()) this.keyOf[entry.page] = undefined;
    this.byKey.clear();
    return n;
  }

  /**
   * Ground truth filter: removes from a foreign read the pages the reader legitimately borrowed (same
   * truth key, written by the block's recorded writer alone). Returns undefined when nothing foreign is left.
   */
  screen(reader: number, read: ForeignRead): ForeignRead | undefined {
    const memory = this.memory;
    const mine = this.entitled.get(reader);
    if (mine === undefined) return read;
    const P = memory.pageSize;
    const kept: number[] = [];
    for (const page of read.pages) {
      const expected = mine.get(page);
      let legit = expected !== undefined && expected === this.truthOf[page];
      if (legit) {
        const writer = this.truthWriter[page];
        for (let s = page * P, end = s + P; s < end; s++) {
          const w = memory.slotWriter[s] as number;
          if (w !== writer && w !== reader && w !== NEVER_WRITTEN) {
            legit = false;
            break;
          }
        }
      }
      if (!legit) kept.push(page);
    }
    if (kept.length === read.pages.length) return read;
    if (kept.length === 0) return undefined;
    const writers = new Set<number>();
    for (const page of kept) {
      for (let s = page * P, end = s + P; s < end; s++) {
        const w = memory.slotWriter[s] as number;
        if (w !== reader && w !== NEVER_WRITTEN) writers.add(w);
      }
    }
    return { pages: kept, writers: [...writers] };
  }

  stats(): PrefixCacheStats {
    return { entries: this.byKey.size, ...this.counters, blocked: { ...this.blocked } };
  }
}

/** The engine's block keys under the configured hash. */
export function engineKeys(tokens: ArrayLike<number>, blocks: number, P: number, salt: string | undefined, hash: PrefixHashKind): string[] {
  if (hash === 'sha256') return sha256Keys(tokens, blocks, P, salt);
  const keys: string[] = [];
  let s = salt === undefined ? 0 : stringHash(salt, SALT_SEED);
  if (hash === 'multiset-32') {
    // Order-insensitive inside a block: the sum of each token's mix. Any permutation collides.
    for (let b = 0; b < blocks; b++) {
      let sum = 0;
      for (let i = b * P; i < (b + 1) * P; i++) sum = (sum + fmix32((tokens[i] as number) + 1)) | 0;
      s = fmix32(murmurRound(s, sum));
      keys.push(`m${s >>> 0}`);
    }
    return keys;
  }
  // chained-64: two independent murmur lanes over the previous key and every token in order.
  let t = salt === undefined ? 0x5bd1e995 : stringHash(salt, SALT_SEED ^ 0x5bd1e995);
  for (let b = 0; b < blocks; b++) {
    for (let i = b * P; i < (b + 1) * P; i++) {
      s = murmurRound(s, tokens[i] as number);
      t = murmurRound(t, ((tokens[i] as number) << 16) ^ i);
    }
    s = fmix32(s ^ P);
    t = fmix32(t ^ b);
    keys.push(`c${s >>> 0}.${t >>> 0}`);
  }
  return keys;
}

/** SHA-256 chain: key_i = sha256(key_{i-1} || tokens of block i as u16le); key_{-1} = sha256(salt). */
export function sha256Keys(tokens: ArrayLike<number>, blocks: number, P: number, salt: string | undefined): string[] {
  const keys: string[] = [];
  let prev = createHash('sha256').update(salt === undefined ? 'nosalt' : `salt:${salt}`).digest();
  const buf = Buffer.alloc(2 * P);
  for (let b = 0; b < blocks; b++) {
    for (let i = 0; i < P; i++) buf.writeUInt16LE(tokens[b * P + i] as number, 2 * i);
    prev = createHash('sha256').update(prev).update(buf).digest();
    keys.push(prev.toString('base64'));
  }
  return keys;
}

function stringHash(text: string, seed: number): number {
  let h = seed;
  for (let i = 0; i < text.length; i++) h = murmurRound(h, text.charCodeAt(i));
  return fmix32(h ^ text.length);
}

function sameIds(ids: Uint16Array, tokens: Uint16Array, from: number): boolean {
  for (let i = 0; i < ids.length; i++) if (ids[i] !== tokens[from + i]) return false;
  return true;
}

/**
 * The cache's behaviour from the configured faults and defenses. A fault always changes the key (the
 * faulty path runs); its defense adds a check of its own at lookup that refuses what the faulty key let through.
 */
export function prefixCacheOptions(named: Pick<EngineConfig, 'faults' | 'defenses' | 'faultRates' | 'faultSeed'>, pageSize: number, numPages: number): PrefixCacheOptions {
  const fault = (n: string): boolean => (named.faults as readonly string[]).includes(n);
  const defense = (n: string): boolean => (named.defenses as readonly string[]).includes(n);
  return {
    pageSize,
    numPages,
    salted: !fault('prefix-cache-ignores-salt'),
    hash: fault('weak-prefix-hash') ? 'multiset-32' : 'chained-64',
    checkSalt: defense('salted-prefix-cache'),
    confirmTokens: defense('strong-prefix-hash'),
    keepOnReuse: faultTrigger(named, 'prompt-cache-restore-race'),
    verifyOnRestore: defense('restore-fencing'),
  };
}
