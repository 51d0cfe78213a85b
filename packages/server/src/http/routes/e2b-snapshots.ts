import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ServiceError, type CreateSandboxBody, type Snapshot } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { cursorAfter } from '../../services/pages.js';
import { SandboxIdParams } from './params.js';
import { E2bSnapshotBody, E2bSnapshotListQuery, E2bTemplateParams, fromSnapshot, isSnapshotId, snapshotInfoOf } from '../e2b-shapes.js';

/** A name filter or a create by name reads at most this many of our pages (of 100) of the organization's snapshots. */
const NAME_PAGES_READ = 10;

/**
 * E2B's snapshots as ours (/v1 snapshots, services/snapshots/): take one of a sandbox, list them
 * (by sandbox, by name), delete one through E2B's template path, and create from one
 * (`templateID` is a snapshot: routes/e2b.ts asks `createBodyFor`). The same guards as /v1.
 */
export function e2bSnapshotRoutes(app: FastifyInstance, s: Services): void {
  const snapshots = () => {
    // As /v1: a service that keeps no snapshots says so.
    if (!s.snapshots) throw new ServiceError('RUNTIME_ERROR', 'this service keeps no snapshots');
    return s.snapshots;
  };

  app.post<{ Params: SandboxIdParams; Body: E2bSnapshotBody }>(
    '/sandboxes/:id/snapshots',
    { schema: { params: SandboxIdParams, body: E2bSnapshotBody }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req, reply) => {
      const name = req.body?.name;
      const snap = await snapshots().take(principalOf(req).orgId, req.params.id, name ? { name } : {});
      return reply.code(201).send(snapshotInfoOf(snap));
    },
  );

  app.get<{ Querystring: E2bSnapshotListQuery }>(
    '/snapshots',
    { schema: { querystring: E2bSnapshotListQuery }, preHandler: guard(s.keys, 'sandboxes:read') },
    async (req, reply) => {
      const q = req.query;
      const org = principalOf(req).orgId;
      const limit = q.limit ?? 100;
      const found: Snapshot[] = [];
      let cursor = q.nextToken;
      let next: string | null = null;
      // No name: our pages as they are. A name (or an id) is looked for over a bounded number of pages.
      for (let pages = 0; pages < (q.name ? NAME_PAGES_READ : 1) && found.length < limit; pages++) {
        const page = await snapshots().list(org, { limit: q.name ? 100 : limit, ...(cursor ? { cursor } : {}), ...(q.sandboxID ? { sandbox_id: q.sandboxID } : {}) });
        next = page.nextCursor;
        for (const [i, snap] of page.data.entries()) {
          if (q.name && snap.name !== q.name && snap.id !== q.name) continue;
          found.push(snap);
          if (found.length === limit) {
            // Stopped inside the page: the next one begins after what was shown.
            if (i < page.data.length - 1) next = cursorAfter({ createdAt: snap.created_at, id: snap.id });
            break;
          }
        }
        if (!next) break;
        cursor = next;
      }
      if (next) void reply.header('x-next-token', next);
      return found.map(snapshotInfoOf);
    },
  );

  // E2B deletes a snapshot as the template it is there. Here only snapshots go this way: a
  // template of ours is never deleted through it (404), /v1/templates deletes those.
  app.delete<{ Params: E2bTemplateParams }>(
    '/templates/:templateID',
    { schema: { params: E2bTemplateParams }, preHandler: guard(s.keys, 'sandboxes:write') },
    async (req, reply) => {
      const id = req.params.templateID;
      if (!isSnapshotId(id)) throw new ServiceError('SNAPSHOT_NOT_FOUND', `no snapshot ${id}: only snapshots are deleted through this path`, { snapshot_id: id });
      await snapshots().remove(principalOf(req).orgId, id);
      return reply.code(204).send();
    },
  );
}

/**
 * A create whose `templateID` is one of the organization's snapshots: by id (`snap_...`, checked by
 * the create: another organization's or an unknown one is a 404), else none (a template by that
 * name or id is looked for first; `snapshotNamed` after it is not found).
 */
export function createBodyFor(body: CreateSandboxBody, templateId: string): CreateSandboxBody {
  return isSnapshotId(templateId) ? fromSnapshot(body, templateId) : body;
}

/** The newest of the organization's snapshots named `name`, if any (over a bounded number of pages). */
export async function snapshotNamed(s: Services, req: FastifyRequest, name: string): Promise<Snapshot | undefined> {
  if (!s.snapshots) return undefined;
  let cursor: string | undefined;
  for (let pages = 0; pages < NAME_PAGES_READ; pages++) {
    const page = await s.snapshots.list(principalOf(req).orgId, { limit: 100, ...(cursor ? { cursor } : {}) });
    const hit = page.data.find((snap) => snap.name === name);
    if (hit) return hit;
    if (!page.nextCursor) return undefined;
    cursor = page.nextCursor;
  }
  return undefined;
}
