import { ServiceError } from '@sandboxd/protocol';
import type { CopyInput } from '../../builder/types.js';
import type { BuildRow, TemplateRow } from '../../store/types/index.js';
import { GIB } from '../disk-room.js';
import type { BuildRequest } from '../template-requests.js';
import { BUILD_ABANDONED_MS, BUILD_HEARTBEAT_MS, type BuildCore } from './core.js';
import { MAX_BUILD_LOG_BYTES, type BuildLogs } from './logs.js';

/**
 * Builds running in the background of this process, each until its template is active or failed;
 * the builds that can never finish, marked failed; a build cut short when its template is deleted.
 */
export class Runs {
  private aborts = new Map<string, AbortController>();

  constructor(
    private readonly c: BuildCore,
    private readonly logs: BuildLogs,
  ) {}

  /**
   * Builds that can never finish, marked failed. One machine: every build a previous process left
   * running (call it at start). Replicas: those whose heartbeat stopped (the replica running them
   * died), never one that a live replica runs (call it at start and now and then).
   */
  async failInterrupted(now = Date.now()): Promise<number> {
    const store = this.c.d.store;
    const replicated = this.c.d.coordination !== undefined;
    const abandoned = (b: BuildRow) => !this.aborts.has(b.id) && (!replicated || Date.parse(b.heartbeatAt ?? b.startedAt ?? b.createdAt) < now - BUILD_ABANDONED_MS);
    let failed = 0;
    for (const b of (await store.builds.unfinished()).filter(abandoned)) {
      // Read again: its replica may have finished it since the list was read.
      const fresh = replicated ? await store.builds.byId(b.id) : b;
      if (!fresh || fresh.status !== 'building' || !abandoned(fresh)) continue;
      const why = replicated ? 'the control replica running the build stopped' : 'the build was interrupted by a restart of the service';
      await this.c.finish(fresh, 'failed', `${why}; start it again`);
      failed++;
    }
    return failed;
  }

  async execute(build: BuildRow, template: TemplateRow, req: BuildRequest, refs: Map<number, { fileId?: string; path?: string }[]>) {
    const { store, uploads, engine } = this.c.d;
    const abort = new AbortController();
    this.aborts.set(build.id, abort);
    const stepClaims: Array<() => void> = [];
    // Replicas: the row says the build still runs, so that no other replica takes it for abandoned.
    const beat = this.c.d.coordination
      ? setInterval(() => {
          store.builds
            .update(build.id, { heartbeatAt: new Date().toISOString() })
            .catch((err: unknown) => this.c.d.log('cannot record build heartbeat', { build: build.id, error: String(err) }));
        }, BUILD_HEARTBEAT_MS)
      : undefined;
    // Logs hold whatever a tenant's steps print (its env values too): root's alone, or in the store as its env_vars are.
    const writer = this.logs.writer(build.id);
    const write = (line: string) => writer.write(line);
    // Steps print what the tenant's commands print: the stored log and the lines waiting to be
    // written are bounded, the build goes on without them.
    let logged = 0;
    const log = (line: string) => {
      if (logged > MAX_BUILD_LOG_BYTES) return;
      logged += Buffer.byteLength(line) + 1;
      if (logged <= MAX_BUILD_LOG_BYTES) write(line);
      else write(`sandboxd: this build's log reached ${MAX_BUILD_LOG_BYTES / 1024 / 1024} MiB; later output is not kept (the build goes on)`);
    };
    try {
      const copies = new Map<number, CopyInput[]>();
      for (const [i, list] of refs) {
        const inputs: CopyInput[] = [];
        for (const r of list) {
          const u = await uploads.resolve(build.orgId, r);
          inputs.push({ hostPath: await uploads.hostPath(u), kind: u.kind, name: u.path.split('/').filter(Boolean).pop() ?? u.fileId, sha256: u.sha256 });
        }
        copies.set(i, inputs);
      }
      log(`build ${build.id}: template "${req.alias}", ${req.steps.length} steps, cpu ${req.cpu}, memory ${req.memoryMb} MB, disk ${req.diskGb} GB${req.skipCache ? ', skipCache' : ''}`);
      const claimLayer = this.c.d.claimStepLayer;
      const result = await engine.run(
        { buildId: build.id, orgId: build.orgId, steps: req.steps, resources: { vcpu: req.cpu, memoryMb: req.memoryMb, diskGb: req.diskGb }, skipCache: req.skipCache, copies },
        {
          log,
          progress: (percent, currentStep) => {
            // Progress is advisory: a store that cannot take it now (a restart of PostgreSQL) must not fail the build.
            store.builds
              .update(build.id, { progress: Math.max(0, Math.min(99, Math.round(percent))), currentStep })
              .catch((err: unknown) => this.c.d.log('cannot record build progress', { build: build.id, error: String(err) }));
          },
          signal: abort.signal,
          ...(claimLayer
            ? {
                beforeStep: async () => {
                  // Held until the build ends; what the step wrote is then on disk (or collected).
                  stepClaims.push(await claimLayer(req.diskGb * GIB, `a build step's layer of up to ${req.diskGb} GB`));
                },
              }
            : {}),
        },
      );
      const now = new Date().toISOString();
      await store.templates.upsert({
        ...template,
        vcpu: req.cpu,
        memoryMb: req.memoryMb,
        diskGb: req.diskGb,
        layers: result.layerIds,
        env: result.env,
        workdir: result.workdir,
        status: 'active',
        buildId: build.id,
        errorMessage: null,
        updatedAt: now,
      });
      write(`build ${build.id} succeeded: ${result.layerIds.length} layers`);
      await writer.flushed();
      await this.c.finish(build, 'active', null);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      write(`ERROR: build failed: ${message}`);
      await writer.flushed();
      const current = await store.templates.byId(template.id);
      if (current && current.status === 'building') {
        await store.templates.upsert({ ...current, status: 'failed', errorMessage: message, updatedAt: new Date().toISOString() });
      }
      await this.c.finish(build, 'failed', message);
      this.c.d.log('template build failed', { build: build.id, error: message, ...(err instanceof ServiceError && err.detail ? { detail: err.detail } : {}) });
    } finally {
      clearInterval(beat);
      this.aborts.delete(build.id);
      for (const release of stepClaims) release();
    }
  }

  /** Deletes an organization's template: built-ins 403, in use by a live sandbox 409. */
  async deleteTemplate(orgId: string, template: TemplateRow): Promise<void> {
    const store = this.c.d.store;
    if (template.orgId === null) throw new ServiceError('PERMISSION_DENIED', `"${template.name}" is a built-in template and cannot be deleted`);
    if (template.orgId !== orgId) throw new ServiceError('PERMISSION_DENIED');
    const users = await store.sandboxes.countByTemplate(template.id);
    if (users > 0) throw new ServiceError('TEMPLATE_IN_USE', `template "${template.name}" is used by ${users} sandbox(es); delete them first`, { id: template.id });
    this.aborts.get(template.buildId ?? '')?.abort();
    await store.templates.remove(template.id);
  }
}
