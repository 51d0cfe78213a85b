import { ServiceError } from '@sandboxd/protocol';
import type { RuntimeStatus } from '../../runtime/types.js';
import type { SandboxRow } from '../../store/types.js';
import type { SandboxCore } from './core.js';
import type { Lifecycle } from './lifecycle.js';

/** With replicas, a sandbox still `creating` this long after its row was written was abandoned (its replica died). */
export const ABANDONED_CREATE_MS = 10 * 60_000;
/** How long a gone agent's container is watched for its exit: every 100 ms for GONE_FAST_MS, then every second. */
const GONE_WATCH_MS = 30_000;
const GONE_FAST_MS = 3_000;
/** How often sweep purges tombstones older than tombstoneSeconds. */
const PURGE_INTERVAL_MS = 60_000;

type ReconcileStats = { restored: number; cleaned: number; rebooted: number; lost: number; unknown: number };

/**
 * What keeps the store and the nodes telling the same story: the reconcile at start, the sweep of
 * deadlines, idle sandboxes and tombstones, a sandbox whose agent went away, and OOM kills.
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
   * After a (re)start: make the nodes match the store. Interrupted creates and leftovers are
   * removed; running sandboxes whose container is gone (host reboot) boot again on their disk;
   * every live sandbox gets its route and public_host back on the same port.
   */
  async reconcile(): Promise<ReconcileStats> {
    const { d } = this.c;
    const shared = this.c.replicas.shared;
    const stats: ReconcileStats = { restored: 0, cleaned: 0, rebooted: 0, lost: 0, unknown: 0 };
    const live = await d.store.sandboxes.live();
    const liveIds = new Set<string>();
    const actuals = await this.statuses(live.filter((r) => r.status !== 'creating'));
    for (const row of live) {
      if (row.status === 'creating') {
        // Alone, every create under way was this process's, cut short. With replicas another may
        // be creating it now: only an abandoned one goes (the sweep takes the later ones).
        if (shared && Date.now() - Date.parse(row.createdAt) < ABANDONED_CREATE_MS) continue;
        await d.store.sandboxes.remove(row.id);
        stats.cleaned++;
        continue;
      }
      if (!shared) {
        await this.reconcileOne(row, actuals.get(row.id) ?? 'missing', stats, liveIds);
        continue;
      }
      // Another replica may be in the middle of a verb on it (its container changed, its row not
      // yet): under the sandbox's lock that verb is done, and the row is read again, and the
      // container too when the first reading disagreed with it. Nothing is undone that it did.
      await d.locks.run(row.id, async () => {
        const fresh = await d.store.sandboxes.byId(row.id);
        if (!fresh || fresh.status === 'deleted' || fresh.status === 'creating') return;
        let actual = actuals.get(row.id) ?? 'missing';
        if (fresh.version !== row.version || fresh.status !== actual) actual = await this.c.node(fresh).status(row.id).catch(() => 'unknown' as const);
        await this.reconcileOne(fresh, actual, stats, liveIds);
      });
    }
    // With replicas, what a node holds that no row claims may be another replica's create or a
    // node's ready sandbox: the node collects it after a grace period (node/orphans.ts), not this start.
    for (const { id, nodeId } of shared ? [] : await d.placement.list()) {
      if (!liveIds.has(id)) {
        await d.placement
          .node(nodeId)
          .destroy(id)
          .catch((e: unknown) => d.log('cleaning a leftover failed', { id, error: String(e) }));
        stats.cleaned++;
      }
    }
    await this.reopenPreviews(liveIds);
    return stats;
  }

  /**
   * What each node says of the rows on it: one query per node, not one per sandbox. When that
   * fails, each sandbox is asked alone (one whose state cannot be read must not leave the others
   * unmended), but a node that is away is not asked again per sandbox: its sandboxes are left
   * 'unknown', as they are.
   */
  private async statuses(rows: SandboxRow[]): Promise<Map<string, RuntimeStatus | 'unknown'>> {
    const { d } = this.c;
    const byNode = new Map<string, SandboxRow[]>();
    for (const r of rows) byNode.set(r.nodeId, [...(byNode.get(r.nodeId) ?? []), r]);
    const out = new Map<string, RuntimeStatus | 'unknown'>();
    for (const [nodeId, group] of byNode) {
      const node = d.placement.node(nodeId);
      try {
        for (const [id, st] of await node.statuses(group.map((r) => r.id))) out.set(id, st);
        continue;
      } catch (err) {
        const away = err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE';
        d.log(away ? 'a node is away: the state of its sandboxes cannot be known now; they are left as they are' : 'the node could not tell every sandbox state at once; asking each', { node: nodeId, error: String(err) });
        if (away) {
          for (const r of group) out.set(r.id, 'unknown');
          continue;
        }
      }
      for (const r of group) {
        out.set(
          r.id,
          await node.status(r.id).catch((e: unknown) => {
            d.log('the state of a sandbox cannot be known now; it is left as it is', { id: r.id, error: String(e) });
            return 'unknown' as const;
          }),
        );
      }
    }
    return out;
  }

  /** Preview URLs outlive a restart: each gets its gateway port back (or a new one, if another program took it meanwhile). */
  private async reopenPreviews(liveIds: Set<string>): Promise<void> {
    const { d } = this.c;
    for (const p of d.gateway.openPreview ? await d.store.previews.all() : []) {
      if (!liveIds.has(p.sandboxId) || !d.routes.get(p.sandboxId)) continue;
      try {
        const gw = await d.gateway.openPreview!(p.sandboxId, p.port, p.public, p.gatewayPort).catch(() => d.gateway.openPreview!(p.sandboxId, p.port, p.public, null));
        if (gw !== p.gatewayPort) await d.store.previews.upsert({ ...p, gatewayPort: gw });
      } catch (err) {
        d.log('reopening a preview failed', { id: p.sandboxId, port: p.port, error: err instanceof Error ? err.message : String(err) });
      }
    }
  }

  /** Makes the node match one live row of the store (`actual`: what the node said of it). */
  private async reconcileOne(row: SandboxRow, actual: RuntimeStatus | 'unknown' | 'missing', stats: ReconcileStats, liveIds: Set<string>): Promise<void> {
    const { d } = this.c;
    let current = row;
    if (actual === 'unknown') {
      // Its node is away: routed as it is, its calls answer that the node is not answering.
      liveIds.add(row.id);
      this.c.route(row);
      await d.gateway.open(row.id, row.gatewayPort).catch((e: unknown) => d.log('reopening a gateway port failed', { id: row.id, error: String(e) }));
      stats.unknown++;
      return;
    }
    try {
      if (actual === 'missing') {
        current = (await d.store.sandboxes.update(row.id, row.version, {
          status: 'deleted',
          deletedReason: 'lost',
          deletedAt: new Date().toISOString(),
          updatedAt: new Date().toISOString(),
        }))!;
        stats.lost++;
        d.log('sandbox lost: its runtime state is gone', { id: row.id });
        return;
      }
      const node = this.c.node(row);
      if ((row.status === 'running' || row.status === 'paused') && actual === 'stopped') {
        await this.lifecycle.bootAgain(row);
        if (row.status === 'paused') await node.pause(row.id);
        stats.rebooted++;
      } else if (row.status === 'running' && actual === 'paused') {
        await node.resume(row.id);
      } else if (row.status === 'paused' && actual === 'running') {
        await node.pause(row.id);
      } else if (row.status === 'stopped' && actual !== 'stopped') {
        await node.stop(row.id);
      }
      liveIds.add(row.id);
      this.c.route(current);
      const port = await d.gateway.open(row.id, row.gatewayPort);
      if (port !== row.gatewayPort) {
        current = (await d.store.sandboxes.update(row.id, row.version, { gatewayPort: port })) ?? current;
        this.c.route(current);
      }
      stats.restored++;
    } catch (err) {
      d.log('reconciling a sandbox failed', { id: row.id, error: err instanceof Error ? err.message : String(err) });
      liveIds.add(row.id);
      // A sandbox that cannot be brought back (its agent never answers, say) is stopped, so that
      // what the API says is true and no start of the daemon trips over it again.
      if (current.status === 'running' || current.status === 'paused') await this.markStopped(current, 'could not be restarted after the service restarted');
    }
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
        await this.markStopped(fresh, 'its agent exited (stopped from inside the sandbox)');
      });
    })()
      .catch((err: unknown) => d.log('checking a gone agent failed', { id, error: String(err) }))
      .finally(() => this.checkingGone.delete(id));
  }

  private async markStopped(row: SandboxRow, reason: string): Promise<void> {
    const { d } = this.c;
    try {
      await this.c.node(row).stop(row.id);
      const next = await d.store.sandboxes.update(row.id, row.version, { status: 'stopped', updatedAt: new Date().toISOString() });
      if (next) {
        this.c.route(next);
        // Its URL answers 409 SANDBOX_STOPPED, as every stopped sandbox's does.
        await d.gateway.open(next.id, next.gatewayPort);
        this.c.event('stopped', next, reason);
      }
    } catch (err) {
      d.log('marking a sandbox stopped failed', { id: row.id, error: String(err) });
    }
  }
}
