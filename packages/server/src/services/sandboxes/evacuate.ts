import { describeCause, ServiceError } from '@sandboxd/protocol';
import { UndoStack } from '../../runtime/undo.js';
import type { SandboxRow } from '../../store/types/index.js';
import { Slots } from '../locks.js';
import type { SandboxCore } from './core.js';
import { needSnapshots, type Lifecycle } from './lifecycle.js';

/** Moves at once: each copies a disk out of one node and boots it on another. */
const MOVE_CONCURRENCY = 4;
/** How long one drain call starts moves before it answers (its caller calls again for the rest). */
export const DRAIN_BUDGET_MS = 20_000;

export interface DrainOptions {
  /** Running sandboxes are stopped first (as their owners' stop would) and moved as stopped ones; otherwise they are left to end. */
  stopRunning?: boolean;
  /** Moves start only within this long of the call (default DRAIN_BUDGET_MS); those under way then finish. */
  budgetMs?: number;
}

export interface DrainReport {
  nodeId: string;
  /** Moved by this call, each with the node it went to, in the state it had. */
  moved: Array<{ id: string; orgId: string; status: 'stopped' | 'paused'; to: string }>;
  /** Not moved by this call, each left where it was, as it was. */
  failed: Array<{ id: string; orgId: string; status: SandboxRow['status']; error: ServiceError }>;
  /** Running on the node: left to end by their deadlines or their owners (stopRunning moves them). */
  running: Array<{ id: string; orgId: string; expiresAt: string | null }>;
  /** Stopped and paused ones this call had no time for. */
  left: number;
  /** No live sandbox of the store is on the node any more. */
  drained: boolean;
}

/**
 * A drain: the node takes nothing new (`draining`, which also empties its warm pool, roles/node.ts)
 * and its sandboxes move to other nodes. A stopped sandbox moves whole: its own files are copied
 * out as a layer (as a snapshot's are), and it is booted on the node placement chooses, with the
 * same id, over its layers and that one, on a new disk, then stopped there; its row then names
 * that node, in one versioned update, and the old node's copy goes. A paused one moves the same
 * way and is paused again there: its files go along, its processes' memory does not (they start
 * anew, as after a reboot of its node). A running one is reported and left, unless the operator
 * asks for it to be stopped first. Anything that fails before the row moves is undone: the sandbox
 * stays where it was, as it was. A drain called again goes on from where the last one stopped.
 */
export class Evacuations {
  constructor(
    private readonly c: SandboxCore,
    private readonly lifecycle: Lifecycle,
  ) {}

