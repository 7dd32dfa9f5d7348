/**
 * A tiny authoritative DNS server over UDP for discovery tests: answers A, AAAA and SRV questions from a
 * zone the test can change while it runs; unknown names get NXDOMAIN, known names without the asked type
 * an empty answer (NODATA). Listens on 127.0.0.1, port 0.
 */
import { createSocket, type Socket } from 'node:dgram';
import { isIPv4, isIPv6 } from 'node:net';

export interface Zone {
  [name: string]: { a?: string[]; aaaa?: string[]; srv?: { port: number; target: string }[] };
}

export interface DnsServer {
  /** `127.0.0.1:PORT`, for Resolver.setServers. */
  address: string;
  zone: Zone;
  /** While true every question gets SERVFAIL. */
  failing: boolean;
  close(): Promise<void>;
}

const TYPE = { A: 1, AAAA: 28, SRV: 33 } as const;

function encodeName(name: string): Buffer {
  const parts = name.replace(/\.$/, '').split('.').filter((p) => p !== '');
  return Buffer.concat([...parts.map((p) => Buffer.concat([Buffer.from([p.length]), Buffer.from(p, 'ascii')])), Buffer.from([0])]);
}

function ipv6Bytes(ip: string): Buffer {
  const [head, tail] = ip.split('::') as [string, string | undefined];
  const h = head === '' ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
  const b = Buffer.alloc(16);
  groups.forEach((g, i) => b.writeUInt16BE(parseInt(g, 16), i * 2));
  return b;
}

function answer(type: number, data: Buffer): Buffer {
  const head = Buffer.alloc(12);
  head.writeUInt16BE(0xc00c, 0); // pointer to the question's name
  head.writeUInt16BE(type, 2);
  head.writeUInt16BE(1, 4); // IN
  head.writeUInt32BE(5, 6); // TTL
  head.writeUInt16BE(data.length, 10);
  return Buffer.concat([head, data]);
}

export async function startDnsServer(zone: Zone = {}): Promise<DnsServer> {
  const socket: Socket = createSocket('udp4');
  const state = { failing: false };
  socket.on('message', (msg, rinfo) => {
    if (msg.length < 17) return;
    let off = 12;
    const labels: string[] = [];
    while (off < msg.length && msg[off] !== 0) { const len = msg[off]!; labels.push(msg.subarray(off + 1, off + 1 + len).toString('ascii')); off += len + 1; }
    const qEnd = off + 5;
    const qtype = msg.readUInt16BE(off + 1);
    const name = labels.join('.').toLowerCase();
    const rec = zone[name];
    const answers: Buffer[] = [];
    if (rec !== undefined && !state.failing) {
      if (qtype === TYPE.A) for (const ip of rec.a ?? []) if (isIPv4(ip)) answers.push(answer(TYPE.A, Buffer.from(ip.split('.').map(Number))));
      if (qtype === TYPE.AAAA) for (const ip of rec.aaaa ?? []) if (isIPv6(ip)) answers.push(answer(TYPE.AAAA, ipv6Bytes(ip)));
      if (qtype === TYPE.SRV) {
        for (const s of rec.srv ?? []) {
          const fixed = Buffer.alloc(6);
          fixed.writeUInt16BE(10, 0);
          fixed.writeUInt16BE(10, 2);
          fixed.writeUInt16BE(s.port, 4);
          answers.push(answer(TYPE.SRV, Buffer.concat([fixed, encodeName(s.target)])));
        }
      }
    }
    const header = Buffer.alloc(12);
    header.writeUInt16BE(msg.readUInt16BE(0), 0);
    const rcode = state.failing ? 2 : rec === undefined ? 3 : 0;
    header.writeUInt16BE(0x8180 | 0x0400 | rcode, 2); // response, authoritative, recursion desired+available
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(answers.length, 6);
    socket.send(Buffer.concat([header, msg.subarray(12, qEnd), ...answers]), rinfo.port, rinfo.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${socket.address().port}`,
    zone,
    get failing() { return state.failing; },
    set failing(v: boolean) { state.failing = v; },
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
