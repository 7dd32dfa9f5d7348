/**
 * Where discovered addresses come from: a Prometheus file_sd file (JSON or YAML) or DNS (A/AAAA on a fixed
 * port, or SRV). Each resolve() returns the whole current list or throws; keeping the last good list when it
 * throws is the caller's job (manager.ts).
 */
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { isIP } from 'node:net';
import { Resolver } from 'node:dns/promises';
import { parse as parseYaml } from 'yaml';
import { HOST_RE, joinHostPort, splitHostPort, type DiscoverSource } from './spec.js';
import { shownString } from '../../shown-value.js';
import { byCodeUnits } from '../../locale-free.js';

export interface Address {
  /** `host:port`, IPv6 bracketed. */
  hostPort: string;
  /** Labels from the source (file_sd `labels`); Prometheus-style names only, `__`-prefixed ones dropped. */
  labels: Record<string, string>;
}

/** The DNS calls discovery makes (node:dns/promises Resolver has them; tests may pass their own server's). */
export interface DnsResolver {
  resolve4(host: string): Promise<string[]>;
  resolve6(host: string): Promise<string[]>;
  resolveSrv(name: string): Promise<{ name: string; port: number }[]>;
}

export class DiscoveryError extends Error {
  override readonly name = 'DiscoveryError';
}

/** At most this many addresses per source: a runaway file or zone must not start thousands of loops. */
export const MAX_ADDRESSES = 5000;
const MAX_FILE_BYTES = 4 * 1024 * 1024;
const LABEL_RE = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
// eslint-disable-next-line no-control-regex
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

/** A DNS name or an IP literal (IPv6 without a zone: a zone id is free text). */
export function validHost(host: string): boolean {
  return isIP(host) !== 0 ? !host.includes('%') : HOST_RE.test(host);
}

export function createResolver(servers?: string[]): DnsResolver {
  const r = new Resolver({ timeout: 5000, tries: 2 });
  if (servers !== undefined) r.setServers(servers);
  return r;
}

export async function resolveSource(source: DiscoverSource, dns: DnsResolver, files: FileSdReader = createFileSdReader()): Promise<Address[]> {
  switch (source.kind) {
    case 'file_sd': return files.read(source.file);
    case 'dns': return resolveHost(dns, source.host, source.port);
    case 'dns_srv': return resolveSrv(dns, source.name);
  }
}

/** Parses a Prometheus file_sd document: `[{targets: ["host:port", ...], labels: {name: value}}]`. */
export function parseFileSd(text: string, file = 'file_sd'): Address[] {
  let doc: unknown;
  try {
    doc = parseYaml(text, { maxAliasCount: 100 });
  } catch (err) {
    throw new DiscoveryError(`${file}: not valid JSON or YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  if (doc === null || doc === undefined) return [];
  if (!Array.isArray(doc)) throw new DiscoveryError(`${file}: expected a list of {targets: [...], labels: {...}} groups, got ${typeof doc}`);
  const seen = new Map<string, Address>();
  doc.forEach((group: unknown, i) => {
    const at = `${file}[${i}]`;
    if (group === null || typeof group !== 'object' || Array.isArray(group)) throw new DiscoveryError(`${at}: expected a mapping with targets and labels`);
    const g = group as Record<string, unknown>;
    for (const k of Object.keys(g)) if (k !== 'targets' && k !== 'labels') throw new DiscoveryError(`${at}.${k}: unknown key; allowed: targets, labels`);
    if (!Array.isArray(g.targets)) throw new DiscoveryError(`${at}.targets: expected a list of "host:port"`);
    const labels: Record<string, string> = {};
    if (g.labels !== undefined && g.labels !== null) {
      if (typeof g.labels !== 'object' || Array.isArray(g.labels)) throw new DiscoveryError(`${at}.labels: expected a mapping of label name to string`);
      for (const [k, v] of Object.entries(g.labels as Record<string, unknown>)) {
        if (!LABEL_RE.test(k) || k.length > 100) throw new DiscoveryError(`${at}.labels: ${shownString(k)} is not a Prometheus label name`);
        if (typeof v !== 'string') throw new DiscoveryError(`${at}.labels.${k}: expected a string value`);
        if (UNPRINTABLE.test(v)) throw new DiscoveryError(`${at}.labels.${k}: control characters or bidi overrides in the value`);
        if (!k.startsWith('__')) labels[k] = v.slice(0, 200);
      }
    }
    g.targets.forEach((t: unknown, j) => {
      const hp = typeof t === 'string' ? splitHostPort(t) : undefined;
      // A host is a DNS name or an IP literal: a name with ESC, BEL or a bidi override would reach the
      // target label, /metrics, the status page and the logs.
      if (hp === undefined || !validHost(hp.host)) throw new DiscoveryError(`${at}.targets[${j}]: expected "host:port" (a DNS name or an IP address, a port 1-65535), got ${typeof t === 'string' ? shownString(t) : typeof t}`);
      const hostPort = joinHostPort(hp.host, hp.port);
      if (!seen.has(hostPort)) seen.set(hostPort, { hostPort, labels });
    });
  });
  if (seen.size > MAX_ADDRESSES) throw new DiscoveryError(`${file}: ${seen.size} addresses, more than the ${MAX_ADDRESSES} one source may list`);
  return [...seen.values()];
}

/**
 * Reads file_sd files. A file that was rejected is not read and parsed again until it changes: parsing a
 * 4 MiB list of 190,000 entries took hundreds of megabytes and seconds of a blocked event loop, at every
 * refresh. The rejection is remembered by the file's identity (device, inode, size, mtime, ctime) and, when
 * those change, by a hash of its bytes. Entries are also bounded before the parse: a list that names more
 * `host:port`s than a source may hold is refused from a count of its text, without building it.
 */
export interface FileSdReader {
  read(file: string): Promise<Address[]>;
  /** Parses done (a cached rejection is not one): what the tests watch. */
  parses(): number;
}

export function createFileSdReader(): FileSdReader {
  const rejected = new Map<string, { stamp: string; hash: string; error: DiscoveryError }>();
  let parses = 0;
  return {
    parses: () => parses,
    async read(file) {
      let fh;
      try {
        fh = await open(file, 'r');
      } catch (err) {
        throw new DiscoveryError(`${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'file not found' : `cannot read (${(err as NodeJS.ErrnoException).code ?? 'error'})`}`);
      }
      let bytes: Buffer;
      let stamp: string;
      try {
        const st = await fh.stat();
        if (!st.isFile()) throw new DiscoveryError(`${file}: not a regular file`);
        if (st.size > MAX_FILE_BYTES) throw new DiscoveryError(`${file}: larger than ${MAX_FILE_BYTES} bytes`);
        stamp = `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
        const hit = rejected.get(file);
        if (hit !== undefined && hit.stamp === stamp) throw hit.error;
        const buf = Buffer.alloc(MAX_FILE_BYTES + 1);
        let n = 0;
        for (;;) {
          const { bytesRead } = await fh.read(buf, n, buf.length - n, n);
          if (bytesRead === 0 || (n += bytesRead) >= buf.length) break;
        }
        if (n > MAX_FILE_BYTES) throw new DiscoveryError(`${file}: larger than ${MAX_FILE_BYTES} bytes`);
        bytes = buf.subarray(0, n);
      } finally {
        await fh.close();
      }
      const hash = createHash('sha256').update(bytes).digest('hex');
      const hit = rejected.get(file);
      if (hit !== undefined && hit.hash === hash) {
        rejected.set(file, { ...hit, stamp });
        throw hit.error;
      }
      try {
        const text = bytes.toString('utf8');
        const named = countHostPorts(text);
        if (named > MAX_LISTED) throw new DiscoveryError(`${file}: names about ${named} host:port entries, more than a source may list (${MAX_ADDRESSES} addresses); not parsed`);
        parses++;
        const list = parseFileSd(text, file);
        rejected.delete(file);
        return list;
      } catch (err) {
        const error = err instanceof DiscoveryError ? err : new DiscoveryError(`${file}: ${(err as Error).message}`);
        rejected.set(file, { stamp, hash, error });
        throw error;
      }
    },
  };
}

