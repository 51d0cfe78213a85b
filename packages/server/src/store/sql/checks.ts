import { NODE_STATUSES, REPLICA_ROLES, type NodeCapacity, type NodeRegistration, type NodeReport, type NodeStatus, type ReplicaEntry } from '../types/index.js';

/*
 * The checks the repositories make of their input before any SQL: what a node sends is checked
 * once, here, the same way for SQLite and PostgreSQL (a bad status or a 10 kB id never reaches a table).
 */

/** A sandbox query's node id: any string (rows of a single machine carry its host name), or none; else a TypeError. */
export function checkNodeFilter(nodeId: unknown): string | undefined {
  if (nodeId !== undefined && typeof nodeId !== 'string') throw new TypeError(`a node id to filter by is a string, not ${typeof nodeId}`);
  return nodeId;
}

const NODE_ID = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const MAX_LEASE_MS = 24 * 3600 * 1000;
const MAX_URL_LENGTH = 2048;
const MAX_WARM_KEYS = 1024;
const MAX_WARM_KEY_LENGTH = 256;
const LAYERS_DIGEST = /^[\x21-\x7e]{1,256}$/;

const shown = (v: unknown): string => (typeof v === 'string' ? JSON.stringify(v.length > 80 ? `${v.slice(0, 80)}…` : v) : typeof v);

export function checkNodeId(id: unknown): string {
  if (typeof id !== 'string' || !NODE_ID.test(id)) {
    throw new TypeError(`a node id is a DNS label ([a-z0-9-], 1 to 63 characters, no hyphen at either end), not ${shown(id)}`);
  }
  return id;
}

export function checkNodeStatus(status: unknown): NodeStatus {
  if (!NODE_STATUSES.includes(status as NodeStatus)) throw new TypeError(`a node's status is one of ${NODE_STATUSES.join(', ')}, not ${shown(status)}`);
  return status as NodeStatus;
}


export function checkLeaseMs(leaseMs: unknown): number {
  if (!Number.isSafeInteger(leaseMs) || (leaseMs as number) < 1 || (leaseMs as number) > MAX_LEASE_MS) {
    throw new TypeError(`a lease is a whole number of milliseconds from 1 to ${MAX_LEASE_MS}, not ${String(leaseMs)}`);
  }
  return leaseMs as number;
}

/** `now` as the stores write times (toISOString), or undefined for the store's own clock. */
export function checkNow(now: unknown): string | undefined {
  if (now === undefined) return undefined;
  const at = typeof now === 'string' ? new Date(now) : undefined;
  if (!at || Number.isNaN(at.getTime())) throw new TypeError(`now is an ISO-8601 time, not ${shown(now)}`);
  return at.toISOString();
}

function count(v: unknown, what: string): number {
  if (!Number.isSafeInteger(v) || (v as number) < 0) throw new TypeError(`${what} is a whole number, 0 or more, not ${String(v)}`);
  return v as number;
}

function record(v: unknown, what: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new TypeError(`${what} is an object, not ${Array.isArray(v) ? 'an array' : shown(v)}`);
  return v as Record<string, unknown>;
}

export function checkNodeCapacity(v: unknown): NodeCapacity {
  const c = record(v, "a node's capacity");
  return {
    vcpu: count(c.vcpu, 'capacity.vcpu'),
    memoryMb: count(c.memoryMb, 'capacity.memoryMb'),
    diskGb: count(c.diskGb, 'capacity.diskGb'),
    maxSandboxes: count(c.maxSandboxes, 'capacity.maxSandboxes'),
  };
}

function parseUrl(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}

export function checkNodeRegistration(v: unknown): NodeRegistration {
  const r = record(v, 'a node registration');
  const id = checkNodeId(r.id);
  const url = typeof r.url === 'string' && r.url.length <= MAX_URL_LENGTH ? parseUrl(r.url) : undefined;
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.username !== '' || url.password !== '') {
    throw new TypeError(`a node's URL is an http or https URL without credentials, at most ${MAX_URL_LENGTH} characters, not ${shown(r.url)}`);
  }
  return { id, url: r.url as string, capacity: checkNodeCapacity(r.capacity) };
}

