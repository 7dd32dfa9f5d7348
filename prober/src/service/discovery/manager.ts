/**
 * Keeps every `discover:` entry's address list current and turns it into targets.
 *
 * Each entry is resolved at start, every `refresh`, and (file_sd) as soon as its file changes (a watch on the
 * file's directory, so an atomic rename-over is seen too). A resolve that fails keeps the last good list: a
 * broken file or a DNS outage must not make every replica vanish from probing. The failure is logged, counted
 * (kvcanary_discovery_errors_total{source}) and shown on the status page until a resolve succeeds again.
 *
 * Targets are named `NAME/HOST:PORT` and inherit everything but the URL from the entry.
 */
import { watch, type FSWatcher } from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { DiscoveryEntry, TargetConfig } from '../config.js';
import type { Clock } from '../scheduler.js';
import { describeSource } from './spec.js';
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { createFileSdReader, createResolver, resolveSource, type Address, type DnsResolver } from './sources.js';
import { refusal } from './address-policy.js';

export interface DiscoveredTarget {
  target: TargetConfig;
  /** The entry (source) it came from, and the labels the source gave it. */
  source: string;
  labels: Record<string, string>;
}

export interface SourceStatus {
  source: string;
  description: string;
  addresses: number;
  lastOkAt?: string;
  lastError?: string;
  lastErrorAt?: string;
  errors: number;
}

export interface DiscoveryOptions {
  entries: readonly DiscoveryEntry[];
  logger: Logger;
  clock: Clock;
  /** Called (not awaited) whenever the set of discovered targets may have changed. */
  onChange: () => void;
  /** Counted once per failed resolve. */
  onError?: (source: string) => void;
  dns?: DnsResolver;
  /** Delay between a file change event and the re-read (editors write in several steps). @default 200 */
  debounceMs?: number;
  /** Every address a name resolves to, for the address policy. @default the system resolver (getaddrinfo) */
  lookup?: (host: string) => Promise<string[]>;
}

export interface Discovery {
  /** Resolves every entry once (failures are recorded, never thrown), then keeps them current. */
  start(): Promise<void>;
  /** Replaces the entries (config reload). Entries whose spec is unchanged keep their last good list. */
  reconfigure(entries: readonly DiscoveryEntry[]): Promise<void>;
  /** Re-resolves every entry now. */
  refreshAll(): Promise<void>;
  targets(): DiscoveredTarget[];
  status(): SourceStatus[];
  stop(): void;
}

interface SourceState {
  entry: DiscoveryEntry;
  key: string;
  addresses: Address[] | undefined;
  status: SourceStatus;
  timer: unknown;
  watcher: FSWatcher | undefined;
  debounce: unknown;
  running: Promise<void> | undefined;
  again: boolean;
  stopped: boolean;
}

const specKey = (e: DiscoveryEntry): string => JSON.stringify(e.spec);

export function expandEntry(entry: DiscoveryEntry, addresses: readonly Address[]): DiscoveredTarget[] {
  const { scheme, pathPrefix } = entry.spec;
  return addresses.map((a) => ({
    target: { ...entry.template, name: `${entry.template.name}/${a.hostPort}`, baseUrl: `${scheme}://${a.hostPort}${pathPrefix}` },
    source: entry.template.name,
    labels: a.labels,
  }));
}