  async drain(nodeId: string, opts: DrainOptions = {}): Promise<DrainReport> {
    const { d } = this.c;
    if (!(await d.store.nodes.setStatus(nodeId, 'draining'))) throw new ServiceError('NOT_FOUND', `no node ${nodeId} in the cluster`, { node: nodeId });
    const deadline = Date.now() + (opts.budgetMs ?? DRAIN_BUDGET_MS);
    const report: DrainReport = { nodeId, moved: [], failed: [], running: [], left: 0, drained: false };
    const rows = (await d.store.sandboxes.live(nodeId)).filter((r) => r.status === 'running' || r.status === 'paused' || r.status === 'stopped');
    const movable: SandboxRow[] = [];
    for (const r of rows) {
      if (r.status === 'running' && !opts.stopRunning) report.running.push({ id: r.id, orgId: r.orgId, expiresAt: r.expiresAt });
      else movable.push(r);
    }
    const slots = new Slots(MOVE_CONCURRENCY);
    await Promise.all(
      movable.map((r) =>
        slots.run(async () => {
          if (Date.now() >= deadline) {
            report.left++;
            return;
          }
          try {
            // Stopped as its owner would stop it (its event, its route), then moved as any stopped one.
            if (r.status === 'running') await this.lifecycle.stop(r.orgId, r.id);
            const moved = await this.move(r.id, nodeId);
            if (moved) report.moved.push({ id: r.id, orgId: r.orgId, ...moved });
          } catch (err) {
            const error = err instanceof ServiceError ? err : new ServiceError('RUNTIME_ERROR', `sandbox ${r.id} could not be moved`).withDetail(describeCause(err));
            if (!(err instanceof ServiceError)) d.log('moving a sandbox failed', { id: r.id, error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
            report.failed.push({ id: r.id, orgId: r.orgId, status: (await d.store.sandboxes.byId(r.id).catch(() => undefined))?.status ?? r.status, error });
          }
        }),
      ),
    );
    report.drained = (await d.store.sandboxes.live(nodeId)).length === 0;
    d.log('node drain', { node: nodeId, moved: report.moved.length, failed: report.failed.length, running: report.running.length, left: report.left, drained: report.drained });
    return report;
  }

  /**
   * Moves stopped or paused sandbox `id` off node `from`, under its lock: where it went, or
   * undefined when it is no longer a stopped or paused sandbox of that node (moved, started or
   * deleted meanwhile).
   */
  private move(id: string, from: string): Promise<{ status: 'stopped' | 'paused'; to: string } | undefined> {
    const { d } = this.c;
    const snapshots = needSnapshots(this.c);
    return d.locks.run(id, async () => {
      const r = await d.store.sandboxes.byId(id);
      if (!r || r.nodeId !== from || (r.status !== 'stopped' && r.status !== 'paused')) return undefined;
      const status = r.status;
      const undo = new UndoStack((msg) => d.log(`moving a sandbox: ${msg}`, { id }));
      // Its own files, as a layer of control's (nodes fetch it as they fetch a snapshot's).
      const captured = await snapshots.capture(r, 'move');
      undo.push('the copy of its files', () => snapshots.discard(captured));
      try {
        const layers = [captured.layerId, ...r.layers];
        const placed = await d.placement.receive(this.c.spec({ ...r, layers }), new Set([from]));
        undo.push('its new copy', () => d.placement.discard(placed));
        const there = d.placement.node(placed.nodeId);
        await (status === 'paused' ? there.pause(id) : there.stop(id));
        const next = await this.switchNode(r, { nodeId: placed.nodeId, layers }, () => {
          // Whether the row moved is not known: what each node and the layer store hold is left to
          // their collections, which go by the row (node/orphans.ts, snapshots/collect.ts).
          undo.commit();
          d.placement.recorded(id);
          captured.release();
        });
        undo.commit();
        d.placement.recorded(id);
        captured.release();
        this.c.route(next);
        // A copy left (its node away) is no row's: that node's collection removes it.
        await d.placement
          .node(from)
          .destroy(id)
          .catch((err: unknown) => d.log('removing a moved sandbox from the node it left failed; that node collects it', { id, node: from, error: String(err) }));
        d.log('sandbox moved', { id, from, to: placed.nodeId, status, bytes: captured.sizeBytes });
        return { status, to: placed.nodeId };
      } catch (err) {
        await undo.run();
        throw err;
      }
    });
  }

  /**
   * The row's node and layers, in one versioned update. A store whose answer is lost is read
   * again: the row moved, or it did not (then the move is undone); when that read fails too,
   * `unknown` runs before the error is thrown.
   */
  private async switchNode(r: SandboxRow, patch: Pick<SandboxRow, 'nodeId' | 'layers'>, unknown: () => void): Promise<SandboxRow> {
    const { d } = this.c;
    let next: SandboxRow | undefined;
    try {
      next = await d.store.sandboxes.update(r.id, r.version, { ...patch, updatedAt: new Date().toISOString() });
    } catch (err) {
      const now = await d.store.sandboxes.byId(r.id).catch(() => undefined);
      if (!now) unknown();
      if (now?.nodeId !== patch.nodeId || now.layers[0] !== patch.layers[0]) throw err;
      next = now;
    }
    if (!next) throw new ServiceError('INVALID_STATE', `sandbox ${r.id} was changed while it moved; it stays on node ${r.nodeId}`, { id: r.id, current_state: r.status });
    return next;
  }
}
