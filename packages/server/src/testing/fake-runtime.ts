import { existsSync } from 'node:fs';
import type { Socket } from 'node:net';
import { chown, mkdir, readdir, writeFile } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { describeCause, isProgrammingError, ServiceError } from '@sandboxd/protocol';
import { isRestricted, type EgressPolicy } from '../runtime/egress-policy.js';
import { dialUnix } from '../runtime/agent-socket.js';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import type { ListeningPort } from '../runtime/listening.js';
import { ExportTooLarge, type Runtime, type RuntimeStatus, type SandboxSpec, type SandboxStats, type StepRunOptions } from '../runtime/types.js';
import { UndoStack } from '../runtime/undo.js';
import { echoCommand, FakeAgent, type FakeCommandHandler } from './fake-agent.js';

/**
 * TEST DOUBLE. A `Runtime` that keeps its sandboxes in memory and runs nothing on the host: no
 * container, mount, cgroup or network. Each running sandbox's "agent" is a FakeAgent answering the
 * agent protocol on the real unix socket `agentSocket(id)`, so the services talk to it exactly as
 * they talk to a real one. Its "disk" is a map of files a test writes (`writeFile`) and
 * `exportLayer` copies out. It passes the runtime conformance suite (runtime/conformance.ts);
 * what it cannot honour: `runStep` (it refuses), and a restart (a new instance knows nothing).
 */

export type FakeVerb = 'create' | 'start' | 'stop' | 'pause' | 'resume' | 'destroy' | 'setEgress' | 'exportLayer' | 'resetDisk' | 'setCpuWeight';

interface FakeSandbox {
  spec: SandboxSpec;
  status: 'running' | 'paused' | 'stopped';
  /** Serving while running or paused (frozen then), gone when stopped. */
  agent?: FakeAgent;
  /** Its own files (what it changed over its layers), by absolute path inside. */
  files: Map<string, string>;
  diskGb: number;
  /** What its processes listen on (a test sets it: `listen`); gone with them when it stops. */
  listening: ListeningPort[];
  /** With internet access: its egress policy (undefined: the default). */
  network?: { egress?: EgressPolicy };
  oomKills: number;
  /** Its CPU weight as the runtime would set it on its cgroup (100: the normal one). */
  cpuWeight: number;
}

export interface FakeRuntimeOptions {
  /** Where the agents' sockets are made (short: a socket path holds at most 107 bytes). */
  socketDir: string;
}

const ID_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;

export class FakeRuntime implements Runtime {
  private readonly sandboxes = new Map<string, FakeSandbox>();
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly oomListeners = new Set<(id: string, kills: number) => void>();
  private readonly failures = new Set<{ verb: FakeVerb; error: Error; matches: (id: string) => boolean }>();
  private commandHandler: FakeCommandHandler = echoCommand;
  /** Every verb called, in order (what a test may assert the services asked for). */
  readonly calls: Array<{ verb: string; id: string }> = [];

  constructor(private readonly opts: FakeRuntimeOptions) {}

  // ---- test controls ---------------------------------------------------------------------------

  /**
   * Makes `verb` fail with `error` for the ids `matches` accepts (all by default) part-way, after
   * some of its work is done (create and start: once the agent listens), until the returned
   * function is called. Like CrunRuntime, what create and start did is undone, and the error comes
   * out as RUNTIME_ERROR.
   */
  failOn(verb: FakeVerb, error: Error = new Error(`injected failure of ${verb}`), matches: (id: string) => boolean = () => true): () => void {
    const f = { verb, error, matches };
    this.failures.add(f);
    return () => this.failures.delete(f);
  }

  /** What `POST /commands/run` answers in every sandbox from now on (default: an echo). */
  onCommand(handler: FakeCommandHandler): void {
    this.commandHandler = handler;
  }

  /** A file the sandbox writes on its disk (what a process inside would do). */
  writeFile(id: string, path: string, content: string): void {
    this.need(id).files.set(insidePath(path), content);
  }

  readFile(id: string, path: string): string | undefined {
    return this.need(id).files.get(insidePath(path));
  }

