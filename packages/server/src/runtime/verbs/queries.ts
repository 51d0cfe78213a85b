import { existsSync } from 'node:fs';
import { readFile, readdir, stat } from 'node:fs/promises';
import { childCgroups, readCgroupStats } from '../cgroups.js';
import type { RuntimeContext } from '../context.js';
import type { Crun } from '../crun.js';
import { diskUsage } from '../disk.js';
import { listeningPorts as portsOf, type ListeningPort } from '../listening.js';
import { hasOwnFilesystem } from '../mounts.js';
import { ServiceError } from '@sandboxd/protocol';
import { checkId, ID_RE } from '../sandbox-paths.js';
import type { RuntimeStatus, SandboxStats } from '../types.js';

export async function status(ctx: RuntimeContext, id: string): Promise<RuntimeStatus> {
  checkId(id);
  const st = await ctx.crun.state(id);
  if (st?.status === 'running') return 'running';
  if (st?.status === 'paused') return 'paused';
  return (await ctx.hasTrace(id)) ? 'stopped' : 'missing';
}

/** status() of many sandboxes for the price of one `crun list`. */
export async function statuses(ctx: RuntimeContext, ids: string[]): Promise<Map<string, RuntimeStatus>> {
  for (const id of ids) checkId(id);
  const out = new Map<string, RuntimeStatus>();
  let states: Awaited<ReturnType<Crun['states']>>;
  try {
    states = await ctx.crun.states();
  } catch (err) {
    // One unreadable container state fails the whole list: ask about each, as status() does.
    ctx.log(`crun list failed (${String(err)}); asking each sandbox's state`);
    for (const id of ids) out.set(id, await status(ctx, id));
    return out;
  }
  for (const id of ids) {
    const st = states.get(id)?.status;
    out.set(id, st === 'running' || st === 'paused' ? st : (await ctx.hasTrace(id)) ? 'stopped' : 'missing');
  }
  return out;
}

/** Every sandbox id the runtime holds any trace of (directories, containers, netns, cgroups). */
export async function list(ctx: RuntimeContext): Promise<string[]> {
  const ids = new Set<string>([...(await ctx.sandboxDirIds()), ...(await ctx.crun.ids())]);
  try {
    for (const n of await readdir('/run/netns')) if (n.startsWith(ctx.netnsPrefix)) ids.add(n.slice(ctx.netnsPrefix.length));
  } catch {
    /* no named netns at all */
  }
  for (const n of await childCgroups(await ctx.layout(), `/${ctx.cgroupParent}`)) ids.add(n);
  return [...ids].filter((i) => ID_RE.test(i)).sort();
}

export async function stats(ctx: RuntimeContext, id: string): Promise<SandboxStats> {
  checkId(id);
  const p = ctx.paths(id);
  if (!existsSync(p.dir)) throw new ServiceError('NOT_FOUND', `sandbox ${id} does not exist`);
  const cg = await readCgroupStats(await ctx.layout(), ctx.cgroupPath(id));
  let disk = { usedBytes: 0, totalBytes: 0 };
  // A running sandbox's disk is mounted in its own namespace only: the root of its init (the
  // overlay) reports the statistics of the filesystem its upper is on, the disk.
  const pid = await ctx.containerInit(id);
  const running = pid !== undefined && (await diskUsage(`/proc/${pid}/root`).catch(() => undefined));
  if (running) disk = running;
  else if (await hasOwnFilesystem(p.disk)) disk = await diskUsage(p.disk);
  else if (existsSync(p.image)) {
    const s = await stat(p.image);
    disk = { usedBytes: s.blocks * 512, totalBytes: s.size };
  }
  // The host end of its veth: what the host receives the sandbox sent.
  const counter = (name: string) =>
    readFile(`/sys/class/net/${ctx.vethName(id)}/statistics/${name}`, 'utf8').then(
      (t) => Number(t.trim()) || 0,
      () => 0,
    );
  const ip = ctx.egress.ipOf(id) ?? (await ctx.readIp(id));
  const [hostRx, hostTx, egressDenied] = await Promise.all([counter('rx_bytes'), counter('tx_bytes'), ip ? ctx.egress.deniedCount(ip) : 0]);
  return { ...cg, diskUsedBytes: disk.usedBytes, diskTotalBytes: disk.totalBytes, networkRxBytes: hostTx, networkTxBytes: hostRx, egressDenied };
}

/** Pid (on the host) of the sandbox's init, or undefined when not running. */
export async function initPid(ctx: RuntimeContext, id: string): Promise<number | undefined> {
  const st = await ctx.crun.state(id);
  return st && st.pid > 0 ? st.pid : undefined;
}

/** TCP ports something listens on inside the sandbox, from its network namespace's tables. */
export async function listeningPorts(ctx: RuntimeContext, id: string): Promise<ListeningPort[]> {
  checkId(id);
  const pid = await initPid(ctx, id);
  return pid === undefined ? [] : portsOf(pid);
}
