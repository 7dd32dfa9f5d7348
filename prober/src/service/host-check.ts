/**
 * DNS rebinding: a web page the operator visits can point its own host name at 127.0.0.1 and read the status
 * page, /api and /metrics from the operator's browser. The browser still sends the page's host name in
 * `Host`, so the status server answers only Host values it really serves under: its listen address,
 * localhost and the loopback addresses, and the names in the config's `allowed_hosts:`. Anything else
 * gets 421 Misdirected Request. Bound to a wildcard address (0.0.0.0, ::; a pod in Kubernetes), the server
 * serves under every address of the machine, so any IP literal is also accepted: Prometheus scrapes a pod
 * by its IP, and a rebinding page can only ever make the browser send a host *name*.
 */

import { isIP } from 'node:net';

export interface HostCheckOptions {
  /** The address the server listens on (as configured). */
  listenHost: string;
  /** Extra names (lower case, no port) from `allowed_hosts:`. */
  allowedHosts?: readonly string[];
}

const LOOPBACK = ['localhost', '127.0.0.1', '::1'];
const WILDCARD = new Set(['0.0.0.0', '::', '']);

/** The host name of a Host header value, lower case, without port or IPv6 brackets; undefined if malformed. */
export function hostName(header: string): string | undefined {
  const h = header.trim().toLowerCase();
  const m = /^(?:\[([0-9a-f:.]+)\]|([a-z0-9.-]+))(?::(\d{1,5}))?$/.exec(h);
  if (m === null) return undefined;
  return (m[1] ?? m[2]!).replace(/\.$/, '');
}

/** A predicate over the request's Host header (undefined when it sent none: refused). */
export function createHostCheck(opts: HostCheckOptions): (host: string | undefined) => boolean {
  const allowed = new Set<string>(LOOPBACK);
  const listen = opts.listenHost.replace(/^\[|\]$/g, '').toLowerCase();
  const wildcard = WILDCARD.has(listen);
  if (!wildcard) allowed.add(listen);
  for (const h of opts.allowedHosts ?? []) allowed.add(h.toLowerCase().replace(/\.$/, ''));
  return (host) => {
    if (host === undefined) return false;
    const name = hostName(host);
    if (name === undefined) return false;
    return allowed.has(name) || (wildcard && isIP(name) !== 0);
  };
}
