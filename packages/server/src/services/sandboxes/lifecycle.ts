import { ServiceError } from '@sandboxd/protocol';
import type { SandboxRow } from '../../store/types/index.js';
import { checkTimeout } from '../limits.js';
import { Slots } from '../locks.js';
import type { SandboxCore } from './core.js';

/** Waits before the second and third try of a failed teardown. */
const TEARDOWN_RETRIES_MS = [1000, 5000];
/** Teardowns at once (each kills a container and removes its mounts, network and files). */
const TEARDOWN_CONCURRENCY = 8;

/**
 * The lifecycle verbs of a sandbox that exists: pause, resume, stop, start, delete, its timeout, a
 * wake on traffic, and a rollback to a snapshot. Each is a transition (core.ts): the lock, the
 * state guard and the compare-and-set in one place, the node's verb inside.
 */
export class Lifecycle {
  /** Deleted sandboxes whose host objects are being removed (tearDown). */
  private readonly teardowns = new Map<string, Promise<void>>();
  private readonly teardownSlots = new Slots(TEARDOWN_CONCURRENCY);
  /** Wake-ups under way (auto_resume): concurrent requests to a sleeping sandbox share one. */
  private readonly waking = new Map<string, Promise<void>>();

  constructor(private readonly c: SandboxCore) {}

  /** A use of the sandbox (a lifecycle call about it, or a request through its gateway): it is not idle. */
  touch(id: string): void {
    if (!this.c.d.routes.get(id)?.tracksIdle) return;
    this.c.activity.set(id, Date.now());
    this.c.replicas.used(id);
  }

  /** Another replica saw the sandbox used at `at`. */
  usedElsewhere(id: string, at: number): void {
    if ((this.c.activity.get(id) ?? 0) < at) this.c.activity.set(id, at);
  }

  /**
   * auto_resume: a request reached a paused sandbox that wakes on traffic. Resumes it once for all
   * the requests that arrive meanwhile; resolves when it runs (or when it no longer sleeps).
   */
  wake(id: string): Promise<void> {
    let w = this.waking.get(id);
    if (!w) {
      w = (async () => {
        // A pause under way (the gateway already sees it paused) finishes first.
        await this.c.d.locks.run(id, async () => undefined);
        const row = await this.c.d.store.sandboxes.byId(id);
        if (!row || row.status !== 'paused' || !row.autoResume) return;
        await this.resume(row.orgId, id, 'traffic').catch((err: unknown) => {
          // Another request resumed it first: that is what was wanted.
          if (!(err instanceof ServiceError && err.code === 'INVALID_STATE')) throw err;
        });
      })().finally(() => this.waking.delete(id));
      this.waking.set(id, w);
    }
    return w;
  }

  /**
   * `reason`: who paused it: `api`, `idle` (no use for idle_timeout_seconds) or `timeout` (its
   * deadline, with on_timeout "pause"). A sandbox that sleeps on its deadline is then kept for the
   * retention time (its expires_at says until when).
   */
  async pause(orgId: string, id: string, reason: 'api' | 'idle' | 'timeout' = 'api'): Promise<SandboxRow> {
    const { d } = this.c;
    const row = await this.c.transition(orgId, id, 'pause', ['running'], async (r) => {
      // New requests see it paused from here (they wait for the pause, or wake it after); one
      // already let in keeps an idle sandbox awake.
      d.routes.setStatus(r.id, 'paused');
      if (reason === 'idle' && d.gateway.busy?.(r.id)) {
        d.routes.setStatus(r.id, 'running');
        this.c.activity.set(r.id, Date.now());
        throw new ServiceError('INVALID_STATE', `sandbox ${r.id} is in use`, { id: r.id, current_state: 'running' });
      }
      // Its time is up: what is in flight is cut (as a delete would), not frozen until someone
      // wakes it; a client that tries again wakes it (auto_resume) or is told it sleeps.
      if (reason === 'timeout') {
        d.gateway.interrupt?.(r.id);
        this.c.replicas.interrupted(r.id);
      }
      try {
        await this.c.node(r).pause(r.id);
      } catch (err) {
        d.routes.setStatus(r.id, 'running');
        throw err;
      }
      return { status: 'paused', expiresAt: this.c.retentionDeadline(r, Date.now()) };
    });
    this.c.activity.delete(id);
    this.c.event('paused', row, reason);
    return row;
  }

  /** `reason`: `api`, or `traffic` (auto_resume). Its deadline and idle clock start again. */
  async resume(orgId: string, id: string, reason: 'api' | 'traffic' = 'api'): Promise<SandboxRow> {
    const row = await this.c.transition(orgId, id, 'resume', ['paused'], async (r) => {
      await this.c.node(r).resume(r.id);
      const now = Date.now();
      return {
        status: 'running',
        ...(r.onTimeout === 'pause' ? { expiresAt: r.timeoutSeconds ? new Date(now + r.timeoutSeconds * 1000).toISOString() : null } : {}),
        ...(r.idleTimeoutSeconds ? { idleCheckAt: new Date(now + r.idleTimeoutSeconds * 1000).toISOString() } : {}),
      };
    });
    if (row.idleTimeoutSeconds) this.c.activity.set(id, Date.now());
    this.c.event('resumed', row, reason);
    return row;
  }

