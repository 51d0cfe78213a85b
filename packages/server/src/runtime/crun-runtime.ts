import { listeningPorts, type ListeningPort } from './listening.js';
import { chmod, chown, mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { describeCause, isProgrammingError, ServiceError } from '@sandboxd/protocol';
import { mapIdRangeOffThread, moveIdRange, TooManyEntries } from '../images/shift.js';
import { CANONICAL_ID_OFFSET, ID_RANGE, LEGACY_ID_OFFSET } from '../images/types.js';
import { checkSuidDumpable, ensureAgentRuntime, nodeArgv, NODE_MOUNT, type AgentRuntime } from './agent-runtime.js';
import { AGENT_LISTEN_FD, runWithAgentSocket } from './agent-socket.js';
import {
  cgroupExists,
  cgroupPids,
  childCgroups,
  detectCgroups,
  isFrozen,
  readCgroupStats,
  removeCgroup,
  setFrozen,
  type CgroupLayout,
} from './cgroups.js';
import { Crun } from './crun.js';
import {
  checkLowerDirs,
  createDiskImage,
  detachMounts,
  diskUsage,
  loopBacks,
  loopDeviceAt,
  mountDiskImage,
  mountOverlay,
  removeTree,
  unmount,
  unmountDisk,
  waitLoopReleased,
  type DiskTools,
} from './disk.js';
import { DiskPool, prepareDiskDir, prepareUpper } from './disk-pool.js';
import {
  applyNftables,
  deleteBridge,
  deleteNftTable,
  enableIpForwarding,
  ensureBridge,
  fixHybridCgroups,
  hostIpv4Addresses,
  hostResolvers,
  type EgressEndpoint,
} from './host.js';
import { DEFAULT_ID_REGISTRY_DIR, HostIdRegistry, IdRanges, RangeHeldElsewhere, readIdRange, writeIdRange, type IdRangeFile } from './id-ranges.js';
import { ensureIdmapHelper } from './idmap.js';
import { hasOwnFilesystem } from './mounts.js';
import { hasDomainRules, isRestricted, policyObjects, policyRemoval, policyTransaction, type EgressPolicy } from './egress-policy.js';
import { EgressProxy } from './egress-proxy.js';
import { deleteNetns, intToIp, Ipam, NetnsHolder, normalizeCidr, parseSubnet, vethName, waitVethGone, type Subnet } from './net.js';
import { buildConfig } from './oci.js';
import { OomWatch } from './oom-watch.js';
import { proc, procOk, toolError, type ProcResult } from './proc.js';
import { runStep, cleanupStaleSteps, type StepContext } from './step-runner.js';
import { ExportTooLarge, type Runtime, type RuntimeStatus, type SandboxSpec, type SandboxStats, type StepRunOptions } from './types.js';
import { UndoStack } from './undo.js';

export interface CrunRuntimeOptions {
  dataDir: string;
  /** The agent bundle (agent.cjs); its directory is bound read-only at /.sb/agent. */
  agentBundlePath: string;
  log?: (msg: string) => void;
  bridgeName?: string;
  subnetCidr?: string;
  /** Cgroup directory (relative to each hierarchy's root) holding one child per sandbox. */
  cgroupParent?: string;
  /** Called before each step of create/start; a throw fails that step (tests inject failures here). */
  stepHook?: (id: string, step: string) => void | Promise<void>;
  /** Duration of each create/start step, for benchmarks. */
  onTiming?: (id: string, step: string, ms: number) => void;
  /** Ready-made disks kept per disk size (0 disables the pool). Default 2. */
  diskPoolSize?: number;
  /** Host-wide record of the id ranges in use, shared with other data dirs (default /run/sandboxd/id-ranges). */
  idRegistryDir?: string;
  /** IPv4 addresses or CIDRs sandboxes may reach although they lie in a blocked range (host.ts BLOCKED_RANGES). */
  egressAllow?: string[];
  /** Single TCP services sandboxes may reach in a blocked range (the host's apt mirror). */
  egressAllowEndpoints?: EgressEndpoint[];
  /** How the egress proxy resolves a name a connection carries (default: the host's resolvers). */
  egressResolve?: (name: string) => Promise<string[]>;
}

export const INIT_PATH = '/usr/bin/catatonit';
/** A snapshot's copy (the sandbox frozen) and its ownership pass each end after this long. */
export const SNAPSHOT_COPY_TIMEOUT_MS = 600_000;
/** Names a snapshot may hold (every hard link counts): past it the snapshot is refused. */
export const SNAPSHOT_MAX_ENTRIES = 2_000_000;
const ID_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;
const HOSTNAME_RE = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
/** A directory in the sandbox's own disk for the agent's state (kept across stop/start). */
export const AGENT_STATE_DIR = '/.sb/state';
/**
 * Traversable, not listable: crun sets up the rootfs and bind sources from inside the user
 * namespace, where host root's files are "nobody" and only the "other" bits count. Secrets
 * (config.json with the env) are 0600; the agent socket is writable (connectable) by root only.
 */
const DIR_MODE = 0o711;
/**
 * A sandbox's own directory: group-owned by its root's host gid, so that crun (inside the user
 * namespace) may traverse it and no one else but host root may, other sandboxes included.
 */
const SANDBOX_DIR_MODE = 0o710;

interface SandboxPaths {
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

/** What the steps of one create/start share. */
interface BootContext {
  spec: SandboxSpec;
  p: SandboxPaths;
  undo: UndoStack;
  fresh: boolean;
  pooled: boolean;
  diskBytes: number;
  range: IdRangeFile;
  hook: (name: string) => Promise<void>;
}

/**
 * The sandbox runtime: one crun container per sandbox. Layout of `${dataDir}`:
 *   sandboxes/<id>/  disk.img (sparse ext4) → disk/ {upper,work}; rootfs/ (overlay); config.json;
 *                    agent.sock (host side only); net.json (address); ids.json (host id range);
 *                    lower/ (empty: the idmapped layers pass through while the overlay is mounted);
 *                    crun.log
 *   crun/            crun's state (--root): every container in it is ours
 *   agent-runtime/   node + its libraries, bound at /.sb/node
 *   bin/             the idmap helper, compiled from native/idmap-mount.c
 *   steps/, crun-steps/  build steps in flight
 *
 * Each sandbox runs as a host id range of its own (id-ranges.ts). The layers are shared and stay
 * in canonical ownership on disk; each sandbox mounts them through idmapped mounts that show them
 * owned by its range. Its upper lives on its own disk, owned by its range.
 */
export class CrunRuntime implements Runtime {
  readonly dataDir: string;
  readonly bridge: string;
  readonly subnet: Subnet;
  readonly subnetCidr: string;
  readonly cgroupParent: string;
  private readonly agentBundlePath: string;
  private readonly log: (msg: string) => void;
  private readonly crun: Crun;
  private readonly stepCrun: Crun;
  /** This runtime's nftables table (inet family). */
  readonly nftTable: string;
  private readonly netnsPrefix: string;
  private readonly opts: CrunRuntimeOptions;
  private layoutP?: Promise<CgroupLayout>;
  private ipamP?: Promise<Ipam>;
  private agentRtP?: Promise<AgentRuntime>;
  private idRangesP?: Promise<IdRanges>;
  private helperP?: Promise<string>;
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly pool: DiskPool;
  private readonly oom: OomWatch;
  private readonly proxy: EgressProxy;
  /** The host end of the egress proxy's veth. */
  readonly proxyVeth: string;
  /** Sandboxes with an egress policy other than the default, by id and by address. */
  private readonly policies = new Map<string, { ip: string; policy: EgressPolicy }>();
  private readonly policyByIp = new Map<string, EgressPolicy>();
  /** Addresses whose nftables counter of refusals exists; refusals the proxy made, by address. */
  private readonly counters = new Set<string>();
  private readonly proxyDenied = new Map<string, number>();

  constructor(opts: CrunRuntimeOptions) {
    this.opts = opts;
    this.dataDir = resolve(opts.dataDir);
    this.agentBundlePath = resolve(opts.agentBundlePath);
    this.log = opts.log ?? (() => undefined);
    this.bridge = opts.bridgeName ?? 'sbbr0';
    if (!/^[A-Za-z0-9_.-]{1,15}$/.test(this.bridge)) throw new Error(`bad bridge name ${this.bridge}`);
    this.subnetCidr = opts.subnetCidr ?? '10.88.0.0/16';
    this.subnet = parseSubnet(this.subnetCidr);
    this.cgroupParent = (opts.cgroupParent ?? 'sandboxd').replace(/^\/+|\/+$/g, '');
    if (!/^[A-Za-z0-9_.\-/]+$/.test(this.cgroupParent)) throw new Error(`bad cgroup parent ${this.cgroupParent}`);
    this.crun = new Crun(join(this.dataDir, 'crun'));
    this.stepCrun = new Crun(join(this.dataDir, 'crun-steps'));
    this.nftTable = this.bridge === 'sbbr0' ? 'sandboxd' : `sandboxd_${this.bridge.replace(/[^A-Za-z0-9_]/g, '_')}`;
    // '_' never occurs in a sandbox id, so a name parses back unambiguously.
    this.netnsPrefix = `${this.cgroupParent.replace(/[^A-Za-z0-9-]/g, '_')}_`;
    this.pool = new DiskPool(join(this.dataDir, 'disk-pool'), opts.diskPoolSize ?? 2, this.log, undefined, undefined, () => this.diskTools());
    this.oom = new OomWatch({ layout: () => this.layout(), parent: `/${this.cgroupParent}`, isMember: (n) => ID_RE.test(n), log: this.log });
    this.proxyVeth = `sbpx${createHash('sha256').update(this.bridge).digest('hex').slice(0, 11)}`;
    this.proxy = new EgressProxy({
      bridge: this.bridge,
      subnetCidr: `${intToIp(this.subnet.base)}/${this.subnet.prefix}`,
      // '_' never occurs in a sandbox id: list() never takes it for one.
      netns: `${this.netnsPrefix}_egress`,
      veth: this.proxyVeth,
      policyOf: (ip) => {
        const p = this.policyByIp.get(ip);
        return p && hasDomainRules(p) ? p : undefined;
      },
      onDenied: (ip) => this.proxyDenied.set(ip, (this.proxyDenied.get(ip) ?? 0) + 1),
      resolve: opts.egressResolve,
      log: this.log,
    });
  }

  // ---- names and paths -------------------------------------------------------------------------

  paths(id: string): SandboxPaths {
    const dir = join(this.dataDir, 'sandboxes', id);
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

  netnsName(id: string): string {
    return `${this.netnsPrefix}${id}`;
  }

  vethName(id: string): string {
    return vethName(this.netnsName(id));
  }

  cgroupPath(id: string): string {
    return `/${this.cgroupParent}/${id}`;
  }

  agentSocket(id: string): string {
    return this.paths(id).socket;
  }

  private layout(): Promise<CgroupLayout> {
    return (this.layoutP ??= detectCgroups());
  }

  private agentRuntime(): Promise<AgentRuntime> {
    this.agentRtP ??= ensureAgentRuntime(this.dataDir).catch((err: unknown) => {
      this.agentRtP = undefined;
      throw err;
    });
    return this.agentRtP;
  }

  /** Addresses persisted by sandboxes on disk, claimed once per process. */
  private ipam(): Promise<Ipam> {
    this.ipamP ??= (async () => {
      const ipam = new Ipam(this.subnet);
      for (const id of await this.sandboxDirIds()) {
        const ip = await this.readIp(id);
        if (ip) {
          try {
            ipam.claim(ip);
          } catch (err) {
            this.log(`sandbox ${id}: ignoring address ${ip}: ${String(err)}`);
          }
        }
      }
      return ipam;
    })();
    return this.ipamP;
  }

  /** Id ranges persisted by sandboxes on disk, claimed once per process. */
  private idRanges(): Promise<IdRanges> {
    this.idRangesP ??= (async () => {
      const ranges = new IdRanges(new HostIdRegistry(this.opts.idRegistryDir ?? DEFAULT_ID_REGISTRY_DIR, this.dataDir));
      for (const id of await this.sandboxDirIds()) {
        try {
          const r = await readIdRange(this.paths(id).dir);
          if (r) ranges.claim(id, r.base);
        } catch (err) {
          // Held elsewhere: its next start moves it to a range of its own.
          this.log(`sandbox ${id}: ignoring its id range: ${String(err)}`);
        }
      }
      ranges.pruneRegistry();
      return ranges;
    })();
    return this.idRangesP;
  }

  /** The disk tools of the native helper (mounts and formats without reading the mount table). */
  private async diskTools(): Promise<DiskTools> {
    return { helper: await this.idmapHelper(), imagesDir: join(this.dataDir, 'disk-images') };
  }

    private idmapHelper(): Promise<string> {
    this.helperP ??= ensureIdmapHelper(this.dataDir).catch((err: unknown) => {
      this.helperP = undefined;
      throw err;
    });
    return this.helperP;
  }

  private async readIp(id: string): Promise<string | undefined> {
    return (await this.readNet(id)).ip;
  }

  /** The sandbox's address and egress policy (net.json), as far as they are readable. */
  private async readNet(id: string): Promise<{ ip?: string; egress?: EgressPolicy }> {
    try {
      const j = JSON.parse(await readFile(this.paths(id).net, 'utf8')) as { ip?: unknown; egress?: unknown };
      const ip = typeof j.ip === 'string' ? j.ip : undefined;
      const e = j.egress as Partial<EgressPolicy> | undefined;
      const strings = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === 'string');
      const egress = e && typeof e.internet === 'boolean' && strings(e.allow) && strings(e.deny) ? { internet: e.internet, allow: e.allow!, deny: e.deny! } : undefined;
      return { ip, egress };
    } catch {
      return {};
    }
  }

  private async writeNet(id: string, net: { ip: string; egress?: EgressPolicy }): Promise<void> {
    const p = this.paths(id).net;
    await writeFile(`${p}.tmp`, JSON.stringify(net));
    await rename(`${p}.tmp`, p);
  }

  private async sandboxDirIds(): Promise<string[]> {
    try {
      return (await readdir(join(this.dataDir, 'sandboxes'), { withFileTypes: true }))
        .filter((e) => e.isDirectory() && ID_RE.test(e.name))
        .map((e) => e.name);
    } catch {
      return [];
    }
  }

  private stepContext(): StepContext {
    return {
      dataDir: this.dataDir,
      crun: this.stepCrun,
      cgroupParent: this.cgroupParent,
      netnsPrefix: this.netnsPrefix,
      bridge: this.bridge,
      subnet: this.subnet,
      ipam: () => this.ipam(),
      layout: () => this.layout(),
      idmapHelper: () => this.idmapHelper(),
      log: this.log,
    };
  }

  /** Serializes operations on one id (create racing destroy, two stops). */
  private withLock<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(id) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(fn);
    const tail = next.catch(() => undefined);
    this.locks.set(id, tail);
    void tail.then(() => {
      if (this.locks.get(id) === tail) this.locks.delete(id);
    });
    return next;
  }

  // ---- host ------------------------------------------------------------------------------------

  async setupHost(): Promise<void> {
    const layout = await this.layout();
    if (layout.version === 1) {
      await fixHybridCgroups(this.log);
      this.layoutP = detectCgroups();
    }
    await checkSuidDumpable();
    await enableIpForwarding();
    await ensureBridge(this.bridge, this.subnet);
    // The policies sandboxes keep on disk go into the same transaction as the table: a restart
    // never leaves a sandbox without its rules.
    this.policies.clear();
    this.policyByIp.clear();
    this.counters.clear();
    for (const id of await this.sandboxDirIds()) {
      const net = await this.readNet(id);
      if (net.ip && isRestricted(net.egress)) this.remember(id, net.ip, net.egress);
      // A snapshot's copy that a crash cut short left the disk mounted for it.
      const snap = this.paths(id).snapMount;
      if (existsSync(snap) && (await hasOwnFilesystem(snap))) {
        await unmount(snap).catch(async (err: unknown) => {
          this.log(`sandbox ${id}: ${snap} is busy (${String(err)}); detaching it`);
          await procOk('umount', ['-l', snap]).catch((e: unknown) => this.log(`sandbox ${id}: cannot detach ${snap}: ${String(e)}`));
        });
      }
    }
    const policies = [...this.policies.values()];
    if (policies.some((e) => hasDomainRules(e.policy))) await this.proxy.ensure();
    await applyNftables({
      table: this.nftTable,
      bridge: this.bridge,
      subnet: this.subnet,
      resolvers: await hostResolvers(),
      hostAddresses: hostIpv4Addresses(),
      egressAllow: (this.opts.egressAllow ?? []).map(normalizeCidr),
      egressAllowEndpoints: this.opts.egressAllowEndpoints ?? [],
      proxyVeth: this.proxyVeth,
      proxyMark: this.proxy.mark,
      policies,
    });
    for (const e of policies) this.counters.add(e.ip);
    await mkdir(this.dataDir, { recursive: true, mode: DIR_MODE });
    await ensureTraversable(this.dataDir, this.log);
    for (const d of ['sandboxes', 'crun', 'crun-steps', 'steps']) await mkdir(join(this.dataDir, d), { recursive: true, mode: DIR_MODE });
    await this.agentRuntime();
    await this.idmapHelper();
    await cleanupStaleSteps(this.stepContext());
  }

  /**
   * Removes what setupHost made that belongs to this runtime alone: its bridge, nftables table
   * and cgroup parent. For tests and uninstall; sandboxes must be gone first.
   */
  async teardownHost(): Promise<void> {
    if ((await this.list()).length > 0) throw new ServiceError('INVALID_STATE', 'sandboxes still exist');
    await this.pool.drain();
    await this.proxy.close();
    await deleteNftTable(this.nftTable);
    await deleteBridge(this.bridge);
    await removeCgroup(await this.layout(), `/${this.cgroupParent}`);
  }

  /** Daemon shutdown: releases node-local spares (pooled disks); sandboxes keep running. */
  async close(): Promise<void> {
    await this.pool.drain();
    // Sandboxes with domain rules have their inspected connections refused until the next start.
    await this.proxy.close();
  }

  // ---- egress policy ---------------------------------------------------------------------------

  private remember(id: string, ip: string, policy: EgressPolicy | undefined): void {
    const old = this.policies.get(id);
    if (old) this.policyByIp.delete(old.ip);
    if (isRestricted(policy)) {
      this.policies.set(id, { ip, policy });
      this.policyByIp.set(ip, policy);
    } else {
      this.policies.delete(id);
    }
  }

  /** Sets (or, for the default, removes) a sandbox's rules: one nft transaction. */
  private async applyPolicy(id: string, ip: string, policy: EgressPolicy | undefined): Promise<void> {
    if (!isRestricted(policy) && !this.policies.has(id)) return;
    if (isRestricted(policy) && hasDomainRules(policy)) await this.proxy.ensure();
    await procOk('nft', ['-f', '-'], { input: policyTransaction(this.nftTable, ip, policy, this.proxyVeth) });
    if (isRestricted(policy)) this.counters.add(ip);
    this.remember(id, ip, policy);
    this.proxy.revoke(ip);
  }

  /**
   * Changes a running, paused or stopped sandbox's egress policy. New connections follow it at once
   * (one nft transaction; the proxy asks for the policy on every connection and request). Kept on
   * the sandbox's disk, so a restart of the daemon or a start of the sandbox applies it again.
   */
  setEgress(id: string, policy: EgressPolicy): Promise<void> {
    checkId(id);
    return this.withLock(id, async () => {
      if (!existsSync(this.paths(id).dir)) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
      const net = await this.readNet(id);
      if (!net.ip) throw new ServiceError('INVALID_STATE', `sandbox ${id} was created without internet access: it has no network to set rules on`);
      await this.writeNet(id, { ip: net.ip, egress: isRestricted(policy) ? policy : undefined });
      await this.applyPolicy(id, net.ip, policy);
    });
  }

  /** The sandbox's policy as the runtime holds it (undefined: the default). */
  egressOf(id: string): EgressPolicy | undefined {
    return this.policies.get(id)?.policy;
  }

  private async deniedCount(ip: string): Promise<number> {
    let n = this.proxyDenied.get(ip) ?? 0;
    if (this.counters.has(ip)) {
      const r = await proc('nft', ['-j', 'list', 'counter', 'inet', this.nftTable, policyObjects(ip).counter]);
      const m = /"packets":\s*(\d+)/.exec(r.stdout);
      if (m) n += Number(m[1]);
    }
    return n;
  }

  // ---- lifecycle -------------------------------------------------------------------------------

  create(spec: SandboxSpec): Promise<void> {
    checkSpec(spec);
    return this.withLock(spec.id, async () => {
      const state = await this.crun.state(spec.id);
      if (state && (state.status === 'running' || state.status === 'paused')) return;
      if (await this.hasTrace(spec.id)) {
        // A create that crashed half-way (no undo ran): what it left holds no user data.
        this.log(`sandbox ${spec.id}: removing leftovers of an earlier create`);
        await this.destroyUnlocked(spec.id);
      }
      const undo = new UndoStack(this.log);
      try {
        await this.boot(spec, undo, true);
        undo.commit();
        this.oom.created(spec.id);
        this.detachSoon(spec.id);
      } catch (err) {
        await undo.run();
        throw asRuntimeError(err);
      }
    });
  }

  start(spec: SandboxSpec): Promise<void> {
    checkSpec(spec);
    return this.withLock(spec.id, async () => {
      const state = await this.crun.state(spec.id);
      if (state && (state.status === 'running' || state.status === 'paused')) return;
      if (!existsSync(this.paths(spec.id).image)) throw new ServiceError('NOT_FOUND', `sandbox ${spec.id} has no disk to start from`);
      const undo = new UndoStack(this.log);
      try {
        await this.boot(spec, undo, false);
        undo.commit();
        this.oom.created(spec.id);
        this.detachSoon(spec.id);
      } catch (err) {
        await undo.run();
        throw asRuntimeError(err);
      }
    });
  }

  /**
   * Shared by create (fresh: new directory and disk) and start (reuse disk and address; re-make
   * whatever is missing). Disk, network and the agent runtime are prepared concurrently.
   */
  private async boot(spec: SandboxSpec, undo: UndoStack, fresh: boolean): Promise<void> {
    const id = spec.id;
    const p = this.paths(id);
    const t0 = performance.now();
    let phase = { name: 'prepare', at: t0 };
    const nextPhase = (name: string) => {
      const now = performance.now();
      this.opts.onTiming?.(id, phase.name, now - phase.at);
      phase = { name, at: now };
    };
    const hook = async (name: string) => this.opts.stepHook?.(id, name);
    const timed = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
      const start = performance.now();
      const r = await fn();
      this.opts.onTiming?.(id, name, performance.now() - start);
      return r;
    };

    await hook('begin');
    checkLowerDirs(spec.lowerDirs);
    let pooled = false;
    const diskBytes = Math.round(spec.resources.diskGb * 1024 ** 3);
    const ranges = await this.idRanges();
    let range: IdRangeFile;
    if (fresh) {
      range = { base: ranges.allocate(id), size: ID_RANGE };
      // Released after the directory is gone (undo runs in reverse).
      undo.push('id range', () => ranges.release(id));
      await mkdir(join(this.dataDir, 'sandboxes'), { recursive: true, mode: DIR_MODE });
      undo.push('sandbox directory', () => this.removeSandboxDir(id));
      pooled = await this.pool.take(diskBytes, p.dir);
      if (!pooled) await mkdir(p.dir, { mode: DIR_MODE });
      await writeIdRange(p.dir, range);
    } else {
      range = await this.existingRange(id, p.dir, ranges);
    }
    const base = range.base;
    await chown(p.dir, 0, base);
    await chmod(p.dir, SANDBOX_DIR_MODE);

    const c: BootContext = { spec, p, undo, fresh, pooled, diskBytes, range, hook };
    const results = await Promise.allSettled([timed('disk', () => this.bootDisk(c)), timed('network', () => this.bootNetwork(c)), this.agentRuntime()]);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    const holder = results[1].status === 'fulfilled' ? results[1].value : undefined;
    if (failed) throw failed.reason;
    const agentRt = (results[2] as PromiseFulfilledResult<AgentRuntime>).value;

    nextPhase('config');
    await hook('config');
    const config = buildConfig({
      args: ['/.sb/init', '--', ...nodeArgv(agentRt, `/.sb/agent/${basename(this.agentBundlePath)}`)],
      env: { ...spec.env, SANDBOXD_AGENT_LISTEN_FD: String(AGENT_LISTEN_FD) },
      cwd: '/',
      hostname: spec.hostname,
      rootfs: p.rootfs,
      cgroupsPath: this.cgroupPath(id),
      resources: spec.resources,
      netnsPath: holder ? `/run/netns/${this.netnsName(id)}` : undefined,
      userNsPath: holder?.userNsPath,
      idBase: base,
      roBinds: [
        { source: INIT_PATH, target: '/.sb/init' },
        { source: agentRt.dir, target: NODE_MOUNT },
        { source: dirname(this.agentBundlePath), target: '/.sb/agent' },
      ],
      caBundle: true,
      cgroupVersion: (await this.layout()).version,
    });
    await writeFile(p.config, JSON.stringify(config), { mode: 0o600 });

    // A container left in crun's state (its init died, or a crash) would block the id.
    await this.crun.forceDelete(id);
    nextPhase('crun-run');
    await hook('crun-run');
    undo.push('container', () => this.crun.forceDelete(id));
    await runWithAgentSocket(this.crun, id, p.dir, p.socket, p.log);
    if (holder) {
      nextPhase('network-finish');
      await hook('network-finish');
      await holder.finish();
    }
    nextPhase('done');
    this.opts.onTiming?.(id, 'total', performance.now() - t0);
  }

  /**
   * detachHostMounts right after the create or start that calls this (from inside its lock): the
   * next operation on the sandbox waits for it, the answer to the create does not.
   */
  private detachSoon(id: string): void {
    void this.withLock(id, () => this.detachHostMounts(this.paths(id)));
  }

  /** Resolves once the operations queued on sandbox `id` so far are done (tests). */
  settled(id: string): Promise<void> {
    return this.withLock(id, async () => undefined);
  }

  /**
   * Once the container is running it holds its root (the overlay, and through it the disk) in its
   * own mount namespace; the host's copies are detached. Every mount in the host's namespace is
   * copied into each new one and listed in each /proc/<pid>/mountinfo that crun, mount(8) and
   * umount(8) read, so a thousand running sandboxes kept there would make every create and delete
   * slower; detached, the host's table does not grow with them. The loop device is recorded first:
   * a stop waits for it to be released before the disk may be mounted again. Failing to detach
   * leaves the mounts where they were (as before), which only costs time.
   */
  private async detachHostMounts(p: SandboxPaths): Promise<void> {
    try {
      const loop = await loopDeviceAt(p.disk, p.image);
      if (!loop) return;
      await writeFile(p.loop, loop);
      await detachMounts(await this.idmapHelper(), [p.rootfs, p.disk]);
    } catch (err) {
      this.log(`sandbox ${basename(p.dir)}: keeping its mounts in the host's namespace: ${String(err)}`);
    }
  }

  /** The loop device recorded by detachHostMounts, if the file holds one. */
  private async recordedLoop(p: SandboxPaths): Promise<string | undefined> {
    try {
      const dev = (await readFile(p.loop, 'utf8')).trim();
      return /^\/dev\/loop\d+$/.test(dev) ? dev : undefined;
    } catch {
      return undefined;
    }
  }

  /** The range a sandbox being started holds: claimed again, or a new one its files move to. */
  private async existingRange(id: string, dir: string, ranges: IdRanges): Promise<IdRangeFile> {
    const found = await readIdRange(dir);
    let range: IdRangeFile;
    if (found) {
      try {
        ranges.claim(id, found.base);
        return found;
      } catch (err) {
        if (!(err instanceof RangeHeldElsewhere)) throw err;
        // Another data dir's sandbox on this host has the same ids (both made before ranges were
        // registered host-wide): this one's files move to a range of its own.
        this.log(`sandbox ${id}: ${err.message}; moving it to a new range`);
        range = { base: ranges.allocate(id), size: ID_RANGE, movingFrom: found.movingFrom ?? found.base };
      }
    } else {
      // Made when every sandbox ran as the shared legacy range: its files move to a range of its own.
      range = { base: ranges.allocate(id), size: ID_RANGE, movingFrom: LEGACY_ID_OFFSET };
    }
    await writeIdRange(dir, range);
    return range;
  }

  /** The sandbox's disk (made, from the pool, or mounted again), its ids, and the overlay on it. */
  private async bootDisk({ spec, p, undo, fresh, pooled, diskBytes, range, hook }: BootContext): Promise<void> {
    const id = spec.id;
    const base = range.base;
    await hook('disk');
    if (fresh && !pooled) {
      await prepareDiskDir(p.dir, diskBytes, await this.diskTools());
    } else if (!fresh) {
      if (!(await hasOwnFilesystem(p.disk))) {
        // Its last run's container may still be letting go of the disk: two mounts of one ext4
        // image would corrupt it.
        const last = await this.recordedLoop(p);
        if (last && !(await waitLoopReleased(last, p.image, 10_000))) {
          throw new ServiceError('RUNTIME_ERROR', `sandbox ${id}: its disk is still held by its previous run; try again`).withDetail(`loop device ${last}`);
        }
        await mkdir(p.disk, { recursive: true });
        await mountDiskImage(p.image, p.disk, await this.diskTools());
        undo.push('disk mount', () => unmount(p.disk));
      }
    }
    if (range.movingFrom !== undefined) {
      const t = performance.now();
      const moved = moveIdRange(p.upper, range.movingFrom, base, ID_RANGE);
      this.log(`sandbox ${id}: moved the ids of ${moved.entries} files from ${range.movingFrom} to its own range ${base} in ${Math.round(performance.now() - t)} ms`);
      await writeIdRange(p.dir, { base, size: ID_RANGE });
    }
    await prepareUpper(p.dir, base, { fresh });
    // A fresh sandbox's rootfs is a new directory: only a start looks whether it is mounted.
    if (fresh || !(await hasOwnFilesystem(p.rootfs))) {
      await mkdir(p.rootfs, { recursive: true });
      await hook('overlay-mount');
      await mountOverlay(spec.lowerDirs, p.upper, p.work, p.rootfs, { helper: await this.idmapHelper(), base, scratch: p.lowerScratch });
      undo.push('overlay mount', () => unmount(p.rootfs));
    }
  }

  /** With internet access: the sandbox's address and its network namespace, held by a process. */
  private async bootNetwork({ spec, undo, fresh, range, hook }: BootContext): Promise<NetnsHolder | undefined> {
    const id = spec.id;
    if (!spec.internetAccess) return undefined;
    await hook('network');
    const ipam = await this.ipam();
    let ip = await this.readIp(id);
    if (!ip || (fresh && ipam.isUsed(ip))) {
      ip = ipam.allocate();
      const allocated = ip;
      undo.push('address', () => ipam.release(allocated));
    } else {
      ipam.claim(ip);
    }
    const policy = spec.egress ?? (await this.readNet(id)).egress;
    await this.writeNet(id, { ip, egress: isRestricted(policy) ? policy : undefined });
    const netnsName = this.netnsName(id);
    // The holder's user namespace must own the netns, so one left from a crash is replaced.
    await deleteNetns(netnsName);
    await waitVethGone(this.vethName(id));
    const holder = await NetnsHolder.start({ netnsName, veth: this.vethName(id), bridge: this.bridge, ip, subnet: this.subnet, idBase: range.base });
    undo.push('network namespace', async () => {
      await holder.kill();
      await deleteNetns(netnsName);
      await waitVethGone(this.vethName(id));
    });
    // Before anything runs inside: the container starts after this.
    if (isRestricted(policy)) {
      const addr = ip;
      undo.push('egress policy', () => this.removePolicy(id, addr));
      await this.applyPolicy(id, ip, policy);
    }
    return holder;
  }

  /**
   * Pause and resume write the freezer directly instead of running `crun pause/resume` (same
   * effect, and crun's state reports "paused" from the same file): a spawn would be most of the
   * latency. crun is the fallback if the direct path fails.
   */
  async pause(id: string): Promise<void> {
    await this.setPaused(id, true);
  }

  async resume(id: string): Promise<void> {
    await this.setPaused(id, false);
  }

  private async setPaused(id: string, paused: boolean): Promise<void> {
    checkId(id);
    await this.withLock(id, async () => {
      const layout = await this.layout();
      const rel = this.cgroupPath(id);
      const frozen = await isFrozen(layout, rel);
      if (frozen === undefined) {
        await this.requireContainer(id);
      } else if (frozen === paused) {
        return;
      }
      try {
        if ((await setFrozen(layout, rel, paused)) !== undefined) return;
      } catch (err) {
        this.log(`sandbox ${id}: freezer: ${String(err)}; trying crun`);
      }
      const s = await this.requireContainer(id);
      if ((s === 'paused') !== paused) await this.crun.simple(paused ? 'pause' : 'resume', id);
    });
  }

  private async requireContainer(id: string): Promise<'running' | 'paused'> {
    checkId(id);
    const st = await this.crun.state(id);
    if (st?.status === 'running' || st?.status === 'paused') return st.status;
    if (existsSync(this.paths(id).dir)) throw new ServiceError('SANDBOX_STOPPED', `sandbox ${id} is not running`);
    throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
  }

  async stop(id: string): Promise<void> {
    checkId(id);
    await this.withLock(id, async () => {
      if (!(await this.hasTrace(id))) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
      await this.killContainer(id);
      // Its proxied connections end with it (the netns goes without a reset to them).
      const ip = this.policies.get(id)?.ip;
      if (ip) this.proxy.cutAll(ip);
      await deleteNetns(this.netnsName(id));
      const p = this.paths(id);
      await unmountDisk(p.dir, p.image, p.disk, await this.recordedLoop(p));
      await rm(p.socket, { force: true });
      await waitVethGone(this.vethName(id));
    });
  }

  async destroy(id: string): Promise<void> {
    checkId(id);
    await this.withLock(id, () => this.destroyUnlocked(id));
  }

  private async destroyUnlocked(id: string): Promise<void> {
    await this.killContainer(id);
    await deleteNetns(this.netnsName(id));
    const ip = await this.readIp(id);
    if (ip) await this.removePolicy(id, ip);
    await this.removeSandboxDir(id);
    // Last: the kernel tears the veth down while the directory goes.
    await waitVethGone(this.vethName(id));
    if (ip && this.ipamP) (await this.ipamP).release(ip);
    // Always: the range is also registered host-wide, and this process may not have loaded the
    // ranges yet (a destroy right after a restart); loading them now prunes this sandbox's entry.
    (await this.idRanges()).release(id);
  }

  /** Removes a sandbox's rules and its counter of refusals (destroy, a failed boot). */
  private async removePolicy(id: string, ip: string): Promise<void> {
    if (this.policies.get(id)?.ip === ip || this.counters.has(ip)) {
      await procOk('nft', ['-f', '-'], { input: policyRemoval(this.nftTable, ip, this.proxyVeth) });
    }
    this.counters.delete(ip);
    this.proxyDenied.delete(ip);
    if (this.policies.get(id)?.ip === ip) this.remember(id, ip, undefined);
    this.proxy.revoke(ip);
  }

  /** crun delete, and if crun lost track (crash, corrupt state), the cgroup and state by hand. */
  private async killContainer(id: string): Promise<void> {
    this.oom.removed(id);
    try {
      await this.crun.forceDelete(id);
    } catch (err) {
      this.log(`sandbox ${id}: crun delete failed (${String(err)}); cleaning up by hand`);
    }
    const layout = await this.layout();
    if (await cgroupExists(layout, this.cgroupPath(id))) await removeCgroup(layout, this.cgroupPath(id));
    if (this.crun.exists(id)) await removeTree(join(this.crun.root, id));
  }

  private async removeSandboxDir(id: string): Promise<void> {
    const p = this.paths(id);
    await unmountDisk(p.dir, p.image, p.disk, await this.recordedLoop(p));
    await removeTree(p.dir);
  }

  private async hasTrace(id: string): Promise<boolean> {
    return (
      existsSync(this.paths(id).dir) ||
      this.crun.exists(id) ||
      existsSync(`/run/netns/${this.netnsName(id)}`) ||
      (await cgroupExists(await this.layout(), this.cgroupPath(id)))
    );
  }

  // ---- snapshots -------------------------------------------------------------------------------

  /**
   * Copies the sandbox's own files (its upper: what it changed over its layers, overlay whiteouts
   * and opaque directories included) into `dest`, an empty directory, in canonical ownership: a
   * layer other sandboxes can mount. A running sandbox is frozen for the copy, so what is saved is
   * one moment of it, and thawed right after (also when the copy fails); a paused or stopped one
   * is copied as it is.
   *
   * A running sandbox's disk is mounted in its own namespace only (detachHostMounts): its loop
   * device is mounted once more for the copy, which the kernel serves from the same superblock (so
   * the copy sees exactly what the sandbox wrote). A stopped one's image is mounted as a start
   * would. Everything in the upper is the tenant's: `cp -a` copies symlinks as symlinks, never
   * through them, and the copy's ids are rewritten in `dest`, which the sandbox cannot reach.
   */
  exportLayer(id: string, dest: string, opts: { maxBytes?: number } = {}): Promise<{ bytes: number; allocated: number; entries: number; frozenMs: number }> {
    checkId(id);
    return this.withLock(id, async () => {
      const p = this.paths(id);
      if (!existsSync(p.dir)) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
      const range = await readIdRange(p.dir);
      if (!range || range.movingFrom !== undefined) throw new ServiceError('INVALID_STATE', `sandbox ${id} must be started once before it can be saved`);
      const layout = await this.layout();
      const rel = this.cgroupPath(id);
      // Whether it runs, from its cgroup (a few reads; asking crun is a process spawn).
      const frozen = await isFrozen(layout, rel);
      const live = frozen !== undefined;
      let thaw = false;
      let mounted = false;
      let frozenAt = 0;
      let frozenMs = 0;
      try {
        let src = p.disk;
        if (!(await hasOwnFilesystem(p.disk))) {
          await mkdir(p.snapMount, { recursive: true, mode: 0o700 });
          if (await hasOwnFilesystem(p.snapMount)) await unmount(p.snapMount);
          const loop = await this.recordedLoop(p);
          if (live) {
            if (!loop || !(await loopBacks(loop, p.image))) throw new Error(`the disk's loop device is not known (${loop ?? 'none recorded'})`);
            await procOk(await this.idmapHelper(), ['dev-mount', loop, p.snapMount]);
          } else {
            if (loop && !(await waitLoopReleased(loop, p.image, 10_000))) {
              throw new ServiceError('RUNTIME_ERROR', `sandbox ${id}: its disk is still held by its previous run; try again`).withDetail(`loop device ${loop}`);
            }
            await mountDiskImage(p.image, p.snapMount, await this.diskTools());
          }
          mounted = true;
          src = p.snapMount;
        }
        // Refused before copying when the disk already holds more than may be stored: the copy would
        // fill the host's disk for nothing (what the disk holds bounds what the copy takes).
        if (opts.maxBytes !== undefined) {
          const used = (await diskUsage(src)).usedBytes;
          if (used > opts.maxBytes) throw new ExportTooLarge(used);
        }
        // Frozen for the copy alone (the mount needs no freeze).
        if (frozen === false) {
          frozenAt = performance.now();
          // Thawed in any case from here: a freeze that times out may have left it half-frozen.
          thaw = true;
          if ((await setFrozen(layout, rel, true)) === undefined) throw new Error('the sandbox has no freezer');
        }
        // Bounded in time (the sandbox is frozen meanwhile), and gone with the daemon: a copy left
        // running after a crash would keep the disk's second mount busy.
        const seconds = String(Math.ceil(SNAPSHOT_COPY_TIMEOUT_MS / 1000));
        const r = await proc('setpriv', ['--pdeathsig', 'KILL', '--', 'timeout', '-s', 'KILL', seconds, 'setpriv', '--pdeathsig', 'KILL', '--', 'cp', '-a', '--', `${join(src, 'upper')}/.`, dest]);
        if (r.code === 137 || r.signal === 'SIGKILL') throw new ServiceError('LIMIT_EXCEEDED', `copying the sandbox's files took longer than ${seconds} s`, { limit: 'snapshot_copy_seconds', max: Number(seconds) });
        if (r.code !== 0) throw toolError('cp', ['-a'], r);
      } finally {
        if (thaw) {
          await setFrozen(layout, rel, false).catch(async (err: unknown) => {
            this.log(`sandbox ${id}: thawing after a snapshot failed (${String(err)}); trying crun`);
            await this.crun.simple('resume', id);
          });
          frozenMs = performance.now() - frozenAt;
        }
        // Behind the answer, before the next operation on the sandbox (a stop would take it too).
        if (mounted) void this.withLock(id, () => unmount(p.snapMount).catch((err: unknown) => this.log(`sandbox ${id}: cannot unmount ${p.snapMount}: ${String(err)}`)));
      }
      // Off the event loop, bounded: a tenant's tree may hold millions of names.
      let shifted;
      try {
        shifted = await mapIdRangeOffThread(dest, range.base, CANONICAL_ID_OFFSET, ID_RANGE, { maxEntries: SNAPSHOT_MAX_ENTRIES, timeoutMs: SNAPSHOT_COPY_TIMEOUT_MS });
      } catch (err) {
        if (err instanceof TooManyEntries) {
          throw new ServiceError('LIMIT_EXCEEDED', `the sandbox holds more than ${err.max} file names (hard links count): too many to save`, { limit: 'snapshot_entries', max: err.max });
        }
        throw err;
      }
      return { ...shifted, frozenMs };
    });
  }

  /**
   * Gives a stopped sandbox a new, empty disk (its upper) of `diskGb`, keeping its directory, id
   * range and address: its next start() shows its layers alone (a rollback to a snapshot: the
   * caller starts it on the snapshot's layers). The old disk is freed once its last run let go.
   */
  resetDisk(id: string, diskGb: number): Promise<void> {
    checkId(id);
    return this.withLock(id, async () => {
      const p = this.paths(id);
      if (!existsSync(p.dir)) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
      const st = await this.crun.state(id);
      if (st && (st.status === 'running' || st.status === 'paused')) throw new ServiceError('INVALID_STATE', `sandbox ${id} must be stopped to reset its disk`);
      const range = await readIdRange(p.dir);
      if (!range) throw new ServiceError('INVALID_STATE', `sandbox ${id} has no id range`);
      if (await hasOwnFilesystem(p.rootfs)) await unmount(p.rootfs);
      if (await hasOwnFilesystem(p.disk)) await unmountDisk(p.dir, p.image, p.disk);
      const fresh = `${p.image}.new`;
      await rm(fresh, { force: true });
      await createDiskImage(fresh, Math.round(diskGb * 1024 ** 3), await this.diskTools());
      // The old image goes with the rename; a loop device its last run still holds keeps it until
      // it lets go (a start waits for that: disk.loop).
      await rename(fresh, p.image);
      await mkdir(p.disk, { recursive: true });
      await mountDiskImage(p.image, p.disk, await this.diskTools());
      await prepareUpper(p.dir, range.base, { fresh: true });
    });
  }

  // ---- queries ---------------------------------------------------------------------------------

  async status(id: string): Promise<RuntimeStatus> {
    checkId(id);
    const st = await this.crun.state(id);
    if (st?.status === 'running') return 'running';
    if (st?.status === 'paused') return 'paused';
    return (await this.hasTrace(id)) ? 'stopped' : 'missing';
  }

  async statuses(ids: string[]): Promise<Map<string, RuntimeStatus>> {
    for (const id of ids) checkId(id);
    const out = new Map<string, RuntimeStatus>();
    let states: Awaited<ReturnType<Crun['states']>>;
    try {
      states = await this.crun.states();
    } catch (err) {
      // One unreadable container state fails the whole list: ask about each, as status() does.
      this.log(`crun list failed (${String(err)}); asking each sandbox's state`);
      for (const id of ids) out.set(id, await this.status(id));
      return out;
    }
    for (const id of ids) {
      const st = states.get(id)?.status;
      out.set(id, st === 'running' || st === 'paused' ? st : (await this.hasTrace(id)) ? 'stopped' : 'missing');
    }
    return out;
  }

  async list(): Promise<string[]> {
    const ids = new Set<string>([...(await this.sandboxDirIds()), ...(await this.crun.ids())]);
    try {
      for (const n of await readdir('/run/netns')) if (n.startsWith(this.netnsPrefix)) ids.add(n.slice(this.netnsPrefix.length));
    } catch {
      /* no named netns at all */
    }
    for (const n of await childCgroups(await this.layout(), `/${this.cgroupParent}`)) ids.add(n);
    return [...ids].filter((i) => ID_RE.test(i)).sort();
  }

  async stats(id: string): Promise<SandboxStats> {
    checkId(id);
    const p = this.paths(id);
    if (!existsSync(p.dir)) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
    const cg = await readCgroupStats(await this.layout(), this.cgroupPath(id));
    let disk = { usedBytes: 0, totalBytes: 0 };
    // A running sandbox's disk is mounted in its own namespace only: the root of its init (the
    // overlay) reports the statistics of the filesystem its upper is on, the disk.
    const pid = await this.containerInit(id);
    const running = pid !== undefined && (await diskUsage(`/proc/${pid}/root`).catch(() => undefined));
    if (running) disk = running;
    else if (await hasOwnFilesystem(p.disk)) disk = await diskUsage(p.disk);
    else if (existsSync(p.image)) {
      const s = await stat(p.image);
      disk = { usedBytes: s.blocks * 512, totalBytes: s.size };
    }
    // The host end of its veth: what the host receives the sandbox sent.
    const counter = (name: string) =>
      readFile(`/sys/class/net/${this.vethName(id)}/statistics/${name}`, 'utf8').then(
        (t) => Number(t.trim()) || 0,
        () => 0,
      );
    const ip = this.policies.get(id)?.ip ?? (await this.readIp(id));
    const [hostRx, hostTx, egressDenied] = await Promise.all([counter('rx_bytes'), counter('tx_bytes'), ip ? this.deniedCount(ip) : 0]);
    return { ...cg, diskUsedBytes: disk.usedBytes, diskTotalBytes: disk.totalBytes, networkRxBytes: hostTx, networkTxBytes: hostRx, egressDenied };
  }

  watchOom(onKill: (id: string, kills: number) => void): () => void {
    return this.oom.watch(onKill);
  }

  /** Resolves once watchOom has taken every sandbox's baseline and armed its trigger (tests). */
  oomWatchReady(): Promise<void> {
    return this.oom.ready();
  }

  /** Runs a command in a running sandbox (tests, benchmarks, debugging); users go through the agent. */
  async exec(id: string, argv: string[], opts: { env?: Record<string, string>; cwd?: string; input?: string } = {}): Promise<ProcResult> {
    checkId(id);
    return this.crun.exec(id, argv, opts);
  }

  /**
   * The host pid of the sandbox's init (pid 1 in its pid namespace) among its cgroup's processes,
   * without spawning crun: a few small reads.
   */
  private async containerInit(id: string): Promise<number | undefined> {
    for (const pid of await cgroupPids(await this.layout(), this.cgroupPath(id))) {
      try {
        const nspid = /^NSpid:\s+(.*)$/m.exec(await readFile(`/proc/${pid}/status`, 'utf8'))?.[1]?.trim().split(/\s+/);
        if (nspid && nspid.length > 1 && nspid[nspid.length - 1] === '1') return pid;
      } catch {
        /* exited meanwhile */
      }
    }
    return undefined;
  }

  async listeningPorts(id: string): Promise<ListeningPort[]> {
    if (!ID_RE.test(id)) throw new TypeError(`bad sandbox id ${JSON.stringify(id)}`);
    const pid = await this.initPid(id);
    return pid === undefined ? [] : listeningPorts(pid);
  }

  /** Pid (on the host) of the sandbox's init, or undefined when not running. */
  async initPid(id: string): Promise<number | undefined> {
    const st = await this.crun.state(id);
    return st && st.pid > 0 ? st.pid : undefined;
  }

  runStep(opts: StepRunOptions): Promise<{ exitCode: number; timedOut: boolean }> {
    if (!ID_RE.test(opts.id)) throw new ServiceError('VALIDATION_ERROR', `bad step id ${opts.id}`);
    return this.withLock(`step:${opts.id}`, () => runStep(this.stepContext(), opts));
  }
}