  /** The kernel's OOM killer, for the sandbox's processes: counted, and reported to watchOom. */
  triggerOom(id: string, kills = 1): void {
    const sb = this.need(id);
    if (sb.status !== 'running') throw new Error(`sandbox ${id} is not running: nothing runs to be killed`);
    sb.oomKills += kills;
    for (const l of [...this.oomListeners]) l(id, kills);
  }

  /** What the sandbox's processes listen on from now on (as its kernel's socket tables would say), until it stops. */
  listen(id: string, ports: ListeningPort[]): void {
    const sb = this.need(id);
    if (sb.status === 'stopped') throw new Error(`sandbox ${id} is not running: nothing runs to listen`);
    sb.listening = ports.map((p) => ({ ...p }));
  }

  /** The policy the sandbox's network has (undefined: the default, or no network). */
  egressOf(id: string): EgressPolicy | undefined {
    return this.sandboxes.get(id)?.network?.egress;
  }

  /** Test cleanup: every agent closed and every sandbox forgotten. */
  async dispose(): Promise<void> {
    for (const id of [...this.sandboxes.keys()]) await this.destroy(id);
  }

  // ---- the Runtime -----------------------------------------------------------------------------

  async setupHost(): Promise<void> {
    await mkdir(this.opts.socketDir, { recursive: true, mode: 0o700 });
  }

  agentSocket(id: string): string {
    return join(this.opts.socketDir, `${id}.sock`);
  }

  /** Its agent's socket, as CrunRuntime's: AGENT_UNAVAILABLE when no agent listens there. */
  async dialAgent(id: string, timeoutMs = 10_000): Promise<Socket> {
    checkId(id);
    return dialUnix(this.agentSocket(id), timeoutMs);
  }

  create(spec: SandboxSpec): Promise<void> {
    return this.locked('create', spec.id, async () => {
      checkSpec(spec);
      const old = this.sandboxes.get(spec.id);
      if (old && old.status !== 'stopped') return;
      // As CrunRuntime: what an id holds before its create is taken for the leftovers of an
      // interrupted one, and removed.
      if (old) await this.remove(spec.id);
      await this.boot(spec, { spec, status: 'running', files: new Map(), diskGb: spec.resources.diskGb, listening: [], oomKills: 0, cpuWeight: spec.resources.cpuWeight ?? 100, network: spec.internetAccess ? { egress: restricted(spec.egress) } : undefined }, 'create');
    });
  }

  start(spec: SandboxSpec): Promise<void> {
    return this.locked('start', spec.id, async () => {
      checkSpec(spec);
      const sb = this.sandboxes.get(spec.id);
      if (!sb) throw new ServiceError('NOT_FOUND', `sandbox ${spec.id} has no disk to start from`);
      if (sb.status !== 'stopped') return;
      const network = spec.internetAccess ? { egress: spec.egress === undefined ? sb.network?.egress : restricted(spec.egress) } : undefined;
      await this.boot(spec, { ...sb, spec, network, cpuWeight: spec.resources.cpuWeight ?? 100 }, 'start');
    });
  }

  /** The steps of a create or start, each undone (in reverse) if a later one fails. */
  private async boot(spec: SandboxSpec, next: FakeSandbox, verb: 'create' | 'start'): Promise<void> {
    const before = this.sandboxes.get(spec.id);
    const undo = new UndoStack(() => undefined);
    try {
      for (const dir of spec.lowerDirs) if (!existsSync(dir)) throw new Error(`lower layer does not exist: ${dir}`);
      this.sandboxes.set(spec.id, next);
      undo.push('record', () => {
        if (before) this.sandboxes.set(spec.id, before);
        else this.sandboxes.delete(spec.id);
      });
      const agent = await FakeAgent.listen(spec.id, this.agentSocket(spec.id), () => this.commandHandler);
      undo.push('agent', () => agent.close());
      this.injected(verb, spec.id);
      next.agent = agent;
      next.status = 'running';
      undo.commit();
    } catch (err) {
      await undo.run();
      if (err instanceof ServiceError || isProgrammingError(err)) throw err;
      throw new ServiceError('RUNTIME_ERROR', 'the container runtime failed on this sandbox; try again').withDetail(describeCause(err));
    }
  }