/** `host:port` entries a list may name before parsing (duplicates across groups allowed for). */
const MAX_LISTED = 4 * MAX_ADDRESSES;

/** How many `:PORT"`-shaped tokens the text holds: every listed target has one. Linear, no allocation per match. */
function countHostPorts(text: string): number {
  let n = 0;
  const re = /:\d{1,5}(?=["'\s,\]}]|$)/gm;
  while (re.exec(text) !== null) n++;
  return n;
}

const NO_RECORDS = new Set(['ENODATA', 'ENOTFOUND']);

async function resolveHost(dns: DnsResolver, host: string, port: number): Promise<Address[]> {
  const settle = async (f: () => Promise<string[]>): Promise<string[] | Error> => {
    try { return await f(); } catch (err) { return err as Error; }
  };
  const [v4, v6] = await Promise.all([settle(() => dns.resolve4(host)), settle(() => dns.resolve6(host))]);
  const lists = [v4, v6];
  // "No such records" of one family is normal; a failure of both, or any other error, is a failed lookup.
  const hard = lists.filter((l): l is Error => l instanceof Error && !NO_RECORDS.has((l as NodeJS.ErrnoException).code ?? ''));
  if (hard.length > 0 || lists.every((l) => l instanceof Error)) {
    const e = (hard[0] ?? v4) as NodeJS.ErrnoException;
    throw new DiscoveryError(`dns ${host}: ${e.code ?? e.message}`);
  }
  const addrs = lists.flatMap((l) => (l instanceof Error ? [] : l)).sort();
  return [...new Set(addrs)].slice(0, MAX_ADDRESSES).map((a) => ({ hostPort: joinHostPort(a, port), labels: {} }));
}

async function resolveSrv(dns: DnsResolver, name: string): Promise<Address[]> {
  let records: { name: string; port: number }[];
  try {
    records = await dns.resolveSrv(name);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new DiscoveryError(`dns_srv ${name}: ${e.code ?? e.message}`);
  }
  const out = new Map<string, Address>();
  for (const r of records) {
    const host = r.name.replace(/\.$/, '');
    if (!validHost(host)) continue;  // not a DNS name: never becomes a target name
    const hostPort = joinHostPort(host, r.port);
    out.set(hostPort, { hostPort, labels: {} });
  }
  return [...out.values()].sort((a, b) => byCodeUnits(a.hostPort, b.hostPort)).slice(0, MAX_ADDRESSES);
}
