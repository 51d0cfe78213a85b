import type { FastifyInstance } from 'fastify';
import type { Services } from '../services.js';
import { GIB } from '../../services/disk-room.js';
import { timeoutFor } from '../../services/limits.js';
import { AccountInfo } from '@sandboxd/protocol';
import { authenticated, guard, principalOf } from '../auth.js';
import { publicOrgId } from '../../services/org-ids.js';

/** Every limit of the caller's organization (null: no limit) and what it holds against each. */
export function accountLimitsRoute(app: FastifyInstance, s: Services): void {
  // Who the caller is (any valid key): what the console shows, and whether it offers the admin pages.
  app.get('/v1/account', { schema: { response: { 200: AccountInfo } }, preHandler: authenticated(s.keys) }, async (req) => {
    const w = await s.keys.whoami(principalOf(req));
    return {
      organization: { id: publicOrgId(w.org.id), name: w.org.name },
      key: { id: principalOf(req).keyId, name: w.keyName, scopes: w.scopes },
      operator: w.operator,
      request_id: String(req.id),
    };
  });
  app.get('/v1/account/limits', { preHandler: guard(s.keys, 'sandboxes:read') }, async (req) => {
    const org = principalOf(req).orgId;
    const [limits, used, stored] = await Promise.all([s.quotas.limitsFor(org), s.quotas.usage(org), s.storage?.use(org)]);
    return {
      organization_id: publicOrgId(org),
      concurrent_sandboxes: { used: used.sandboxes, limit: limits.max_sandboxes, stopped: used.stoppedSandboxes },
      committed_memory_mb: { used: used.memoryMb, limit: limits.max_total_memory_mb },
      committed_disk_gb: { used: used.diskGb, limit: limits.max_total_disk_gb },
      // Everything the organization causes to be stored; used_gb is what max_total_disk_gb holds it to.
      ...(stored
        ? {
            storage: {
              used_gb: Math.round((used.diskGb + stored.storedBytes / GIB) * 100) / 100,
              limit_gb: limits.max_total_disk_gb,
              sandbox_disks_gb: used.diskGb,
              sandbox_disks_held_bytes: stored.sandboxDisksHeldBytes,
              snapshots_bytes: stored.snapshotsBytes,
              templates_bytes: stored.templatesBytes,
              uploads_bytes: stored.uploadsBytes,
            },
          }
        : {}),
      snapshot_storage_mb: { used: Math.ceil((s.snapshots ? await s.snapshots.storageUsed(org) : 0) / (1024 * 1024)), limit: limits.max_snapshot_storage_mb },
      per_sandbox: { vcpu: limits.max_vcpu, memory_mb: limits.max_memory_mb, disk_gb: limits.max_disk_gb },
      sandbox_timeout_seconds: { default: timeoutFor(limits, undefined), max: limits.max_timeout_seconds },
      template_builds: s.builds ? await s.builds.usage(org) : null,
      rate_limits: {
        sandbox_creates_per_minute: { limit: s.config.rateLimit.sandboxCreatesPerMinute, used: await s.createLimiter.usage(org) },
      },
      request_id: req.id,
    };
  });
}
