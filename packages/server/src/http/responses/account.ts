import { AccountInfo, AccountLimitsResult } from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json } from './payloads.js';
import { ORG, KEY, REQ } from './examples.js';

/** The caller's account: its organization, key, limits and usage. */
export const ACCOUNT_RESPONSES: Record<string, SuccessDoc> = {
  'GET /v1/account': {
    status: 200,
    description: "the caller's organization and key",
    content: json(AccountInfo, { organization: { id: ORG, name: 'acme' }, key: { id: KEY, name: 'ci', scopes: ['sandboxes:read', 'sandboxes:write'] }, operator: false, request_id: REQ }),
  },
  'GET /v1/account/limits': {
    status: 200,
    description: "the organization's limits and usage",
    content: json(AccountLimitsResult, {
      organization_id: ORG,
      concurrent_sandboxes: { used: 3, limit: 20, stopped: 1 },
      committed_memory_mb: { used: 6144, limit: 65536 },
      committed_disk_gb: { used: 40, limit: 500 },
      snapshot_storage_mb: { used: 310, limit: 10240 },
      storage: { used_gb: 40.42, limit_gb: 500, sandbox_disks_gb: 40, sandbox_disks_held_bytes: 3221225472, snapshots_bytes: 325058560, templates_bytes: 94371840, uploads_bytes: 31457280 },
      per_sandbox: { vcpu: 8, memory_mb: 16384, disk_gb: 50 },
      sandbox_timeout_seconds: { default: null, max: 86400 },
      template_builds: { per_hour: { used: 1, limit: 10 }, per_day: { used: 4, limit: 50 }, running: 0 },
      rate_limits: { sandbox_creates_per_minute: { limit: 60, used: 2 } },
      request_id: REQ,
    }),
  },
};
