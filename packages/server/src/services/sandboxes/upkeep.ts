import { ServiceError } from '@sandboxd/protocol';
import type { SandboxRow } from '../../store/types/index.js';
import type { SandboxCore } from './core.js';
import type { Lifecycle } from './lifecycle.js';

/** With replicas, a sandbox still `creating` this long after its row was written was abandoned (its replica died). */
export const ABANDONED_CREATE_MS = 10 * 60_000;
/** How long a gone agent's container is watched for its exit: every 100 ms for GONE_FAST_MS, then every second. */
const GONE_WATCH_MS = 30_000;
const GONE_FAST_MS = 3_000;
/** How often sweep purges tombstones older than tombstoneSeconds. */
const PURGE_INTERVAL_MS = 60_000;

/**
 * What keeps the store and the nodes telling the same story while the service runs: the sweep of
 * deadlines, idle sandboxes and tombstones, a sandbox whose agent went away, and OOM kills (the
 * reconcile at start: reconcile.ts).
 */
export class Upkeep {
  /** Sandboxes whose gone agent is being looked into (agentGone). */
  private readonly checkingGone = new Set<string>();
  /** When sweep last purged old tombstones (ms since the epoch). */
  private lastPurge = 0;

  constructor(
    private readonly c: SandboxCore,
    private readonly lifecycle: Lifecycle,
  ) {}

  /**
   * Publishes `oom_killed` as the nodes report OOM kills in a running sandbox (a ready one not
   * handed out yet has no row, and is not reported; only the node that holds a sandbox speaks for
   * it). Returns the function that stops it.
   */
  watchOom(): () => void {
    const { d } = this.c;
    return d.placement.watchOom((id, kills, nodeId) => {
      d.store.sandboxes
        .byId(id)
        .then((row) => {
          if (!row || row.status !== 'running') return;
          if (this.c.node(row).id !== nodeId) return d.log(`node ${nodeId} reported an OOM kill of sandbox ${id}, which it does not hold: ignored`);
          this.c.event('oom_killed', row, `${kills} process(es) killed: out of memory`);
        })
        .catch((err: unknown) => d.log('reporting an OOM kill failed', { id, error: String(err) }));
    });
  }

  /**
   * Every sandbox whose deadline passed is deleted, or, with on_timeout "pause", paused (and once
   * paused past its retention, deleted); every running one unused for its idle timeout is paused.
   * Purges old tombstones.
   */
  async sweep(): Promise<number> {
    const { d } = this.c;
    const now = new Date();
    const due = await d.store.sandboxes.expired(now.toISOString());
    const quiet = (err: unknown) => err instanceof ServiceError && (err.code === 'NOT_FOUND' || err.code === 'INVALID_STATE');
    for (const row of due) {
      // A long operation on it (a snapshot's copy) must not hold up every other sandbox's deadline:
      // it stays due, and the next sweep takes it.
      if (await this.c.working(row.id)) continue;
      try {
        if (row.onTimeout === 'pause' && row.status === 'running') await this.lifecycle.pause(row.orgId, row.id, 'timeout');
        else if (row.onTimeout === 'pause' && row.status === 'paused') await this.lifecycle.delete(row.orgId, row.id, 'retention');
        else await this.lifecycle.delete(row.orgId, row.id, 'expired');
      } catch (err) {
        if (!quiet(err)) d.log('expiring a sandbox failed', { id: row.id, error: String(err) });
      }
    }
    for (const row of await d.store.sandboxes.idleDue(now.toISOString())) {
      if (await this.c.working(row.id)) continue;
      try {
        await this.idleCheck(row, now.getTime());
      } catch (err) {
        if (!quiet(err)) d.log('pausing an idle sandbox failed', { id: row.id, error: String(err) });
      }
    }
    // Tombstones are kept for a day by default: purging them once a minute is plenty.
    if (now.getTime() - this.lastPurge >= PURGE_INTERVAL_MS) {
      this.lastPurge = now.getTime();
      if (this.c.replicas.shared) await this.removeAbandonedCreates(now.getTime());
      await d.store.sandboxes.purgeDeleted(new Date(now.getTime() - d.tombstoneSeconds * 1000).toISOString());
    }
    return due.length;
  }