export function checkNodeReport(v: unknown): NodeReport {
  const r = record(v, 'a node report');
  const u = record(r.usage, "a node's usage");
  const warm = Object.entries(record(r.warm, "a node's warm counts"));
  if (warm.length > MAX_WARM_KEYS) throw new TypeError(`a node reports at most ${MAX_WARM_KEYS} warm-pool keys, not ${warm.length}`);
  for (const [key, n] of warm) {
    if (key.length === 0 || key.length > MAX_WARM_KEY_LENGTH) throw new TypeError(`a warm-pool key has 1 to ${MAX_WARM_KEY_LENGTH} characters, not ${shown(key)}`);
    count(n, `warm[${shown(key)}]`);
  }
  if (r.layersDigest !== null && (typeof r.layersDigest !== 'string' || !LAYERS_DIGEST.test(r.layersDigest))) {
    throw new TypeError(`a layers digest is null or 1 to 256 printable characters, not ${shown(r.layersDigest)}`);
  }
  return {
    usage: {
      sandboxes: count(u.sandboxes, 'usage.sandboxes'),
      vcpu: count(u.vcpu, 'usage.vcpu'),
      memoryMb: count(u.memoryMb, 'usage.memoryMb'),
      diskGb: count(u.diskGb, 'usage.diskGb'),
    },
    warm: Object.fromEntries(warm) as Record<string, number>,
    layersDigest: r.layersDigest,
    ...(r.capacity === undefined ? {} : { capacity: checkNodeCapacity(r.capacity) }),
    ...(r.orphans === undefined ? {} : { orphans: count(r.orphans, 'orphans') }),
  };
}

/** A byte offset, chunk number or length the file repositories take: a whole number from `min`, else a TypeError before any SQL. */
export function checkWhole(v: unknown, what: string, min = 0): number {
  if (!Number.isSafeInteger(v) || (v as number) < min) throw new TypeError(`${what} is a whole number from ${min}, not ${String(v)}`);
  return v as number;
}

/** A blob's content name: 64 lowercase hex digits. */
export function checkBlobSha256(v: unknown): string {
  if (typeof v !== 'string' || !/^[0-9a-f]{64}$/.test(v)) throw new TypeError(`a blob's sha256 is 64 lowercase hex digits, not ${shown(v)}`);
  return v;
}

const PRINTABLE = /^[\x20-\x7e]+$/;

function text(v: unknown, what: string, max: number): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > max || !PRINTABLE.test(v)) throw new TypeError(`${what} is 1 to ${max} printable characters, not ${shown(v)}`);
  return v;
}

/** What a serving process says of itself (ReplicaRepo.beat). */
export function checkReplicaEntry(v: unknown): ReplicaEntry {
  const e = record(v, 'a replica entry');
  if (!REPLICA_ROLES.includes(e.role as ReplicaEntry['role'])) throw new TypeError(`a replica's role is one of ${REPLICA_ROLES.join(', ')}, not ${shown(e.role)}`);
  if (!Number.isSafeInteger(e.pid) || (e.pid as number) < 1) throw new TypeError(`a replica's pid is a whole number from 1, not ${String(e.pid)}`);
  const startedAt = checkNow(e.startedAt);
  if (startedAt === undefined) throw new TypeError("a replica's start time is an ISO-8601 time");
  return {
    id: text(e.id, "a replica's id", 200),
    role: e.role as ReplicaEntry['role'],
    hostname: text(e.hostname, "a replica's host name", 255),
    pid: e.pid as number,
    url: text(e.url, "a replica's URL", MAX_URL_LENGTH),
    version: text(e.version, "a replica's version", 100),
    startedAt,
  };
}
