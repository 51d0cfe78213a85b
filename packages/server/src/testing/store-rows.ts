import type { SandboxRow, Store } from '../store/types/index.js';

/** A sandbox row on `nodeId` (2 vCPU, 1024 MB, 5 GB), as a create leaves one: for tests of what reads the store. */
export async function insertSandboxRow(store: Store, id: string, nodeId: string, status: SandboxRow['status'] = 'running'): Promise<void> {
  const now = new Date().toISOString();
  await store.sandboxes.insert({
    id, orgId: 'org_a', templateId: 't', templateName: 'base', status, region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
    vcpu: 2, memoryMb: 1024, diskGb: 5, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId, version: 0, deletedReason: null, createdAt: now, updatedAt: now,
    deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
  });
}
