import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import type { Services } from '../services.js';
import { guard, principalOf } from '../auth.js';
import { E2B_VOLUME_SIZE_GB, E2bVolumeBody, E2bVolumeParams, volumeAndTokenOf, volumeInfoOf } from '../e2b-shapes.js';

/**
 * E2B's volume management as our volumes (/v1 volumes, services/volumes.ts, docs/volumes.md):
 * create (of our default size for E2B: it sends only a name), list, get, delete; a create mounts
 * them through `volumeMounts` (e2b-shapes.ts). `volumeID` is our id; a name works where an id
 * does. The same guards as /v1; in a cluster the same 409 as /v1 (docs/cluster.md).
 *
 * E2B's volume content API (a Volume instance's list, read, write, ...: a volume's files without
 * a sandbox) is not served: a client pointed at it here (E2B_VOLUME_API_URL) gets a 405 saying so.
 */
export function e2bVolumeRoutes(app: FastifyInstance, s: Services): void {
  const volumes = () => {
    // As /v1: a service that has no volumes says so.
    if (!s.volumes) throw new ServiceError('INVALID_STATE', 'this service has no volumes');
    return s.volumes;
  };
  const read = guard(s.keys, 'sandboxes:read');
  const write = guard(s.keys, 'sandboxes:write');

  app.post<{ Body: E2bVolumeBody }>('/volumes', { schema: { body: E2bVolumeBody }, preHandler: write }, async (req, reply) => {
    const row = await volumes().create(principalOf(req).orgId, { name: req.body.name, size_gb: E2B_VOLUME_SIZE_GB });
    return reply.code(201).send(volumeAndTokenOf(row));
  });

  app.get('/volumes', { preHandler: read }, async (req) => (await volumes().list(principalOf(req).orgId)).map(volumeInfoOf));

  app.get<{ Params: E2bVolumeParams }>('/volumes/:volumeID', { schema: { params: E2bVolumeParams }, preHandler: read }, async (req) =>
    volumeAndTokenOf(await volumes().get(principalOf(req).orgId, req.params.volumeID)),
  );

  // One that a sandbox mounts is refused (409 VOLUME_IN_USE), as /v1 without ?force: kill those first.
  app.delete<{ Params: E2bVolumeParams }>('/volumes/:volumeID', { schema: { params: E2bVolumeParams }, preHandler: write }, async (req, reply) => {
    await volumes().remove(principalOf(req).orgId, req.params.volumeID, false);
    return reply.code(204).send();
  });

  // Not a 404, which the client would read as "no such file in the volume".
  app.all('/volumecontent/*', async () => {
    throw new ServiceError(
      'METHOD_NOT_ALLOWED',
      "E2B's volume content API (a Volume's list, read, write, ...) is not served by sandboxd: mount the volume in a sandbox (volumeMounts) and use the sandbox's files",
    );
  });
}
