import { open } from 'node:fs/promises';

/** A TCP port something listens on inside a sandbox, on one address. */
export interface ListeningPort {
  port: number;
  /** The address it listens on: 0.0.0.0 or :: for all of them. */
  address: string;
  family: 4 | 6;
}

/**
 * The kernel's socket tables are read up to this much (~3,400 sockets of 150 bytes; the kernel lists
 * listeners first): a sandbox holding more gets its first ports listed. The kernel makes the table as
 * it is read, so this bounds its work too: a full 30,000-listener table took 1.75 s to read.
 */
const MAX_TABLE_BYTES = 512 * 1024;
const LISTEN = '0A';

/** An address of /proc/net/tcp{,6}: 32-bit words, each in the host's (little-endian) byte order. */
function addressOf(hex: string, family: 4 | 6): string | undefined {
  if (!/^[0-9A-Fa-f]+$/.test(hex) || hex.length !== (family === 4 ? 8 : 32)) return undefined;
  const bytes: number[] = [];
  for (let w = 0; w < hex.length; w += 8) {
    const word = hex.slice(w, w + 8);
    for (let b = 6; b >= 0; b -= 2) bytes.push(parseInt(word.slice(b, b + 2), 16));
  }
  if (family === 4) return bytes.join('.');
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  // The shortest form: the longest run of zero groups as ::.
  let best = { at: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > best.len) best = { at: i, len: j - i };
    i = j;
  }
  if (best.len < 2) return groups.join(':');
  return `${groups.slice(0, best.at).join(':')}::${groups.slice(best.at + best.len).join(':')}`;
}

/** The listening sockets of one /proc/net/tcp{,6} table. */
export function parseListening(table: string, family: 4 | 6): ListeningPort[] {
  const out: ListeningPort[] = [];
  for (const line of table.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 4 || f[3] !== LISTEN) continue;
    const [addr, portHex] = f[1]!.split(':');
    const address = addr === undefined ? undefined : addressOf(addr, family);
    const port = portHex && /^[0-9A-Fa-f]{4}$/.test(portHex) ? parseInt(portHex, 16) : NaN;
    if (address !== undefined && port > 0) out.push({ port, address, family });
  }
  return out;
}

async function readCapped(path: string): Promise<string> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(64 * 1024);
    const parts: Buffer[] = [];
    let total = 0;
    while (total < MAX_TABLE_BYTES) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) break;
      parts.push(Buffer.from(buf.subarray(0, bytesRead)));
      total += bytesRead;
    }
    return Buffer.concat(parts).toString('latin1');
  } finally {
    await fh.close();
  }
}

/**
 * What listens in the network namespace of the process `pid` (a sandbox's init), from the kernel's
 * own tables: nothing the sandbox says about itself. Sorted by port, then address.
 */
export async function listeningPorts(pid: number): Promise<ListeningPort[]> {
  const all: ListeningPort[] = [];
  for (const [name, family] of [['tcp', 4], ['tcp6', 6]] as const) {
    try {
      all.push(...parseListening(await readCapped(`/proc/${pid}/net/${name}`), family));
    } catch {
      // no such table (no IPv6), or the process is gone
    }
  }
  const seen = new Set<string>();
  return all
    .filter((p) => !seen.has(`${p.family}/${p.address}/${p.port}`) && seen.add(`${p.family}/${p.address}/${p.port}`))
    .sort((a, b) => a.port - b.port || a.address.localeCompare(b.address));
}
