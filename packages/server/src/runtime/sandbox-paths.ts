import { join } from 'node:path';
import { describeCause, isProgrammingError, ServiceError } from '@sandboxd/protocol';
import type { SandboxSpec } from './types.js';

export const ID_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;
const HOSTNAME_RE = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
/** A directory in the sandbox's own disk for the agent's state (kept across stop/start). */
export const AGENT_STATE_DIR = '/.sb/state';
/**
 * Traversable, not listable: crun sets up the rootfs and bind sources from inside the user
 * namespace, where host root's files are "nobody" and only the "other" bits count. Secrets
 * (config.json with the env) are 0600; the agent socket is writable (connectable) by root only.
 */
export const DIR_MODE = 0o711;
/**
 * A sandbox's own directory: group-owned by its root's host gid, so that crun (inside the user
 * namespace) may traverse it and no one else but host root may, other sandboxes included.
 */
export const SANDBOX_DIR_MODE = 0o710;

export interface SandboxPaths {
  dir: string;
  image: string;
  disk: string;
  upper: string;
  work: string;
  rootfs: string;
  /** Where the idmapped layers are mounted for a moment while the overlay is made. */
  lowerScratch: string;
  config: string;
  socket: string;
  net: string;
  log: string;
  /** The loop device the disk was last mounted on (see detachHostMounts). */
  loop: string;
  /** Where a snapshot mounts the sandbox's disk for a moment (exportLayer). */
  snapMount: string;
}

/**
 * `${dataDir}/sandboxes/<id>/`: disk.img (sparse ext4) → disk/ {upper,work}; rootfs/ (overlay);
 * config.json; agent.sock (host side only); net.json (address, egress policy); ids.json (host id
 * range); lower/ (empty: the idmapped layers pass through while the overlay is mounted); crun.log.
 */
export function sandboxPaths(dataDir: string, id: string): SandboxPaths {
  const dir = join(dataDir, 'sandboxes', id);
  const disk = join(dir, 'disk');
  return {
    dir,
    image: join(dir, 'disk.img'),
    disk,
    upper: join(disk, 'upper'),
    work: join(disk, 'work'),
    rootfs: join(dir, 'rootfs'),
    lowerScratch: join(dir, 'lower'),
    config: join(dir, 'config.json'),
    socket: join(dir, 'agent.sock'),
    net: join(dir, 'net.json'),
    log: join(dir, 'crun.log'),
    loop: join(dir, 'disk.loop'),
    snapMount: join(dir, 'snap'),
  };
}

// Ids, hostnames and resources reach the runtime from the services, which validated what a client
// sent: one that fails here is a broken contract of ours (a TypeError: a 500 with an incident id,
// not a 400 that blames the client). Checked all the same: an id becomes a path.
export function checkId(id: string): void {
  if (!ID_RE.test(id)) throw new TypeError(`bad sandbox id ${JSON.stringify(id)}`);
}

export function checkSpec(spec: SandboxSpec): void {
  checkId(spec.id);
  if (!HOSTNAME_RE.test(spec.hostname)) throw new TypeError(`bad hostname ${JSON.stringify(spec.hostname)}`);
  const r = spec.resources;
  if (!(r.vcpu > 0 && r.memoryMb >= 16 && r.diskGb > 0 && r.pidsMax >= 8)) {
    throw new TypeError(`bad resources ${JSON.stringify(r)}`);
  }
}

/**
 * What a failed lifecycle verb throws: a ServiceError as it is, a bug of ours as it is (a 500 with an
 * incident id, not a "try again"), anything else as an outage whose text (host paths, a tool's
 * output) is for the log only.
 */
export function asRuntimeError(err: unknown): unknown {
  if (err instanceof ServiceError || isProgrammingError(err)) return err;
  return new ServiceError('RUNTIME_ERROR', 'the container runtime failed on this sandbox; try again').withDetail(describeCause(err));
}