  setCpuWeight(id: string, weight: number): Promise<void> {
    return this.locked('setCpuWeight', id, async () => {
      if (!Number.isInteger(weight) || weight < 1 || weight > 10_000) throw new Error(`cpu weight must be an integer from 1 to 10000, got ${weight}`);
      const sb = this.needRunning(id);
      this.injected('setCpuWeight', id);
      sb.cpuWeight = weight;
    });
  }

  /** A sandbox's CPU weight (what its cgroup would hold); undefined when it does not exist. */
  cpuWeightOf(id: string): number | undefined {
    return this.sandboxes.get(id)?.cpuWeight;
  }

  pause(id: string): Promise<void> {
    return this.locked('pause', id, async () => {
      const sb = this.needRunning(id);
      this.injected('pause', id);
      sb.agent?.freeze();
      sb.status = 'paused';
    });
  }

  resume(id: string): Promise<void> {
    return this.locked('resume', id, async () => {
      const sb = this.needRunning(id);
      this.injected('resume', id);
      sb.agent?.thaw();
      sb.status = 'running';
    });
  }

  stop(id: string): Promise<void> {
    return this.locked('stop', id, async () => {
      const sb = this.need(id);
      this.injected('stop', id);
      await sb.agent?.close();
      sb.agent = undefined;
      sb.listening = [];
      sb.status = 'stopped';
    });
  }

  destroy(id: string): Promise<void> {
    return this.locked('destroy', id, async () => {
      this.injected('destroy', id);
      await this.remove(id);
    });
  }

  private async remove(id: string): Promise<void> {
    const sb = this.sandboxes.get(id);
    this.sandboxes.delete(id);
    await sb?.agent?.close();
  }

  async status(id: string): Promise<RuntimeStatus> {
    checkId(id);
    return this.sandboxes.get(id)?.status ?? 'missing';
  }

  async statuses(ids: string[]): Promise<Map<string, RuntimeStatus>> {
    const out = new Map<string, RuntimeStatus>();
    for (const id of ids) out.set(id, await this.status(id));
    return out;
  }

  async list(): Promise<string[]> {
    return [...this.sandboxes.keys()].sort();
  }

  async stats(id: string): Promise<SandboxStats> {
    checkId(id);
    const sb = this.need(id);
    const live = sb.status !== 'stopped';
    return {
      cpuUsageNs: 0,
      memoryBytes: 0,
      memoryLimitBytes: live ? sb.spec.resources.memoryMb * 1024 ** 2 : 0,
      oomKills: sb.oomKills,
      // The agent is its one process.
      pids: live ? 1 : 0,
      diskUsedBytes: usedBytes(sb.files),
      diskTotalBytes: sb.diskGb * 1024 ** 3,
      networkRxBytes: 0,
      networkTxBytes: 0,
      egressDenied: 0,
    };
  }

  async listeningPorts(id: string): Promise<ListeningPort[]> {
    checkId(id);
    return (this.sandboxes.get(id)?.listening ?? []).map((p) => ({ ...p }));
  }

  watchOom(onKill: (id: string, kills: number) => void): () => void {
    // A listener of its own per call: the same function watched twice is unwatched once each.
    const listener = (id: string, kills: number) => onKill(id, kills);
    this.oomListeners.add(listener);
    return () => void this.oomListeners.delete(listener);
  }

  async close(): Promise<void> {
    // Keeps nothing ready; sandboxes keep running.
  }

  setEgress(id: string, policy: EgressPolicy): Promise<void> {
    return this.locked('setEgress', id, async () => {
      const sb = this.need(id);
      if (!sb.network) throw new ServiceError('INVALID_STATE', `sandbox ${id} was created without internet access: it has no network to set rules on`);
      this.injected('setEgress', id);
      sb.network.egress = restricted(policy);
    });
  }

