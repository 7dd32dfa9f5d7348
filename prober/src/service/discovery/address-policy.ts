/**
 * Which discovered addresses may be probed. Discovery sends every probe with the target's bearer key, so an
 * address a file_sd file, a DNS answer or an SRV record names must not turn the prober into a way to reach
 * what a cluster keeps private: the cloud instance-metadata service (169.254.169.254, fd00:ec2::254,
 * metadata.google.internal: credentials of the node), other link-local addresses (169.254/16, fe80::/10:
 * node-local services), and unspecified addresses (0.0.0.0, ::, which connect to the prober's own host).
 * None of these is probed unless the entry allows its class (`discover.allow: [link-local, metadata,
 * unspecified]`). Loopback and private ranges are ordinary: replicas live there.
 *
 * A name (file_sd and SRV may give names) is judged by its name and by every address it resolves to, at each
 * resolve; the probe connects later, so a name whose DNS answer changes in between is judged again at the
 * next refresh. Use addresses in file_sd where that matters.
 */
import { isIP } from 'node:net';

export const ADDRESS_CLASSES = ['link-local', 'metadata', 'unspecified'] as const;
export type AddressClass = (typeof ADDRESS_CLASSES)[number];

/** Names of cloud instance-metadata services (GCP, AWS, Azure, Alibaba, OpenStack, Oracle use these or the addresses below). */
const METADATA_NAMES = new Set(['metadata', 'metadata.google.internal', 'metadata.goog', 'instance-data', 'instance-data.ec2.internal', 'metadata.azure.internal', 'metadata.platformequinix.com']);
/** Metadata addresses: AWS/GCP/Azure/Oracle/OpenStack IPv4, AWS IPv6, Alibaba, and Azure's wireserver. */
const METADATA_V4 = new Set(['169.254.169.254', '169.254.170.2', '100.100.100.200', '168.63.129.16']);

function v4Octets(ip: string): number[] | undefined {
  const parts = ip.split('.');
  if (parts.length !== 4) return undefined;
  const n = parts.map(Number);
  return n.every((x) => Number.isInteger(x) && x >= 0 && x <= 255) ? n : undefined;
}

/** Expands an IPv6 literal to 8 16-bit groups (handles `::` and a trailing dotted IPv4). */
function v6Groups(ip: string): number[] | undefined {
  let s = ip.toLowerCase().replace(/%.*$/, '');
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (dotted !== null) {
    const o = v4Octets(dotted[1]!);
    if (o === undefined) return undefined;
    s = s.slice(0, -dotted[1]!.length) + `${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return undefined;
  const head = halves[0] === '' ? [] : halves[0]!.split(':');
  const tail = halves.length === 2 ? (halves[1] === '' ? [] : halves[1]!.split(':')) : [];
  const fill = halves.length === 2 ? 8 - head.length - tail.length : 0;
  const groups = [...head, ...Array<string>(Math.max(0, fill)).fill('0'), ...tail].map((g) => parseInt(g, 16));
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : undefined;
}

function classifyV4(ip: string): AddressClass | undefined {
  const o = v4Octets(ip);
  if (o === undefined) return undefined;
  if (METADATA_V4.has(o.join('.'))) return 'metadata';
  if (o[0] === 169 && o[1] === 254) return 'link-local';
  if (o[0] === 0) return 'unspecified';
  return undefined;
}

function classifyV6(ip: string): AddressClass | undefined {
  const g = v6Groups(ip);
  if (g === undefined) return undefined;
  if (g.every((x) => x === 0)) return 'unspecified';
  // fd00:ec2::254, AWS's IPv6 instance-metadata address.
  if (g[0] === 0xfd00 && g[1] === 0x0ec2 && g.slice(2, 7).every((x) => x === 0) && g[7] === 0x254) return 'metadata';
  if ((g[0]! & 0xffc0) === 0xfe80) return 'link-local';
  // IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d) addresses are judged as the IPv4 address.
  if (g.slice(0, 5).every((x) => x === 0) && (g[5] === 0xffff || g[5] === 0)) {
    return classifyV4(`${g[6]! >> 8}.${g[6]! & 255}.${g[7]! >> 8}.${g[7]! & 255}`);
  }
  return undefined;
}

/** The protected class of a host (an IP literal or a name), if any. Names are judged by name only here. */
export function classifyHost(host: string): AddressClass | undefined {
  const h = host.replace(/^\[|\]$/g, '');
  const family = isIP(h);
  if (family === 4) return classifyV4(h);
  if (family === 6) return classifyV6(h);
  const name = h.toLowerCase().replace(/\.$/, '');
  return METADATA_NAMES.has(name) ? 'metadata' : undefined;
}

/** Why `host` (resolving to `resolved`) may not be probed under `allow`, or undefined when it may. */
export function refusal(host: string, resolved: readonly string[], allow: readonly AddressClass[]): string | undefined {
  const own = classifyHost(host);
  if (own !== undefined && !allow.includes(own)) return `${own} address`;
  for (const a of resolved) {
    const c = classifyHost(a);
    if (c !== undefined && !allow.includes(c)) return `resolves to a ${c} address (${a})`;
  }
  return undefined;
}
