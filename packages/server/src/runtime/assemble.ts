import { writeFile } from 'node:fs/promises';
import { deleteNetns, NetnsHolder, vethName, waitVethGone, type Subnet } from './net.js';
import { buildConfig, type OciMount } from './oci.js';
import type { SandboxResources } from './types.js';
import type { UndoStack } from './undo.js';

/** PID 1 of every container, sandbox or build step: reaps orphans, forwards signals. */
export const INIT_PATH = '/usr/bin/catatonit';

/** A network namespace of its own, on the bridge, owned by the container's user namespace. */
export interface NetworkPlan {
  netnsName: string;
  bridge: string;
  subnet: Subnet;
  /** Its address; whoever allocates it pushes the release onto the undo stack. */
  address: () => Promise<string>;
  /** Runs once the namespace exists and before anything runs inside (e.g. the egress rules). */
  ready?: (ip: string) => Promise<void>;
}

export interface ContainerProcess {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  binds: Array<{ source: string; target: string }>;
}

/**
 * Everything a container of ours is assembled from. Sandboxes and build steps differ only in what
 * is filled in here; the isolation (user namespace mapped to `idBase`, seccomp, capabilities, cgroup
 * limits, a network namespace of its own or loopback only, the init) is the same code for both.
 */
export interface Assembly {
  undo: UndoStack;
  /** Bundle's config.json (0600: it holds the environment). */
  configPath: string;
  /** Makes the root filesystem (disk, overlay) at `rootfs`; runs beside the network's set-up. */
  prepareRootfs: () => Promise<void>;
  rootfs: string;
  /** The container's own process (run by the init) and its read-only binds besides the init's; made beside the others. */
  process: () => Promise<ContainerProcess>;
  hostname: string;
  cgroupsPath: string;
  resources: SandboxResources;
  /** Host uid/gid of root inside: a sandbox's own range, or the canonical one for a build step. */
  idBase: number;
  /** Whether to bind the host's CA bundle over the image's (known once the rootfs is). */
  caBundle: () => Promise<boolean>;
  cgroupVersion: () => Promise<1 | 2>;
  /** Undefined: loopback only. */
  network?: NetworkPlan;
  /** Mounts besides the process's binds (a sandbox's volumes), made ready before the config is written. */
  extraMounts?: () => Promise<OciMount[]>;
  /** Runs once rootfs, network and process are ready, before the config is written. */
  beforeConfig?: () => Promise<void>;
  /** Per-part timings for benchmarks ('disk', 'network'). */
  timed?: <T>(part: string, fn: () => Promise<T>) => Promise<T>;
}

/**
 * Prepares a container's bundle: rootfs, network namespace and process at once, then its OCI config.
 * Each part pushes its own undo before the next begins; on a failure every part has settled before
 * the error is thrown, so the caller's undo stack sees all of them. Returns the network namespace's
 * holder, whose `finish()` the caller awaits once the container has joined it.
 */
export async function assembleContainer(a: Assembly): Promise<NetnsHolder | undefined> {
  const timed = a.timed ?? (<T>(_: string, fn: () => Promise<T>) => fn());
  const results = await Promise.allSettled([
    timed('disk', a.prepareRootfs),
    a.network ? timed('network', () => openNetwork(a.network!, a.idBase, a.undo)) : Promise.resolve(undefined),
    a.process(),
  ]);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  const holder = (results[1] as PromiseFulfilledResult<NetnsHolder | undefined>).value;
  const proc = (results[2] as PromiseFulfilledResult<ContainerProcess>).value;
  await a.beforeConfig?.();
  const config = buildConfig({
    args: ['/.sb/init', '--', ...proc.argv],
    env: proc.env,
    cwd: proc.cwd || '/',
    hostname: a.hostname,
    rootfs: a.rootfs,
    cgroupsPath: a.cgroupsPath,
    resources: a.resources,
    netnsPath: holder && a.network ? `/run/netns/${a.network.netnsName}` : undefined,
    userNsPath: holder?.userNsPath,
    idBase: a.idBase,
    roBinds: [{ source: INIT_PATH, target: '/.sb/init' }, ...proc.binds],
    caBundle: await a.caBundle(),
    extraMounts: a.extraMounts ? await a.extraMounts() : undefined,
    cgroupVersion: await a.cgroupVersion(),
  });
  await writeFile(a.configPath, JSON.stringify(config), { mode: 0o600 });
  return holder;
}

async function openNetwork(n: NetworkPlan, idBase: number, undo: UndoStack): Promise<NetnsHolder> {
  const ip = await n.address();
  const veth = vethName(n.netnsName);
  // The holder's user namespace must own the netns, so one left from a crash is replaced.
  await deleteNetns(n.netnsName);
  await waitVethGone(veth);
  const holder = await NetnsHolder.start({ netnsName: n.netnsName, veth, bridge: n.bridge, ip, subnet: n.subnet, idBase });
  undo.push('network namespace', async () => {
    await holder.kill();
    await deleteNetns(n.netnsName);
    await waitVethGone(veth);
  });
  await n.ready?.(ip);
  return holder;
}
