/**
 * The `discover:` block of a target entry: where the entry's addresses come from, validated at load time.
 *
 *   targets:
 *     - name: glm                    # each address becomes target `glm/HOST:PORT`
 *       discover:
 *         file_sd: ./replicas.json   # Prometheus file_sd JSON or YAML: [{targets: ["host:port"], labels: {..}}]
 *         # or  dns: glm-headless.ns.svc:8000   (every A and AAAA address, on that port)
 *         # or  dns_srv: _http._tcp.glm.ns.svc  (SRV records: their hosts and ports)
 *         refresh: 30s               # re-resolve this often (file_sd is also re-read as soon as it changes)
 *         scheme: http               # http | https
 *         path_prefix: /v1           # appended to http(s)://HOST:PORT
 *         allow: []                  # protected addresses to probe anyway: link-local, metadata, unspecified
 *                                    # (none by default: address-policy.ts)
 *       tenants: ...                 # everything else (tenants, probe, schedule, budget, scenarios) is inherited
 *
 * check-config validates the entry, not the file's contents or the DNS answers: those change while serving.
 */
import path from 'node:path';
import { shownKey, shownString } from '../../shown-value.js';
import { ADDRESS_CLASSES, type AddressClass } from './address-policy.js';

export type DiscoverSource =
  | { kind: 'file_sd'; file: string }
  | { kind: 'dns'; host: string; port: number }
  | { kind: 'dns_srv'; name: string };

export interface DiscoverSpec {
  source: DiscoverSource;
  refreshMs: number;
  scheme: 'http' | 'https';
  /** '' or a path starting with '/', without a trailing slash. */
  pathPrefix: string;
  /** Protected address classes this entry may probe anyway (address-policy.ts). @default [] */
  allow: AddressClass[];
}

export interface SpecIssue { path: string; message: string }

export const DISCOVER_KEYS = ['file_sd', 'dns', 'dns_srv', 'refresh', 'scheme', 'path_prefix', 'allow'] as const;
export const DEFAULT_REFRESH_MS = 30_000;

export const HOST_RE = /^(?=.{1,253}$)[a-zA-Z0-9_]([a-zA-Z0-9_-]{0,62})(\.[a-zA-Z0-9_]([a-zA-Z0-9_-]{0,62}))*\.?$/;

/** Splits `host:port` / `[v6]:port`; undefined when it is not one. */
export function splitHostPort(s: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s[\]/]+)):(\d{1,5})$/.exec(s);
  if (m === null) return undefined;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  return { host: m[1] ?? m[2]!, port };
}

/** `host:port`, with IPv6 literals bracketed. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Validates a `discover:` mapping. `durationOf` is the config's duration parser; relative file_sd paths
 * resolve against `baseDir` (the config file's directory).
 */
export function parseDiscover(
  value: unknown, p: string, baseDir: string, durationOf: (text: string) => number | undefined,
): { spec?: DiscoverSpec; issues: SpecIssue[] } {
  const issues: SpecIssue[] = [];
  const fail = (key: string, message: string): void => { issues.push({ path: key === '' ? p : `${p}.${shownKey(key)}`, message }); };
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    fail('', `expected a mapping with one of file_sd, dns, dns_srv (and optionally refresh, scheme, path_prefix), got ${value === null || value === undefined ? 'nothing' : Array.isArray(value) ? 'a list' : typeof value}`);
    return { issues };
  }
  const o = value as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!(DISCOVER_KEYS as readonly string[]).includes(k)) fail(k, `unknown key; allowed here: ${DISCOVER_KEYS.join(', ')}`);
  }
  const given = (['file_sd', 'dns', 'dns_srv'] as const).filter((k) => o[k] !== undefined);
  let source: DiscoverSource | undefined;
  if (given.length !== 1) {
    fail('', given.length === 0 ? 'expected one source: file_sd: PATH, dns: HOST:PORT or dns_srv: NAME'
      : `expected exactly one source, got ${given.join(' and ')}`);
  } else {
    const k = given[0]!;
    const raw = o[k];
    if (typeof raw !== 'string' || raw.trim() === '') {
      fail(k, `expected a string, got ${Array.isArray(raw) ? 'a list' : raw === null ? 'nothing' : typeof raw}`);
    } else if (k === 'file_sd') {
      source = { kind: 'file_sd', file: path.resolve(baseDir, raw) };
    } else if (k === 'dns') {
      const hp = splitHostPort(raw);
      if (hp === undefined || !HOST_RE.test(hp.host)) fail(k, `expected HOST:PORT such as glm-headless.default.svc:8000 (a DNS name and a port 1-65535), got ${shownString(raw)}`);
      else source = { kind: 'dns', host: hp.host, port: hp.port };
    } else if (!HOST_RE.test(raw)) {
      fail(k, `expected an SRV record name such as _http._tcp.glm.default.svc.cluster.local, got ${shownString(raw)}`);
    } else {
      source = { kind: 'dns_srv', name: raw };
    }
  }
  let refreshMs = DEFAULT_REFRESH_MS;
  if (o.refresh !== undefined) {
    const ms = typeof o.refresh === 'string' ? durationOf(o.refresh) : undefined;
    if (ms === undefined || ms < 1000 || ms > 86_400_000) fail('refresh', `expected a duration between 1s and 1d such as 30s, got ${typeof o.refresh === 'string' ? shownString(o.refresh) : typeof o.refresh}`);
    else refreshMs = ms;
  }
  let scheme: 'http' | 'https' = 'http';
  if (o.scheme !== undefined) {
    if (o.scheme === 'http' || o.scheme === 'https') scheme = o.scheme;
    else fail('scheme', `expected http or https, got ${typeof o.scheme === 'string' ? shownString(o.scheme) : typeof o.scheme}`);
  }
  let pathPrefix = '';
  if (o.path_prefix !== undefined) {
    if (typeof o.path_prefix !== 'string' || !/^(\/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)*$/.test(o.path_prefix)) {
      fail('path_prefix', `expected a URL path starting with / such as /v1, got ${typeof o.path_prefix === 'string' ? shownString(o.path_prefix) : typeof o.path_prefix}`);
    } else {
      pathPrefix = o.path_prefix.replace(/\/+$/, '');
    }
  }
  const allow: AddressClass[] = [];
  if (o.allow !== undefined) {
    if (!Array.isArray(o.allow) || !o.allow.every((a) => typeof a === 'string' && (ADDRESS_CLASSES as readonly string[]).includes(a))) {
      fail('allow', `expected a list of address classes to probe although protected: ${ADDRESS_CLASSES.join(', ')} (default none)`);
    } else {
      allow.push(...new Set(o.allow as AddressClass[]));
    }
  }
  if (issues.length > 0 || source === undefined) return { issues };
  return { spec: { source, refreshMs, scheme, pathPrefix, allow }, issues };
}

/** One line for check-config and the status page. */
export function describeSource(s: DiscoverSource): string {
  switch (s.kind) {
    case 'file_sd': return `file_sd ${s.file}`;
    case 'dns': return `dns ${joinHostPort(s.host, s.port)}`;
    case 'dns_srv': return `dns_srv ${s.name}`;
  }
}
