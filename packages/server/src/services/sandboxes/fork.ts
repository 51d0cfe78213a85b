import { ServiceError, type CreateSandboxBody, type ForkBody } from '@sandboxd/protocol';
import { ExportTooLarge } from '../../runtime/types.js';
import type { CapturedLayer } from '../snapshots/index.js';
import type { SandboxCore } from './core.js';
import type { Created, CreateOpts, Creates } from './create.js';
import { needSnapshots, type Lifecycle } from './lifecycle.js';
import type { CreateSource } from './spec.js';

/** Forks: new sandboxes with a running (or paused, or stopped) sandbox's files, made as creates are. */
export class Forks {
  constructor(
    private readonly c: SandboxCore,
    private readonly creates: Creates,
    private readonly lifecycle: Lifecycle,
  ) {}

  /**
   * `POST /v1/sandboxes/{id}/fork`: `count` new running sandboxes with the source's files as they
   * are now (one copy, frozen for it if it runs), each with its own id, token, disk, network and
   * deadline: the caller's, or the source's. All or none: a fork that fails half-way deletes the
   * sandboxes it made.
   */
  async fork(orgId: string, id: string, body: ForkBody, opts: CreateOpts = {}): Promise<Created[]> {
    const { d } = this.c;
    const snapshots = needSnapshots(this.c);
    const count = body.count ?? 1;
    await this.c.get(orgId, id);
    await snapshots.checkStorage(orgId, 0);
    const { src, captured } = await d.locks.run(id, async () => {
      const r = await this.c.get(orgId, id);
      if (r.status !== 'running' && r.status !== 'paused' && r.status !== 'stopped') {
        throw new ServiceError('INVALID_STATE', `cannot fork a sandbox whose current state is ${r.status}`, { id, current_state: r.status });
      }
      // The copy counts against the organization's snapshot storage for as long as a fork mounts it.
      let c: CapturedLayer;
      try {
        c = await snapshots.capture(r, 'fork', await snapshots.room(orgId));
      } catch (err) {
        if (err instanceof ExportTooLarge) await snapshots.checkStorage(orgId, err.used);
        throw err;
      }
      try {
        await snapshots.checkStorage(orgId, c.sizeBytes);
      } catch (err) {
        await snapshots.discard(c);
        throw err;
      }
      return { src: r, captured: c };
    });
    const source: CreateSource = {
      templateId: src.templateId,
      templateName: src.templateName,
      vcpu: src.vcpu,
      memoryMb: src.memoryMb,
      diskGb: src.diskGb,
      layers: [captured.layerId, ...src.layers],
      templateEnv: src.templateEnv,
      envVars: captured.envVars,
      snapshotId: null,
      lineage: [src.id, ...src.lineage].slice(0, 100),
      poolId: `fork:${captured.layerId}`,
      egress: src.internetAccess ? src.egress : undefined,
    };
    const createBody: CreateSandboxBody = {
      region: src.region,
      timeout_seconds: body.timeout_seconds !== undefined ? body.timeout_seconds : src.timeoutSeconds,
      internet_access: body.internet_access ?? (body.allow_out !== undefined || body.deny_out !== undefined ? undefined : src.internetAccess),
      allow_out: body.allow_out,
      deny_out: body.deny_out,
      env_vars: body.env_vars,
      on_timeout: body.on_timeout ?? src.onTimeout,
      idle_timeout_seconds: body.idle_timeout_seconds !== undefined ? body.idle_timeout_seconds : src.idleTimeoutSeconds,
      auto_resume: body.auto_resume ?? src.autoResume,
      // Forks mount the source's volumes (the same volumes, shared: never copied).
      ...(src.volumes?.length ? { volumes: src.volumes.map((v) => ({ name: v.id, path: v.path, read_only: v.readOnly })) } : {}),
    };
    // Without internet_access named, the fork gets the source's network and policy (both, or none).
    if (body.internet_access === undefined && body.allow_out === undefined && body.deny_out === undefined) {
      createBody.internet_access = src.internetAccess;
    } else {
      source.egress = undefined;
    }
    const results = await Promise.allSettled(Array.from({ length: count }, () => this.creates.createFrom(orgId, source, createBody, opts)));
    // The pools keep nothing for a key no create will ask for again.
    await d.placement.dropWarm(source.poolId);
    const made = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      for (const m of made) {
        await this.lifecycle.delete(orgId, m.sandbox.id, 'fork_failed').catch((err: unknown) => d.log('removing a fork of a failed fork failed', { id: m.sandbox.id, error: String(err) }));
      }
      captured.release();
      void snapshots.collectSoon();
      throw failed.reason;
    }
    captured.release();
    d.log('sandbox forked', { id, forks: made.map((m) => m.sandbox.id), bytes: captured.sizeBytes, frozen_ms: Math.round(captured.frozenMs) });
    return made;
  }
}
