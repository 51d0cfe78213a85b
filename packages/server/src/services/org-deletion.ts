import { ServiceError } from '@sandboxd/protocol';
import type { OrgRow, Store } from '../store/types/index.js';
import { DEFAULT_ORG, type KeyService } from './keys.js';
import type { SandboxService } from './sandboxes/index.js';
import type { SnapshotService } from './snapshots/index.js';
import type { TemplateBuildService } from './template-builds/index.js';
import type { VolumeService } from './volumes.js';

export interface OrgDeletionDeps {
  store: Store;
  keys: KeyService;
  sandboxes: SandboxService;
  snapshots?: SnapshotService;
  builds?: TemplateBuildService;
  placement?: { dropWarm(poolId: string): Promise<void> };
  gcLayers?: () => Promise<void>;
  /** Its volumes go too (their files, mounts and images). */
  volumes?: VolumeService;
}

/** What went with an organization. */
export interface OrgDeleted {
  keys: number;
  sandboxes: number;
  snapshots: number;
  templates: number;
  uploads: number;
}

/** How long a delete waits for the organization's creates under way to finish (they are then deleted too). */
const CREATING_WAIT_MS = 60_000;
const PAGE = 500;

/**
 * Deletes an organization and everything it made: its keys first (nothing new can be made with
 * them), then its sandboxes (creates under way are waited for and deleted too), its snapshots, its
 * templates, its uploads, and the organization itself. The operator's own organization cannot be
 * deleted. Every step is safe to repeat: a delete cut short is finished by asking again.
 */
export async function deleteOrganization(d: OrgDeletionDeps, org: OrgRow): Promise<OrgDeleted> {
  if (org.name === DEFAULT_ORG) {
    throw new ServiceError('INVALID_STATE', `the operator's organization (${DEFAULT_ORG}) holds the bootstrap key and the admin API: it cannot be deleted`, { org: org.name });
  }
  const out: OrgDeleted = { keys: 0, sandboxes: 0, snapshots: 0, templates: 0, uploads: 0 };
  for (const k of await d.store.keys.list(org.id)) {
    if (!k.revokedAt) await d.keys.revoke(k.id);
    out.keys++;
  }

  const deadline = Date.now() + CREATING_WAIT_MS;
  for (;;) {
    const live = await d.store.sandboxes.list({ orgId: org.id, limit: PAGE });
    for (const row of live) {
      await d.sandboxes.delete(org.id, row.id, 'organization deleted').then(
        () => out.sandboxes++,
        (err: unknown) => {
          // Deleted meanwhile (its deadline, another request): nothing left to do.
          if (!(err instanceof ServiceError && (err.code === 'NOT_FOUND' || err.code === 'INVALID_STATE'))) throw err;
        },
      );
    }
    const creating = await d.store.sandboxes.list({ orgId: org.id, status: 'creating', limit: 1 });
    if (live.length === 0 && creating.length === 0) break;
    if (live.length === 0) {
      if (Date.now() > deadline) {
        throw new ServiceError('INVALID_STATE', `organization ${org.name} still has sandboxes being created after ${CREATING_WAIT_MS / 1000} s; its keys are revoked: ask again`, { org: org.name });
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  if (d.snapshots) {
    for (;;) {
      const page = await d.store.snapshots.list({ orgId: org.id, limit: PAGE });
      if (page.length === 0) break;
      for (const snap of page) {
        await d.snapshots.remove(org.id, snap.id);
        out.snapshots++;
      }
    }
  }

  // Its volumes (issue 32): its sandboxes are gone, so none is mounted any more.
  for (const v of await d.store.volumes.list(org.id)) await (d.volumes ? d.volumes.remove(org.id, v.id, true) : d.store.volumes.remove(v.id));

  for (const t of await d.store.templates.list(org.id)) {
    if (t.orgId !== org.id) continue; // the built-ins every organization sees
    if (d.builds) await d.builds.deleteTemplate(org.id, t);
    else await d.store.templates.remove(t.id);
    await d.placement?.dropWarm(t.id);
    out.templates++;
  }
  out.uploads = await d.store.uploads.removeForOrg(org.id);
  await d.store.keys.removeForOrg(org.id);
  await d.store.orgs.remove(org.id);
  // The layers of its templates and snapshots no one else uses.
  await d.gcLayers?.();
  return out;
}
