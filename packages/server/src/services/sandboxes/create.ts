import { describeCause, isProgrammingError, ServiceError, type CreateSandboxBody, type Sandbox } from '@sandboxd/protocol';
import { DEFAULT_TEMPLATE } from '../../images/builtin.js';
import { newSandboxId } from '../../runtime/sandbox-identity.js';
import type { Placed } from '../../placement/placement.js';
import { UndoStack } from '../../runtime/undo.js';
import type { SandboxRow } from '../../store/types/index.js';
import { notReady } from '../templates.js';
import { GIB } from '../disk-room.js';
import { checkSize, timeoutFor, type OrgLimits } from '../limits.js';
import type { SandboxCore } from './core.js';
import { needSnapshots } from './lifecycle.js';
import { bootSpec, egressFrom, type CreateSource } from './spec.js';


/**
 * How a create is asked: `signal` (the client left), `keyId` (the API key asking: its token ends
 * with the key), `keepToken` (its token is kept as the one E2B's clients get: lifecycle.ts keptToken).
 */
export interface CreateOpts {
  signal?: AbortSignal;
  keyId?: string;
  keepToken?: boolean;
}
export interface Created {
  sandbox: Sandbox;
  token: string;
  tokenExpiresAt: Date;
}

/**
 * Creates: from a template or from a snapshot (forks of a running sandbox: fork.ts). Every create is
 * admitted against its organization's quota and rate (its placeholder row counts from then on),
 * takes a running sandbox from the node placement chooses (placement/, node/: ready from a warm
 * pool or booted now, with the create's env and policy), opens its gateway and signs its token;
 * anything that fails on the way is undone.
 */
export class Creates {
  constructor(private readonly c: SandboxCore) {}

  /** `signal`: the client went away; honoured only while the create still waits for a sandbox. */
  async create(orgId: string, body: CreateSandboxBody, opts: CreateOpts = {}): Promise<Created> {
    const { d } = this.c;
    if (body.snapshot_id !== undefined) {
      if (body.template_id !== undefined || body.template_name !== undefined) {
        throw new ServiceError('VALIDATION_ERROR', 'give either snapshot_id or a template (template_id or template_name), not both: a snapshot brings its template');
      }
      const snapshots = needSnapshots(this.c);
      const found = await snapshots.get(orgId, body.snapshot_id);
      return snapshots.pinned(found.layers, async () => {
        // Read again with its layers pinned: a delete that came first is a 404, one that comes later keeps them.
        const snap = await snapshots.get(orgId, found.id);
        return this.createFrom(
          orgId,
          {
            templateId: snap.templateId,
            templateName: snap.templateName,
            vcpu: snap.vcpu,
            memoryMb: snap.memoryMb,
            diskGb: snap.diskGb,
            layers: snap.layers,
            templateEnv: snap.templateEnv,
            envVars: snap.envVars,
            snapshotId: snap.id,
            lineage: [snap.sandboxId],
            poolId: `snap:${snap.id}`,
          },
          // Its volumes are mounted again (the same volumes, not copies), unless the create names its own.
          body.volumes === undefined && snap.volumes?.length ? { ...body, volumes: snap.volumes.map((v) => ({ name: v.id, path: v.path, read_only: v.readOnly })) } : body,
          opts,
        );
      });
    }
    const templateRef = body.template_id ?? body.template_name;
    if (!templateRef) {
      throw new ServiceError('VALIDATION_ERROR', `either template_id or template_name must be provided (e.g. "${DEFAULT_TEMPLATE}"), or snapshot_id`);
    }
    // The organization's limits are read while the template is looked up: two round trips at once.
    const limits = d.quotas.limitsFor(orgId);
    limits.catch(() => undefined);
    const template = await d.templates.resolve(templateRef, orgId);
    if (template.status !== 'active') throw notReady(template);
    return this.createFrom(
      orgId,
      {
        templateId: template.id,
        templateName: template.name,
        vcpu: template.vcpu,
        memoryMb: template.memoryMb,
        diskGb: template.diskGb,
        layers: template.layers,
        templateEnv: { ...template.env, ...(template.workdir ? { SANDBOXD_AGENT_WORKSPACE: template.workdir } : {}) },
        envVars: {},
        snapshotId: null,
        lineage: [],
        poolId: template.id,
      },
      body,
      opts,
      limits,
    );
  }