  /**
   * Replicas: rows a replica wrote for a create and never finished (it died). A create's row names
   * no sandbox until it is running (its id is a placeholder): what the create took from a node, if
   * anything, is no row's, and the node collects it.
   */
  private async removeAbandonedCreates(now: number): Promise<void> {
    for (const row of await this.c.d.store.sandboxes.live()) {
      if (row.status !== 'creating' || now - Date.parse(row.createdAt) < ABANDONED_CREATE_MS || (await this.c.working(row.id))) continue;
      this.c.d.log('removing a create that a replica abandoned', { id: row.id, created_at: row.createdAt });
      await this.c.d.store.sandboxes.remove(row.id);
    }
  }

  /**
   * An idle check came due: paused if nothing used it for its idle timeout (nothing in flight, no
   * WebSocket open, no call since), or else looked at again when that much time has passed since
   * its last use.
   */
  private async idleCheck(row: SandboxRow, now: number): Promise<void> {
    const { d } = this.c;
    const idleMs = (row.idleTimeoutSeconds ?? 0) * 1000;
    if (d.gateway.busy?.(row.id)) this.c.activity.set(row.id, now);
    // Unknown here (the daemon started since): counted from now, so a restart never pauses early.
    if (!this.c.activity.has(row.id)) this.c.activity.set(row.id, now);
    const last = this.c.activity.get(row.id)!;
    if (idleMs > 0 && now - last < idleMs) {
      // Under the sandbox's lock, on a fresh read: a pause, stop or delete under way is not undone.
      await d.locks.run(row.id, async () => {
        const fresh = await d.store.sandboxes.byId(row.id);
        if (fresh?.status === 'running') await d.store.sandboxes.update(fresh.id, fresh.version, { idleCheckAt: new Date(last + idleMs).toISOString() });
      });
      return;
    }
    await this.lifecycle.pause(row.orgId, row.id, 'idle');
  }

  /**
   * The gateway found no agent on a running sandbox's socket. If its container is gone too (code
   * inside killed the agent, and PID 1 exited with it), the sandbox is stopped: say so, instead of
   * reporting it running until its deadline. One check at a time per sandbox.
   */
  agentGone(id: string): void {
    const { d } = this.c;
    if (this.checkingGone.has(id)) return;
    this.checkingGone.add(id);
    void (async () => {
      const row = await d.store.sandboxes.byId(id);
      if (!row || row.status !== 'running') return;
      const node = this.c.node(row);
      // The container's init exits right after the agent, but not in the same instant (its mount
      // namespace, and with it the sandbox's disk, goes as it exits; slower on a busy host): a check
      // made at once can still find it running. Look often at first, then now and then, outside the
      // sandbox's lock, before deciding the agent was only busy (or the connection broke for
      // another reason). A state that cannot be read now is asked again.
      const status = () => node.status(id).catch(() => 'running' as const);
      for (let waited = 0; waited < GONE_WATCH_MS && (await status()) === 'running'; ) {
        const step = waited < GONE_FAST_MS ? 100 : 1000;
        await new Promise((r) => setTimeout(r, step));
        waited += step;
      }
      await d.locks.run(id, async () => {
        const fresh = await d.store.sandboxes.byId(id);
        if (!fresh || fresh.status !== 'running') return;
        if ((await this.c.node(fresh).status(id)) !== 'stopped') return;
        d.log('sandbox stopped from inside: its agent is gone', { id });
        await this.lifecycle.markStopped(fresh, 'its agent exited (stopped from inside the sandbox)');
      });
    })()
      .catch((err: unknown) => d.log('checking a gone agent failed', { id, error: String(err) }))
      .finally(() => this.checkingGone.delete(id));
  }
}