export function createDiscovery(opts: DiscoveryOptions): Discovery {
  const { logger, clock } = opts;
  const dns = opts.dns ?? createResolver();
  const debounceMs = opts.debounceMs ?? 200;
  const files = createFileSdReader();
  const lookup = opts.lookup ?? (async (host: string) => (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address));
  /** The refused addresses last logged per source, so a refusal is logged when it changes, not every refresh. */
  const refusedLogged = new Map<string, string>();

  /** The addresses the entry's address policy lets through (address-policy.ts); the rest logged. */
  async function allowed(s: SourceState, list: Address[]): Promise<Address[]> {
    const allow = s.entry.spec.allow ?? [];
    const out: Address[] = [];
    const refused: string[] = [];
    const hostOf = (a: Address): string => a.hostPort.replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
    const names = [...new Set(list.map(hostOf).filter((h) => isIP(h) === 0))];
    const resolved = new Map(await Promise.all(names.map(async (h) => [h, await lookup(h).catch(() => [] as string[])] as const)));
    for (const a of list) {
      const host = hostOf(a);
      const why = refusal(host, resolved.get(host) ?? [], allow);
      if (why === undefined) out.push(a);
      else refused.push(`${a.hostPort} (${why})`);
    }
    const key = refused.join(',');
    if (key !== (refusedLogged.get(s.entry.template.name) ?? '')) {
      refusedLogged.set(s.entry.template.name, key);
      if (refused.length > 0) {
        logger.warn({ source: s.entry.template.name, refused: refused.slice(0, 20), count: refused.length },
          'discovery: addresses not probed (link-local, metadata or unspecified; discover.allow lets a class through)');
      }
    }
    return out;
  }
  let sources = new Map<string, SourceState>();
  let started = false;

  function newState(entry: DiscoveryEntry, previous?: SourceState): SourceState {
    const keep = previous !== undefined && previous.key === specKey(entry);
    return {
      entry, key: specKey(entry), addresses: keep ? previous.addresses : undefined,
      status: keep ? { ...previous.status } : { source: entry.template.name, description: describeSource(entry.spec.source), addresses: 0, errors: 0 },
      timer: undefined, watcher: undefined, debounce: undefined, running: undefined, again: false, stopped: false,
    };
  }

  async function resolveOnce(s: SourceState): Promise<void> {
    const name = s.entry.template.name;
    try {
      const list = await allowed(s, await resolveSource(s.entry.spec.source, dns, files));
      if (s.stopped) return;
      const changed = s.addresses === undefined || JSON.stringify(s.addresses) !== JSON.stringify(list);
      if (s.status.lastError !== undefined) logger.info({ source: name }, 'discovery source recovered');
      s.addresses = list;
      s.status = { ...s.status, addresses: list.length, lastOkAt: new Date(clock.now()).toISOString() };
      delete s.status.lastError;
      delete s.status.lastErrorAt;
      if (changed) {
        logger.info({ source: name, addresses: list.length }, 'discovered targets changed');
        opts.onChange();
      }
    } catch (err) {
      if (s.stopped) return;
      const message = (err as Error).message.slice(0, 300);
      s.status = { ...s.status, errors: s.status.errors + 1, lastError: message, lastErrorAt: new Date(clock.now()).toISOString() };
      opts.onError?.(name);
      logger.warn({ source: name, error: message, keeping: s.addresses?.length ?? 0 }, 'discovery failed: keeping the last good list');
    }
  }

  /** One resolve at a time per source; a request during one runs once more after it. */
  function refresh(s: SourceState): Promise<void> {
    if (s.running !== undefined) { s.again = true; return s.running; }
    s.running = (async () => {
      do {
        s.again = false;
        await resolveOnce(s);
      } while (s.again && !s.stopped);
    })().finally(() => { s.running = undefined; });
    return s.running;
  }

  function arm(s: SourceState): void {
    const tick = (): void => {
      if (s.stopped) return;
      s.timer = clock.setTimeout(tick, s.entry.spec.refreshMs);
      void refresh(s);
    };
    s.timer = clock.setTimeout(tick, s.entry.spec.refreshMs);
    const src = s.entry.spec.source;
    if (src.kind !== 'file_sd') return;
    try {
      const base = path.basename(src.file);
      s.watcher = watch(path.dirname(src.file), { persistent: false }, (_event, filename) => {
        if (filename !== null && filename !== base) return;
        if (s.debounce !== undefined) clock.clearTimeout(s.debounce);
        s.debounce = clock.setTimeout(() => { s.debounce = undefined; if (!s.stopped) void refresh(s); }, debounceMs);
      });
      s.watcher.on('error', (err) => logger.warn({ source: s.entry.template.name, err: err.message }, 'file_sd watch failed: relying on refresh'));
    } catch (err) {
      logger.warn({ source: s.entry.template.name, err: (err as Error).message }, 'cannot watch file_sd directory: relying on refresh');
    }
  }

  function disarm(s: SourceState): void {
    s.stopped = true;
    if (s.timer !== undefined) clock.clearTimeout(s.timer);
    if (s.debounce !== undefined) clock.clearTimeout(s.debounce);
    s.watcher?.close();
  }

  function build(entries: readonly DiscoveryEntry[], previous: Map<string, SourceState>): Map<string, SourceState> {
    const next = new Map<string, SourceState>();
    for (const e of entries) next.set(e.template.name, newState(e, previous.get(e.template.name)));
    return next;
  }

  sources = build(opts.entries, new Map());

  return {
    async start() {
      started = true;
      await Promise.all([...sources.values()].map((s) => refresh(s)));
      for (const s of sources.values()) if (!s.stopped) arm(s);
    },
    async reconfigure(entries) {
      const old = sources;
      for (const s of old.values()) disarm(s);
      sources = build(entries, old);
      opts.onChange();
      if (!started) return;
      await Promise.all([...sources.values()].map((s) => refresh(s)));
      for (const s of sources.values()) if (!s.stopped) arm(s);
    },
    async refreshAll() {
      await Promise.all([...sources.values()].map((s) => refresh(s)));
    },
    targets() {
      return [...sources.values()].flatMap((s) => expandEntry(s.entry, s.addresses ?? []));
    },
    status() {
      return [...sources.values()].map((s) => ({ ...s.status }));
    },
    stop() {
      for (const s of sources.values()) disarm(s);
    },
  };
}
