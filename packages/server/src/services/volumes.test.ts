import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import type { VolumeHost } from '../runtime/volumes.js';
import { SqliteStore } from '../store/sqlite.js';
import type { OrgLimits } from './limits.js';
import { QuotaService } from './quotas.js';
import { VolumeService } from './volumes.js';

const GIB = 1024 ** 3;
const LIMITS: OrgLimits = {
  max_vcpu: 2, max_memory_mb: 4096, max_disk_gb: 20, max_sandboxes: 3, max_total_memory_mb: 2048, max_total_disk_gb: 5,
  default_timeout_seconds: 300, max_timeout_seconds: 3600, max_snapshot_storage_mb: null,
};

function fakeHost(): VolumeHost & { made: Map<string, number> } {
  const made = new Map<string, number>();
  return {
    made,
    create: async (id, bytes) => void made.set(id, bytes),
    usage: async (id) => ({ usedBytes: 4096, totalBytes: made.get(id) ?? 0 }),
    destroy: async (id) => void made.delete(id),
    leftovers: async (id) => (made.has(id) ? [id] : []),
  };
}

const code = (c: string) => (err: unknown) => err instanceof ServiceError && err.code === c;

test('volumes: names unique per organization, another organization sees none, mounts checked, delete refused while mounted', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const a = await store.orgs.create('a');
    const b = await store.orgs.create('b');
    const host = fakeHost();
    const deleted: string[] = [];
    const quotas = new QuotaService(store, LIMITS, undefined, undefined, async (org) => (await store.volumes.sizeGbForOrg(org)) * GIB);
    const dropped: string[] = [];
    const volumes = new VolumeService({ store, host, nodeId: 'n1', quotas, deleteSandbox: async (_org, id) => void deleted.push(id), dropWarm: async (p) => void dropped.push(p), log: () => undefined });

    const v = await volumes.create(a.id, { name: 'data', size_gb: 2 });
    assert.equal(host.made.get(v.id), 2 * GIB);
    await assert.rejects(volumes.create(a.id, { name: 'data', size_gb: 1 }), code('ALREADY_EXISTS'));
    const theirs = await volumes.create(b.id, { name: 'data', size_gb: 1 });
    await assert.rejects(volumes.create(a.id, { name: 'Bad', size_gb: 1 }), code('VALIDATION_ERROR'));
    // max_total_disk_gb 5: 2 held, 4 more is past it; nothing is made.
    await assert.rejects(volumes.create(a.id, { name: 'big', size_gb: 4 }), code('ORG_QUOTA_EXCEEDED'));
    assert.equal(host.made.size, 2);

    assert.equal((await volumes.get(a.id, 'data')).id, v.id);
    assert.equal((await volumes.get(a.id, v.id)).id, v.id);
    await assert.rejects(volumes.get(b.id, v.id), code('VOLUME_NOT_FOUND'));
    await assert.rejects(volumes.resolve(b.id, [{ name: v.id, path: '/data' }]), code('VOLUME_NOT_FOUND'));
    assert.deepEqual(await volumes.resolve(b.id, [{ name: 'data', path: '/data' }]), [{ id: theirs.id, name: 'data', path: '/data', readOnly: false }]);
    for (const path of ['/', '/proc/1', 'rel', '/x/../y', '/.sb']) await assert.rejects(volumes.resolve(a.id, [{ name: 'data', path }]), code('VALIDATION_ERROR'), path);
    await assert.rejects(volumes.resolve(a.id, [{ name: 'data', path: '/a' }, { name: 'data', path: '/a/b' }]), code('VALIDATION_ERROR'));

    // A sandbox row that mounts it: delete refused, unless forced (the sandbox is deleted first).
    const now = new Date().toISOString();
    await store.sandboxes.insert({
      id: 'sb1', orgId: a.id, templateId: 't', templateName: 't', status: 'running', region: 'local', internetAccess: false, egress: null, timeoutSeconds: null, expiresAt: null,
      vcpu: 1, memoryMb: 256, diskGb: 1, layers: [], templateEnv: {}, envVars: {}, gatewayPort: null, nodeId: 'n1', version: 0, deletedReason: null, createdAt: now, updatedAt: now,
      deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
      volumes: [{ id: v.id, name: 'data', path: '/data', readOnly: false }],
    });
    assert.deepEqual((await volumes.mountedBy(a.id)).get(v.id), ['sb1']);
    await assert.rejects(volumes.remove(a.id, 'data', false), code('VOLUME_IN_USE'));
    assert.ok(host.made.has(v.id));
    await volumes.remove(a.id, 'data', true);
    assert.deepEqual(deleted, ['sb1']);
    assert.deepEqual(dropped, [v.id], 'the warm pools drop the sandboxes they keep ready with it');
    assert.ok(!host.made.has(v.id));
    await assert.rejects(volumes.get(a.id, v.id), code('VOLUME_NOT_FOUND'));

    // Without a host (a cluster's control): refused, saying why.
    const none = new VolumeService({ store, nodeId: '', quotas, deleteSandbox: async () => undefined, log: () => undefined });
    await assert.rejects(none.create(a.id, { name: 'x', size_gb: 1 }), (err) => code('INVALID_STATE')(err) && /cluster/.test((err as Error).message));
  } finally {
    store.close();
  }
});
