import { ServiceError } from '@sandboxd/protocol';
import type { RuntimeStatus } from '../../runtime/types.js';
import type { SandboxRow } from '../../store/types/index.js';
import type { SandboxCore } from './core.js';
import type { Lifecycle } from './lifecycle.js';
import { ABANDONED_CREATE_MS } from './upkeep.js';

export type ReconcileStats = { restored: number; cleaned: number; rebooted: number; lost: number; unknown: number };

/** The reconcile at start: the nodes made to match the store, after the service was down. */
export class Reconcile {
  constructor(
    private readonly c: SandboxCore,
    private readonly lifecycle: Lifecycle,
  ) {}

  /**
   * After a (re)start: make the nodes match the store. Interrupted creates and leftovers are
   * removed; running sandboxes whose container is gone (host reboot) boot again on their disk;
   * every live sandbox gets its route and public_host back on the same port.
   */
  async run(): Promise<ReconcileStats> {
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
      if (current.status === 'running' || current.status === 'paused') await this.lifecycle.markStopped(current, 'could not be restarted after the service restarted');
    }
  }

}