  /** A create from `src` (a template's, a snapshot's, a fork's source) as `body` asks. */
  async createFrom(orgId: string, src: CreateSource, body: CreateSandboxBody, opts: CreateOpts, limitsRead?: Promise<OrgLimits>): Promise<Created> {
    const { d } = this.c;
    const startedAt = performance.now();
    // Placement reads where the sandbox may go while the create is checked and admitted.
    d.placement.prepare();
    const limits = await (limitsRead ?? d.quotas.limitsFor(orgId));
    checkSize(limits, src, src.snapshotId ? `snapshot ${src.snapshotId}` : `template "${src.templateName}"`);
    const timeoutSeconds = timeoutFor(limits, body.timeout_seconds);
    const named = body.allow_out !== undefined || body.deny_out !== undefined || body.internet_access !== undefined;
    const egress = src.egress !== undefined && !named ? src.egress : egressFrom(body);
    if (body.internet_access === false && (body.allow_out?.length || body.deny_out?.length)) {
      throw new ServiceError('VALIDATION_ERROR', 'allow_out and deny_out need internet_access: a sandbox created without it has no network at all');
    }
    // Volumes: the organization's, by name or id, each at a valid path (404 / 400 before anything is made).
    if (body.volumes?.length && !d.volumes) throw new ServiceError('INVALID_STATE', 'this service has no volumes');
    const volumes = body.volumes?.length ? await d.volumes!.resolve(orgId, body.volumes) : [];
    const now = new Date();
    const row: SandboxRow = {
      id: newSandboxId(),
      orgId,
      templateId: src.templateId,
      templateName: src.templateName,
      status: 'creating',
      region: body.region || 'local',
      internetAccess: body.internet_access ?? true,
      egress: body.internet_access === false ? null : egress,
      timeoutSeconds,
      expiresAt: timeoutSeconds ? new Date(now.getTime() + timeoutSeconds * 1000).toISOString() : null,
      vcpu: src.vcpu,
      memoryMb: src.memoryMb,
      diskGb: src.diskGb,
      layers: src.layers,
      templateEnv: src.templateEnv,
      envVars: { ...src.envVars, ...(body.env_vars ?? {}) },
      gatewayPort: null,
      // A create under way names no node: it has no sandbox yet (its id is a placeholder).
      nodeId: '',
      version: 0,
      deletedReason: null,
      createdAt: now.toISOString(),
      updatedAt: now.toISOString(),
      deletedAt: null,
      onTimeout: body.on_timeout ?? 'delete',
      idleTimeoutSeconds: body.idle_timeout_seconds ?? null,
      autoResume: body.auto_resume ?? false,
      idleCheckAt: body.idle_timeout_seconds ? new Date(now.getTime() + body.idle_timeout_seconds * 1000).toISOString() : null,
      snapshotId: src.snapshotId,
      lineage: src.lineage,
      metadata: body.metadata ?? {},
      ...(volumes.length ? { volumes } : {}),
    };
    // Room for its disk on the host (its whole disk_gb: the disk is sparse and may grow to it) is
    // held until the create is done, before anything is written; then the disk counts as it is.
    const releaseDisk = await d.claimDisk?.(row.diskGb * GIB, `a sandbox disk of ${row.diskGb} GB`);
    try {
      const created = await this.admitAndTake(orgId, row, src, timeoutSeconds, opts, startedAt);
      releaseDisk?.();
      return created;
    } catch (err) {
      // Refused or undone: nothing of it is left.
      releaseDisk?.(false);
      throw err;
    }
  }