  async stop(orgId: string, id: string): Promise<SandboxRow> {
    const row = await this.c.transition(orgId, id, 'stop', ['running', 'paused'], async (r) => {
      this.c.d.routes.setStatus(r.id, 'stopped');
      this.c.activity.delete(r.id);
      await this.c.node(r).stop(r.id);
      return { status: 'stopped' };
    });
    this.c.event('stopped', row);
    return row;
  }

  async start(orgId: string, id: string): Promise<SandboxRow> {
    // A stopped sandbox already holds its disk; running again it holds a slot and its memory. The
    // organization's admissions wait for this boot, so the row is running before the next check.
    // Its disk was counted when it was made: it starts unless the host is past its reserve.
    const releaseDisk = await this.c.d.claimDisk?.(0, 'starting a sandbox');
    releaseDisk?.();
    const row = await this.c.transition(
      orgId,
      id,
      'start',
      ['stopped'],
      async (r) => {
        await this.bootAgain(r);
        const now = Date.now();
        return {
          status: 'running',
          // A sleeping sandbox's expires_at was its retention: running again, its timeout counts from now.
          ...(r.onTimeout === 'pause' ? { expiresAt: r.timeoutSeconds ? new Date(now + r.timeoutSeconds * 1000).toISOString() : null } : {}),
          ...(r.idleTimeoutSeconds ? { idleCheckAt: new Date(now + r.idleTimeoutSeconds * 1000).toISOString() } : {}),
        };
      },
      (r, commit) => this.c.d.quotas.admit(r.orgId, { sandboxes: 1, memoryMb: r.memoryMb, diskGb: 0 }, commit),
    );
    if (row.idleTimeoutSeconds) this.c.activity.set(id, Date.now());
    this.c.event('started', row);
    return row;
  }

  /**
   * Boots a stopped sandbox on its disk, on its node, once its agent answers (an agent that does not:
   * the node stops it again, and the caller gets AGENT_UNAVAILABLE).
   */
  async bootAgain(r: SandboxRow): Promise<void> {
    await this.c.node(r).start(this.c.spec(r));
  }

  async delete(orgId: string, id: string, reason = 'deleted'): Promise<SandboxRow> {
    const { d } = this.c;
    const row = await this.c.transition(orgId, id, 'delete', ['running', 'paused', 'stopped'], async (r) => {
      d.routes.delete(r.id);
      this.c.activity.delete(r.id);
      d.tokens.forget(r.id);
      await d.gateway.close(r.id);
      return { status: 'deleted', deletedReason: reason, deletedAt: new Date().toISOString() };
    });
    this.tearDown(row, row.layers.some((l) => d.snapshots?.owns(l)));
    this.c.event(reason === 'expired' ? 'expired' : 'deleted', row, reason);
    return row;
  }

  /**
   * Removes a deleted sandbox from its node (its container first, then network, disk, directory)
   * after the delete has answered: the row already says deleted and nothing routes to it, so the
   * client does not wait for the teardown. A teardown that fails is tried again twice; one cut
   * short by a crash is finished by the next start's reconcile (the node still lists the sandbox,
   * and no live row claims it). Shutdown waits for the running ones (settle).
   */
  private tearDown(row: Pick<SandboxRow, 'id' | 'nodeId'>, usedSnapshotLayers = false): void {
    if (this.teardowns.has(row.id)) return;
    // A bounded number at once: a sweep after a long outage can delete a thousand together.
    const done = this.teardownSlots
      .run(() => this.destroyRetrying(row))
      .finally(() => {
        this.teardowns.delete(row.id);
        // It may have been the last user of a snapshot's or a fork's layer.
        if (usedSnapshotLayers) void this.c.d.snapshots?.collectSoon();
      });
    this.teardowns.set(row.id, done);
  }

  private async destroyRetrying(row: Pick<SandboxRow, 'id' | 'nodeId'>): Promise<void> {
    for (let i = 0; ; i++) {
      try {
        await this.c.node(row).destroy(row.id);
        return;
      } catch (err) {
        if (i >= TEARDOWN_RETRIES_MS.length) {
          this.c.d.log('removing a deleted sandbox failed; the next start of the service removes what is left', { id: row.id, error: String(err) });
          return;
        }
        await new Promise((r) => setTimeout(r, TEARDOWN_RETRIES_MS[i]));
      }
    }
  }

  /** Waits until every teardown that has begun has ended (shutdown, tests). */
  async settle(): Promise<void> {
    while (this.teardowns.size > 0) await Promise.allSettled([...this.teardowns.values()]);
  }

