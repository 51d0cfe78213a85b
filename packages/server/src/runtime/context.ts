import { readFile, readdir, rename, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { ensureAgentRuntime, type AgentRuntime } from './agent-runtime.js';
import { cgroupExists, cgroupPids, detectCgroups, removeCgroup, type CgroupLayout } from './cgroups.js';
import { Crun } from './crun.js';
import { detachMounts, loopDeviceAt, removeTree, unmountDisk, type DiskTools } from './disk.js';
import { DiskPool } from './disk-pool.js';
import type { EgressEndpoint } from './host.js';
import { DEFAULT_ID_REGISTRY_DIR, HostIdRegistry, IdRanges, readIdRange } from './id-ranges.js';
import { ensureIdmapHelper } from './idmap.js';
import type { EgressPolicy } from './egress-policy.js';
import { EgressState } from './egress-state.js';
import { Ipam, parseSubnet, vethName, type Subnet } from './net.js';
import { OomWatch } from './oom-watch.js';
import { ID_RE, sandboxPaths, type SandboxPaths } from './sandbox-paths.js';

export interface CrunRuntimeOptions {
  dataDir: string;
  /** The agent bundle (agent.cjs); its directory is bound read-only at /.sb/agent. */
  agentBundlePath: string;
  /** Settings of the agent in every sandbox (SANDBOXD_PROCESS_OUTPUT_RING_KB, ...), added to its env at boot. */
  agentEnv?: Record<string, string>;
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
  /**
   * The resolvers sandboxes may send DNS to, and the DNS filter relays to (default: the IPv4
   * nameservers of the host's /etc/resolv.conf). Tests point it at a resolver of their own.
   */
  dnsResolvers?: string[];
  /** How the egress proxy resolves a name a connection carries (default: the host's resolvers). */
  egressResolve?: (name: string) => Promise<string[]>;
}

/** What a build step needs of its runtime (verbs/run-step.ts). */
export interface StepContext {
  dataDir: string;
  /** crun with its own --root: steps never show up as sandboxes. */
  crun: Crun;
  cgroupParent: string;
  netnsPrefix: string;
  bridge: string;
  subnet: Subnet;
  ipam: () => Promise<Ipam>;
  layout: () => Promise<CgroupLayout>;
  /** The idmap helper (used only for lowers still at LEGACY_ID_OFFSET). */
  idmapHelper: () => Promise<string>;
  log: (msg: string) => void;
}

/**
 * What every verb of CrunRuntime shares: its names (paths, netns, veth, cgroup), the node-wide
 * resources it loads once (cgroup layout, addresses, id ranges, the agent's runtime, the native
 * helper), its per-sandbox locks, and the few steps more than one verb takes.
 */
export class RuntimeContext {
  readonly dataDir: string;
  readonly bridge: string;
  readonly subnet: Subnet;
  readonly subnetCidr: string;
  readonly cgroupParent: string;
  readonly agentBundlePath: string;
  readonly log: (msg: string) => void;
  readonly crun: Crun;
  /** crun with its own --root: build steps never show up as sandboxes. */
  readonly stepCrun: Crun;
  /** This runtime's nftables table (inet family). */
  readonly nftTable: string;
  /** Prefix of its network namespaces' names. '_' never occurs in a sandbox id, so a name parses back. */
  readonly netnsPrefix: string;
  readonly pool: DiskPool;
  readonly oom: OomWatch;
  readonly egress: EgressState;
  private layoutP?: Promise<CgroupLayout>;
  private ipamP?: Promise<Ipam>;
  private agentRtP?: Promise<AgentRuntime>;
  private idRangesP?: Promise<IdRanges>;
  private helperP?: Promise<string>;
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(readonly opts: CrunRuntimeOptions) {
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
    this.netnsPrefix = `${this.cgroupParent.replace(/[^A-Za-z0-9-]/g, '_')}_`;
    this.pool = new DiskPool(join(this.dataDir, 'disk-pool'), opts.diskPoolSize ?? 2, this.log, undefined, undefined, () => this.diskTools());
    this.oom = new OomWatch({ layout: () => this.layout(), parent: `/${this.cgroupParent}`, isMember: (n) => ID_RE.test(n), log: this.log });
    this.egress = new EgressState({
      bridge: this.bridge,
      subnet: this.subnet,
      nftTable: this.nftTable,
      // '_' never occurs in a sandbox id: list() never takes it for one.
      proxyNetns: `${this.netnsPrefix}_egress`,
      resolve: opts.egressResolve,
      log: this.log,
    });
  }

  // ---- names -----------------------------------------------------------------------------------

  paths(id: string): SandboxPaths {
    return sandboxPaths(this.dataDir, id);
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

  // ---- node-wide resources, loaded once --------------------------------------------------------

  layout(): Promise<CgroupLayout> {
    return (this.layoutP ??= detectCgroups());
  }

  /** After the host's cgroups were changed (setupHost's fix of a hybrid layout). */
  redetectLayout(): void {
    this.layoutP = detectCgroups();
  }

  agentRuntime(): Promise<AgentRuntime> {
    this.agentRtP ??= ensureAgentRuntime(this.dataDir).catch((err: unknown) => {
      this.agentRtP = undefined;
      throw err;
    });
    return this.agentRtP;
  }

  /** Addresses persisted by sandboxes on disk, claimed once per process. */
  ipam(): Promise<Ipam> {
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

  /** The address allocator if it is loaded (a destroy need not load it to release nothing). */
  loadedIpam(): Promise<Ipam> | undefined {
    return this.ipamP;
  }

  /** Id ranges persisted by sandboxes on disk, claimed once per process. */
  idRanges(): Promise<IdRanges> {
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
  async diskTools(): Promise<DiskTools> {
    return { helper: await this.idmapHelper(), imagesDir: join(this.dataDir, 'disk-images') };
  }

  idmapHelper(): Promise<string> {
    this.helperP ??= ensureIdmapHelper(this.dataDir).catch((err: unknown) => {
      this.helperP = undefined;
      throw err;
    });
    return this.helperP;
  }

  stepContext(): StepContext {
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

  // ---- a sandbox's records on disk -------------------------------------------------------------

  async readIp(id: string): Promise<string | undefined> {
    return (await this.readNet(id)).ip;
  }

  /** The sandbox's address and egress policy (net.json), as far as they are readable. */
  async readNet(id: string): Promise<{ ip?: string; egress?: EgressPolicy }> {
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

  async writeNet(id: string, net: { ip: string; egress?: EgressPolicy }): Promise<void> {
    const p = this.paths(id).net;
    await writeFile(`${p}.tmp`, JSON.stringify(net));
    await rename(`${p}.tmp`, p);
  }

  async sandboxDirIds(): Promise<string[]> {
    try {
      return (await readdir(join(this.dataDir, 'sandboxes'), { withFileTypes: true }))
        .filter((e) => e.isDirectory() && ID_RE.test(e.name))
        .map((e) => e.name);
    } catch {
      return [];
    }
  }

  /** The loop device recorded by detachHostMounts, if the file holds one. */
  async recordedLoop(p: SandboxPaths): Promise<string | undefined> {
    try {
      const dev = (await readFile(p.loop, 'utf8')).trim();
      return /^\/dev\/loop\d+$/.test(dev) ? dev : undefined;
    } catch {
      return undefined;
    }
  }

  async hasTrace(id: string): Promise<boolean> {
    return (
      existsSync(this.paths(id).dir) ||
      this.crun.exists(id) ||
      existsSync(`/run/netns/${this.netnsName(id)}`) ||
      (await cgroupExists(await this.layout(), this.cgroupPath(id)))
    );
  }

  /**
   * The host pid of the sandbox's init (pid 1 in its pid namespace) among its cgroup's processes,
   * without spawning crun: a few small reads.
   */
  async containerInit(id: string): Promise<number | undefined> {
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

  // ---- steps several verbs take ----------------------------------------------------------------

  /** Serializes operations on one id (create racing destroy, two stops). */
  withLock<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(id) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(fn);
    const tail = next.catch(() => undefined);
    this.locks.set(id, tail);
    void tail.then(() => {
      if (this.locks.get(id) === tail) this.locks.delete(id);
    });
    return next;
  }

  /** crun delete, and if crun lost track (crash, corrupt state), the cgroup and state by hand. */
  async killContainer(id: string): Promise<void> {
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

  async removeSandboxDir(id: string): Promise<void> {
    const p = this.paths(id);
    await unmountDisk(p.dir, p.image, p.disk, await this.recordedLoop(p));
    await removeTree(p.dir);
  }

  /**
   * detachHostMounts right after the create or start that calls this (from inside its lock): the
   * next operation on the sandbox waits for it, the answer to the create does not.
   */
  detachSoon(id: string): void {
    void this.withLock(id, () => this.detachHostMounts(this.paths(id)));
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
}