  /** Admits `row` against the organization's quotas and rate, then takes its sandbox. */
  private async admitAndTake(orgId: string, row: SandboxRow, src: CreateSource, timeoutSeconds: number | null, opts: CreateOpts, startedAt: number): Promise<Created> {
    const { d } = this.c;
    // The row exists before anything is taken, so a crash half-way is found and cleaned at restart;
    // inserted as the quota admits it, it counts for every create after this one while this one
    // waits for its sandbox. Its id is a placeholder until then: a create gets the first sandbox
    // ready for its key on its node, which was booted with an id of its own. The pools' sandboxes
    // are handed out only once asked for, so the pools never count against anyone.
    // The creation rate limit is taken in the same step, once the quota admits it (a create the
    // quota refuses takes no slot of it): under the organization's lock, one read of its window.
    const demand = { sandboxes: 1, memoryMb: row.memoryMb, diskGb: row.diskGb };
    // The node is asked while the create is admitted (on a cluster, two or three round trips to
    // PostgreSQL), when the organization's last admission left ample room for it. Refused after all
    // (another replica's creates took the room): the sandbox is discarded when it comes, and
    // nothing of it stays. Near a limit, the node is asked only once admitted.
    const early = d.quotas.likelyAdmits(orgId, demand);
    const admitted = d.quotas.admit(orgId, demand, () => d.store.sandboxes.insert(row), { rate: d.createLimiter });
    const taking = early ? this.take(row, src.poolId, opts.signal) : undefined;
    // (Awaited below once admitted; a node's refusal that comes first is not left unhandled.)
    taking?.catch(() => undefined);
    try {
      await admitted;
    } catch (err) {
      if (taking) {
        void taking.then(
          (t) => d.placement.discard(t).catch((e: unknown) => d.log('destroying the sandbox of a refused create failed', { id: t.id, error: String(e) })),
          () => undefined,
        );
      }
      throw err;
    }
    const undo = new UndoStack((msg) => d.log(`create: ${msg}`, { id: row.id }));
    undo.push('placeholder row', () => d.store.sandboxes.remove(row.id));
    try {
      const placed = await (taking ?? this.take(row, src.poolId, opts.signal));
      const { id } = placed;
      const at = new Date();
      undo.push('sandbox', () => d.placement.discard(placed));
      undo.push('route', async () => {
        d.routes.delete(id);
        await d.gateway.close(id);
      });
      const [port, { token, expiresAt }] = await Promise.all([d.gateway.open(id, null), d.tokens.issue(id, orgId, opts.keyId)]);
      // Its lifetime starts when it is handed to the client, not when the create began to wait.
      const running: SandboxRow = {
        ...row,
        id,
        status: 'running',
        gatewayPort: port,
        // The node placement put it on: its row counts what it holds there from now.
        nodeId: placed.nodeId,
        expiresAt: timeoutSeconds ? new Date(at.getTime() + timeoutSeconds * 1000).toISOString() : null,
        idleCheckAt: row.idleTimeoutSeconds ? new Date(at.getTime() + row.idleTimeoutSeconds * 1000).toISOString() : null,
        createdAt: at.toISOString(),
        updatedAt: new Date().toISOString(),
        ...(opts.keepToken ? { e2bAccessToken: token } : {}),
      };
      // The placeholder becomes the sandbox's row, running, in one step of the store's: no
      // admission counts both rows. No lock is taken for the id: no one could name it before
      // this row, and from the row on nothing here waits (a verb that finds the row at once, from
      // another replica, comes after the route and the event, as it would after the create).
      // (Undone by removing the row, also when the store wrote it but its answer was lost.)
      undo.push('row', () => d.store.sandboxes.remove(id));
      if (!(await d.store.sandboxes.replace(row.id, running))) {
        throw new ServiceError('RUNTIME_ERROR', 'the create took too long and was taken for abandoned; try again').withDetail(`its placeholder row ${row.id} was removed by a clean-up`);
      }
      d.placement.recorded(id);
      this.c.route(running);
      undo.commit();
      if (running.idleTimeoutSeconds) this.c.activity.set(id, Date.now());
      this.c.event('created', running);
      const source = placed.warm ? 'warm_pool' : 'cold';
      d.metrics?.creates.inc({ template: running.templateName, source: src.snapshotId ? 'snapshot' : src.poolId.startsWith('fork:') ? 'fork' : source });
      d.metrics?.createDuration.observe({ source }, (performance.now() - startedAt) / 1000);
      return { sandbox: this.c.render(running), token, tokenExpiresAt: expiresAt };
    } catch (err) {
      await undo.run();
      // A ServiceError says what it is; a bug of ours stays one (500, renderError), and anything
      // else (a tool that failed, an agent that did not answer) is an outage to retry.
      if (err instanceof ServiceError || isProgrammingError(err)) throw err;
      throw new ServiceError('RUNTIME_ERROR', 'could not create the sandbox; try again').withDetail(describeCause(err));
    }
  }

  /**
   * The sandbox for a create: a running one of its source's spec from the node placement chooses,
   * its agent holding the create's env_vars and its network the create's policy. A client gone
   * meanwhile: nothing is created.
   */
  private take(row: SandboxRow, poolId: string, signal: AbortSignal | undefined): Promise<Placed> {
    const { d } = this.c;
    // Sandboxes with volumes are pooled apart, under a pool id that names their volumes too (a
    // volume's delete drops them: services/volumes.ts).
    const pool = row.volumes?.length ? [poolId, ...row.volumes.map((v) => v.id)].join('+') : poolId;
    return d.placement.take({ spec: bootSpec(row, (l) => d.layerPath(l)), poolId: pool, label: row.templateName, env: row.envVars, egress: row.egress, signal });
  }
}