  async setTimeout(orgId: string, id: string, timeoutSeconds: number): Promise<SandboxRow> {
    return this.c.transition(orgId, id, 'set the timeout of', ['running', 'paused', 'stopped'], async (r) => {
      checkTimeout(await this.c.d.quotas.limitsFor(orgId), timeoutSeconds);
      // Asleep with on_timeout "pause": its expires_at is its retention; the timeout counts from its wake-up.
      if (r.onTimeout === 'pause' && r.status === 'paused') return { timeoutSeconds };
      return { timeoutSeconds, expiresAt: new Date(Date.now() + timeoutSeconds * 1000).toISOString() };
    });
  }

  /**
   * A running or paused sandbox that cannot run (its agent exited from inside, or it could not be
   * brought back at a restart) is stopped, so that what the API says is true; its URL then answers
   * 409 SANDBOX_STOPPED.
   */
  async markStopped(row: SandboxRow, reason: string): Promise<void> {
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

  async refreshToken(orgId: string, id: string, keyId?: string) {
    const row = await this.c.get(orgId, id);
    return this.c.d.tokens.issue(row.id, row.orgId, keyId);
  }

  /**
   * The one token E2B's clients get for the sandbox (kept in its row: they sign file URLs with it,
   * and the gateway checks those signatures against it). The kept one while it is valid for more
   * than `renewWithinMs`; else (none yet, expired, or its key revoked) a new one made with `keyId`,
   * which replaces it.
   */
  async keptToken(orgId: string, id: string, keyId: string | undefined, renewWithinMs: number): Promise<string> {
    const { d } = this.c;
    return d.locks.run(id, async () => {
      const row = await this.c.get(orgId, id);
      if (row.e2bAccessToken) {
        const claims = await d.tokens.verify(row.e2bAccessToken, id).catch(() => undefined);
        if (claims && claims.expiresAt * 1000 - Date.now() > renewWithinMs) return row.e2bAccessToken;
      }
      const { token } = await d.tokens.issue(row.id, row.orgId, keyId);
      const next = await d.store.sandboxes.update(id, row.version, { e2bAccessToken: token });
      if (!next) throw new ServiceError('INVALID_STATE', `sandbox ${id} was changed by another request while this one ran; read it again and retry`, { id, current_state: row.status });
      this.c.route(next);
      return token;
    });
  }

  /**
   * `POST /v1/sandboxes/{id}/restore`: the sandbox's files become those of a snapshot of its own
   * lineage (taken of it, or of a sandbox it was forked or made from); its processes start again
   * on them. It keeps its id, URL, token, network and deadline; a stopped sandbox stays stopped
   * (its next start shows the snapshot's files), a paused one runs.
   */
  async restore(orgId: string, id: string, snapshotId: string): Promise<SandboxRow> {
    const snapshots = needSnapshots(this.c);
    const found = await snapshots.get(orgId, snapshotId);
    return snapshots.pinned(found.layers, () => this.restorePinned(orgId, id, snapshotId));
  }

  private async restorePinned(orgId: string, id: string, snapshotId: string): Promise<SandboxRow> {
    // Read again with its layers pinned: a delete that came first is a 404, one that comes later keeps them.
    const snap = await needSnapshots(this.c).get(orgId, snapshotId);
    return this.c.transition(orgId, id, 'restore', ['running', 'paused', 'stopped'], async (r) => {
      if (snap.sandboxId !== r.id && !r.lineage.includes(snap.sandboxId)) {
        throw new ServiceError(
          'VALIDATION_ERROR',
          `snapshot ${snap.id} is not of this sandbox's lineage: it was taken of sandbox ${snap.sandboxId}, which this sandbox does not descend from; create a sandbox from it instead`,
          { id: r.id, snapshot_id: snap.id },
        );
      }
      if (snap.diskGb > r.diskGb) throw new ServiceError('VALIDATION_ERROR', `snapshot ${snap.id} was taken of a sandbox with a larger disk (${snap.diskGb} GB) than this one's (${r.diskGb} GB)`);
      const live = r.status !== 'stopped';
      const node = this.c.node(r);
      if (r.status === 'paused') await node.resume(r.id);
      await node.stop(r.id);
      await node.resetDisk(r.id, r.diskGb);
      const patch = { layers: snap.layers, templateEnv: snap.templateEnv, envVars: snap.envVars, snapshotId: snap.id };
      if (live) {
        try {
          await this.bootAgain({ ...r, ...patch });
        } catch (err) {
          // Its files are the snapshot's already: the row says so, and that it is stopped.
          const stopped = await this.c.d.store.sandboxes.update(r.id, r.version, { ...patch, status: 'stopped', updatedAt: new Date().toISOString() });
          if (stopped) this.c.route(stopped);
          throw err;
        }
      }
      this.c.d.log('sandbox restored', { id: r.id, snapshot: snap.id });
      return { ...patch, status: live ? 'running' : 'stopped' };
    });
  }
}

/** The snapshot service, or the refusal of a service that keeps none. */
export function needSnapshots(c: SandboxCore) {
  if (!c.d.snapshots) throw new ServiceError('RUNTIME_ERROR', 'this service keeps no snapshots');
  return c.d.snapshots;
}