/**
 * crun reaches the rootfs and bind sources from inside the user namespace, as "other": the data
 * dir needs o+x (not o+r), and so does every directory above it.
 */
async function ensureTraversable(dir: string, log: (m: string) => void): Promise<void> {
  const mode = (await stat(dir)).mode & 0o7777;
  if ((mode & 0o001) === 0) {
    await chmod(dir, mode | 0o011);
    log(`data directory ${dir}: added search permission for others (mode ${(mode | 0o011).toString(8)}); sandboxes need it`);
  }
  for (let d = dirname(dir); d !== dirname(d); d = dirname(d)) {
    if (((await stat(d)).mode & 0o001) === 0) throw new Error(`${d} must be searchable by others (chmod o+x) for sandboxes to start`);
  }
}

// Ids, hostnames and resources reach the runtime from the services, which validated what a client
// sent: one that fails here is a broken contract of ours (a TypeError: a 500 with an incident id,
// not a 400 that blames the client). Checked all the same: an id becomes a path.
function checkId(id: string): void {
  if (!ID_RE.test(id)) throw new TypeError(`bad sandbox id ${JSON.stringify(id)}`);
}

function checkSpec(spec: SandboxSpec): void {
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
function asRuntimeError(err: unknown): unknown {
  if (err instanceof ServiceError || isProgrammingError(err)) return err;
  return new ServiceError('RUNTIME_ERROR', 'the container runtime failed on this sandbox; try again').withDetail(describeCause(err));
}