  exportLayer(id: string, dest: string, opts: { maxBytes?: number } = {}): Promise<{ bytes: number; allocated: number; entries: number; frozenMs: number }> {
    return this.locked('exportLayer', id, async () => {
      const sb = this.need(id);
      const used = usedBytes(sb.files);
      if (opts.maxBytes !== undefined && used > opts.maxBytes) throw new ExportTooLarge(used);
      this.injected('exportLayer', id);
      if ((await readdir(dest)).length > 0) throw new Error(`${dest} is not empty`);
      const dirs = new Set<string>();
      let bytes = 0;
      let allocated = 0;
      for (const [path, content] of sb.files) {
        for (let d = posix.dirname(path); d !== '/'; d = posix.dirname(d)) dirs.add(d);
        const host = join(dest, path);
        await mkdir(dirname(host), { recursive: true });
        await writeFile(host, content);
        bytes += Buffer.byteLength(content);
        allocated += Math.ceil(Buffer.byteLength(content) / 4096) * 4096;
      }
      // Canonical ownership (root inside), as a layer other sandboxes mount; only root may give it.
      if (process.getuid?.() === 0) {
        for (const p of [...dirs, ...sb.files.keys()]) await chown(join(dest, p), CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
      }
      return { bytes, allocated, entries: dirs.size + sb.files.size, frozenMs: 0 };
    });
  }

  resetDisk(id: string, diskGb: number): Promise<void> {
    return this.locked('resetDisk', id, async () => {
      const sb = this.need(id);
      if (sb.status !== 'stopped') throw new ServiceError('INVALID_STATE', `sandbox ${id} must be stopped to reset its disk`);
      this.injected('resetDisk', id);
      sb.files = new Map();
      sb.diskGb = diskGb;
    });
  }

  async runStep(opts: StepRunOptions): Promise<{ exitCode: number; timedOut: boolean }> {
    // A build step is code that must run somewhere: a fake has nowhere to run it.
    throw new Error(`FakeRuntime runs no build steps (step ${opts.id}): use CrunRuntime`);
  }

  // ---- helpers ---------------------------------------------------------------------------------

  /** One operation at a time per id, as CrunRuntime; recorded in `calls`. */
  private locked<T>(verb: string, id: string, fn: () => Promise<T>): Promise<T> {
    this.calls.push({ verb, id });
    const prev = this.locks.get(id) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(async () => {
      checkId(id);
      return fn();
    });
    const tail = next.catch(() => undefined);
    this.locks.set(id, tail);
    void tail.then(() => {
      if (this.locks.get(id) === tail) this.locks.delete(id);
    });
    return next;
  }

  private injected(verb: FakeVerb, id: string): void {
    for (const f of this.failures) if (f.verb === verb && f.matches(id)) throw f.error;
  }

  private need(id: string): FakeSandbox {
    const sb = this.sandboxes.get(id);
    if (!sb) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
    return sb;
  }

  private needRunning(id: string): FakeSandbox {
    const sb = this.need(id);
    if (sb.status === 'stopped') throw new ServiceError('SANDBOX_STOPPED', `sandbox ${id} is not running`);
    return sb;
  }
}

/** The services validated ids and specs: a bad one is a bug of ours (TypeError), as in CrunRuntime. */
function checkId(id: string): void {
  if (!ID_RE.test(id)) throw new TypeError(`bad sandbox id ${JSON.stringify(id)}`);
}

function checkSpec(spec: SandboxSpec): void {
  checkId(spec.id);
  const r = spec.resources;
  if (!(r.vcpu > 0 && r.memoryMb >= 16 && r.diskGb > 0 && r.pidsMax >= 8)) throw new TypeError(`bad resources ${JSON.stringify(r)}`);
}

/** The policy kept: none for the default (as CrunRuntime keeps it). */
function restricted(p: EgressPolicy | undefined): EgressPolicy | undefined {
  return isRestricted(p) ? { internet: p.internet, allow: [...p.allow], deny: [...p.deny] } : undefined;
}

function insidePath(path: string): string {
  const p = posix.normalize(path);
  if (!p.startsWith('/') || p === '/') throw new TypeError(`not a file's absolute path inside the sandbox: ${path}`);
  return p;
}

function usedBytes(files: Map<string, string>): number {
  let n = 0;
  for (const c of files.values()) n += Buffer.byteLength(c);
  return n;
}
