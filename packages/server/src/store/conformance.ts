import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clusterConformance } from './conformance-cluster.js';
import { replicaConformance } from './conformance-replicas.js';
import type { SandboxRow, SnapshotRow, Store } from './types/index.js';

/** One suite every Store implementation must pass (SQLite and PostgreSQL). */
export function storeConformance(name: string, open: () => Promise<Store>): void {
  const sandbox = (id: string, over: Partial<SandboxRow> = {}): SandboxRow => ({
    id,
    orgId: 'org_a',
    templateId: 'tpl_1',
    templateName: 'base',
    status: 'running',
    region: 'local',
    internetAccess: true,
    egress: null,
    timeoutSeconds: null,
    expiresAt: null,
    vcpu: 1,
    memoryMb: 512,
    diskGb: 2,
    layers: ['l1'],
    templateEnv: { A: '1' },
    envVars: { B: '2' },
    gatewayPort: null,
    nodeId: 'n1',
    version: 0,
    deletedReason: null,
    createdAt: new Date().toISOString(),
    updatedAt: new Date().toISOString(),
    deletedAt: null,
    onTimeout: 'delete',
    idleTimeoutSeconds: null,
    autoResume: false,
    idleCheckAt: null,
    snapshotId: null,
    lineage: [],
    metadata: {},
    e2bAccessToken: null,
    ...over,
  });

  test(`${name}: kv: setIfAbsent keeps the first value written; set overwrites`, async () => {
    const store = await open();
    assert.equal(await store.kv.get('k'), undefined);
    assert.equal(await store.kv.setIfAbsent('k', 'first'), 'first');
    assert.equal(await store.kv.setIfAbsent('k', 'second'), 'first');
    assert.deepEqual(await Promise.all(['a', 'b', 'c'].map((v) => store.kv.setIfAbsent('race', v))).then((vs) => new Set(vs).size), 1);
    await store.kv.set('k', 'third');
    assert.equal(await store.kv.get('k'), 'third');
  });

  test(`${name}: rates: events count per key after a time, with the oldest; removed and purged`, async () => {
    const store = await open();
    await store.rates.record('k', 1000, 'e1');
    await store.rates.record('k', 2000, 'e2');
    await store.rates.record('other', 2500, 'e3');
    assert.deepEqual(await store.rates.count('k', 0), { n: 2, oldest: 1000 });
    assert.deepEqual(await store.rates.count('k', 1000), { n: 1, oldest: 2000 });
    assert.deepEqual(await store.rates.count('nobody', 0), { n: 0, oldest: null });
    await store.rates.remove('e2');
    assert.deepEqual(await store.rates.count('k', 0), { n: 1, oldest: 1000 });
    assert.equal(await store.rates.purge(2000), 1);
    assert.deepEqual(await store.rates.count('k', 0), { n: 0, oldest: null });
    assert.deepEqual(await store.rates.count('other', 0), { n: 1, oldest: 2500 });
  });

  test(`${name}: sandboxes round-trip every field`, async () => {
    const s = await open();
    const row = sandbox('sb1', { gatewayPort: 40001, timeoutSeconds: 30, expiresAt: '2030-01-01T00:00:00.000Z', internetAccess: false, onTimeout: 'pause', idleTimeoutSeconds: 300, autoResume: true, idleCheckAt: '2030-01-01T00:05:00.000Z', egress: { internet: true, allow: ['example.com', '10.0.0.0/8'], deny: ['*.bad.example'] }, metadata: { team: 'a', 'k=v': 'x&y' }, e2bAccessToken: 'eyJ.token' });
    await s.sandboxes.insert(row);
    assert.deepEqual(await s.sandboxes.byId('sb1'), row);
    s.close();
  });

  test(`${name}: replace swaps a placeholder row for the sandbox's at once; the usage never counts both`, async () => {
    const s = await open();
    await s.sandboxes.insert(sandbox('placeholder', { status: 'creating', memoryMb: 512, diskGb: 2 }));
    const own = sandbox('sbreal', { status: 'creating', memoryMb: 512, diskGb: 2, gatewayPort: 40030 });
    // Readers that run while the swap is under way see one row, before or after it.
    const seen: number[] = [];
    const readers = Array.from({ length: 20 }, async () => seen.push((await s.sandboxes.usage('org_a')).active));
    const [replaced] = await Promise.all([s.sandboxes.replace('placeholder', own), ...readers]);
    assert.equal(replaced, true);
    assert.deepEqual([...new Set(seen)], [1], `usage counted ${JSON.stringify(seen)}`);
    assert.equal(await s.sandboxes.byId('placeholder'), undefined);
    assert.deepEqual(await s.sandboxes.byId('sbreal'), own);
    // A placeholder already gone (a clean-up took it, and its quota went to another create): nothing.
    assert.equal(await s.sandboxes.replace('never-there', sandbox('sbother')), false);
    assert.equal(await s.sandboxes.byId('sbother'), undefined);
    assert.equal((await s.sandboxes.usage('org_a')).active, 1);
    // A row that cannot be written (its id taken) leaves the placeholder where it was.
    await s.sandboxes.insert(sandbox('placeholder2', { status: 'creating' }));
    await assert.rejects(s.sandboxes.replace('placeholder2', sandbox('sbreal')));
    assert.equal((await s.sandboxes.byId('placeholder2'))?.id, 'placeholder2');
    s.close();
  });

  test(`${name}: deletedAmong names those of the ids that are a node's deleted rows, and no other`, async () => {
    const s = await open();
    const gone = { status: 'deleted' as const, deletedAt: '2026-01-02T00:00:00.000Z', deletedReason: 'deleted' as const };
    await s.sandboxes.insert(sandbox('d-one', { nodeId: 'n1', ...gone }));
    await s.sandboxes.insert(sandbox('d-two', { nodeId: 'n1', ...gone }));
    await s.sandboxes.insert(sandbox('d-else', { nodeId: 'n2', ...gone }));
    await s.sandboxes.insert(sandbox('live', { nodeId: 'n1' }));
    assert.deepEqual(await s.sandboxes.deletedAmong('n1', ['live', 'd-two', 'd-else', 'unknown', 'd-one']), ['d-one', 'd-two']);
    assert.deepEqual(await s.sandboxes.deletedAmong('n1', []), []);
  });

  test(`${name}: updates are compare-and-set on version`, async () => {
    const s = await open();
    await s.sandboxes.insert(sandbox('sb1'));
    const v1 = await s.sandboxes.update('sb1', 0, { status: 'paused' });
    assert.equal(v1?.status, 'paused');
    assert.equal(v1?.version, 1);
    assert.equal(await s.sandboxes.update('sb1', 0, { status: 'stopped' }), undefined, 'stale version loses');
    assert.equal((await s.sandboxes.byId('sb1'))?.status, 'paused');
    s.close();
  });

  test(`${name}: an update names only fields of the row: any other key is refused before it reaches SQL`, async () => {
    const store = await open();
    await assert.rejects(store.sandboxes.update('sb1', 0, { 'status = NULL; --': 'x' } as never), /not a field that can be changed/);
    await assert.rejects(store.sandboxes.update('sb1', 0, { version: 9 } as never), /not a field that can be changed: version/);
    await assert.rejects(store.builds.update('b1', { id: 'b2' } as never), /not a field that can be changed: id/);
  });

  test(`${name}: list pages newest first with a stable cursor, per organization`, async () => {
    const s = await open();
    for (let i = 0; i < 5; i++) await s.sandboxes.insert(sandbox(`sb${i}`, { createdAt: `2026-01-01T00:00:0${i}.000Z` }));
    await s.sandboxes.insert(sandbox('other', { orgId: 'org_b' }));
    await s.sandboxes.insert(sandbox('gone', { status: 'deleted' }));
    const p1 = await s.sandboxes.list({ orgId: 'org_a', limit: 2 });
    assert.deepEqual(p1.map((r) => r.id), ['sb4', 'sb3']);
    const p2 = await s.sandboxes.list({ orgId: 'org_a', limit: 10, after: { createdAt: p1[1]!.createdAt, id: p1[1]!.id } });
    assert.deepEqual(p2.map((r) => r.id), ['sb2', 'sb1', 'sb0']);
    assert.equal((await s.sandboxes.list({ orgId: 'org_a', limit: 10, status: 'deleted' })).length, 1);
    assert.equal((await s.sandboxes.usage('org_a')).active, 5);
    s.close();
  });

  test(`${name}: usage counts memory of active sandboxes and disk of every sandbox not deleted, per organization`, async () => {
    const s = await open();
    assert.deepEqual(await s.sandboxes.usage('org_a'), { active: 0, activeVcpu: 0, activeMemoryMb: 0, stopped: 0, diskGb: 0 });
    const states = ['creating', 'running', 'paused', 'stopped', 'deleted'] as const;
    for (const [i, status] of states.entries()) {
      await s.sandboxes.insert(sandbox(`sb${i}`, { status, vcpu: 1 + i, memoryMb: 100 * (i + 1), diskGb: 10 ** i }));
    }
    await s.sandboxes.insert(sandbox('theirs', { orgId: 'org_b', memoryMb: 5000, diskGb: 50 }));
    // creating + running + paused hold memory; stopped ones only their disk; deleted ones nothing.
    assert.deepEqual(await s.sandboxes.usage('org_a'), { active: 3, activeVcpu: 6, activeMemoryMb: 600, stopped: 1, diskGb: 1111 });
    assert.deepEqual(await s.sandboxes.usage('org_b'), { active: 1, activeVcpu: 1, activeMemoryMb: 5000, stopped: 0, diskGb: 50 });
    assert.deepEqual(await s.sandboxes.usageAll(), { active: 4, activeVcpu: 7, activeMemoryMb: 5600, stopped: 1, diskGb: 1161 }, 'the node: every organization');
    assert.deepEqual(await s.sandboxes.countByStatus(), { creating: 1, running: 2, paused: 1, stopped: 1 }, 'deleted ones are not counted');

    // It follows every change of a row: state, resources, removal, purge.
    const row = (id: string) => s.sandboxes.byId(id).then((r) => r!);
    let r = await row('sb1');
    await s.sandboxes.update('sb1', r.version, { status: 'stopped' });
    assert.deepEqual(await s.sandboxes.usage('org_a'), { active: 2, activeVcpu: 4, activeMemoryMb: 400, stopped: 2, diskGb: 1111 });
    r = await row('sb1');
    await s.sandboxes.update('sb1', r.version, { status: 'running', vcpu: 7, memoryMb: 700, diskGb: 20 });
    assert.deepEqual(await s.sandboxes.usage('org_a'), { active: 3, activeVcpu: 11, activeMemoryMb: 1100, stopped: 1, diskGb: 1121 });
    r = await row('sb0');
    await s.sandboxes.update('sb0', r.version, { status: 'deleted', deletedAt: '2026-01-01T00:00:00.000Z' });
    await s.sandboxes.remove('sb2');
    assert.deepEqual(await s.sandboxes.usage('org_a'), { active: 1, activeVcpu: 7, activeMemoryMb: 700, stopped: 1, diskGb: 1020 });
    await s.sandboxes.purgeDeleted('2030-01-01T00:00:00.000Z');
    assert.deepEqual(await s.sandboxes.usage('org_a'), { active: 1, activeVcpu: 7, activeMemoryMb: 700, stopped: 1, diskGb: 1020 });
    for (const id of ['sb1', 'sb3']) await s.sandboxes.remove(id);
    assert.deepEqual(await s.sandboxes.usage('org_a'), { active: 0, activeVcpu: 0, activeMemoryMb: 0, stopped: 0, diskGb: 0 });
    assert.deepEqual(await s.sandboxes.usage('org_b'), { active: 1, activeVcpu: 1, activeMemoryMb: 5000, stopped: 0, diskGb: 50 });
    s.close();
  });

  test(`${name}: an organization's limit overrides round-trip; {} removes them; removing the organization removes them`, async () => {
    const s = await open();
    const org = await s.orgs.create('acme');
    assert.deepEqual(await s.orgs.limits(org.id), {});
    await s.orgs.setLimits(org.id, { max_vcpu: 2, max_sandboxes: null });
    assert.deepEqual(await s.orgs.limits(org.id), { max_vcpu: 2, max_sandboxes: null });
    await s.orgs.setLimits(org.id, { max_memory_mb: 512 });
    assert.deepEqual(await s.orgs.limits(org.id), { max_memory_mb: 512 }, 'replaced, not merged');
    await s.orgs.setLimits(org.id, {});
    assert.deepEqual(await s.orgs.limits(org.id), {});
    await s.orgs.setLimits(org.id, { max_disk_gb: 3 });
    await s.orgs.remove(org.id);
    assert.deepEqual(await s.orgs.limits(org.id), {});
    s.close();
  });

  test(`${name}: an organization's keys and uploads are removed with it, no other's`, async () => {
    const s = await open();
    const a = await s.orgs.create('going');
    const b = await s.orgs.create('staying');
    for (const [id, org] of [['ka1', a], ['ka2', a], ['kb1', b]] as const) {
      await s.keys.insert({ id, orgId: org.id, name: id, hash: `h-${id}`, scopes: ['admin'], createdAt: 'x', revokedAt: null, lastUsedAt: null });
    }
    const upload = (orgId: string, path: string) => ({ orgId, fileId: `f_${'a'.repeat(64)}`, path, sha256: 'a'.repeat(64), size: 1, kind: 'file' as const, createdAt: 'x' });
    await s.uploads.upsert(upload(a.id, 'one'));
    await s.uploads.upsert(upload(a.id, 'two'));
    await s.uploads.upsert(upload(b.id, 'one'));
    await s.uploads.upsert({ ...upload(a.id, 'three'), fileId: `f_${'b'.repeat(64)}`, sha256: 'b'.repeat(64), size: 10 });
    assert.equal(await s.uploads.bytesForOrg(a.id), 11, 'each content once, however many names');
    assert.equal(await s.uploads.bytesForOrg(b.id), 1);
    assert.deepEqual([...(await s.uploads.referencedSha256s())].sort(), ['a'.repeat(64), 'b'.repeat(64)]);
    assert.equal(await s.keys.removeForOrg(a.id), 2);
    assert.equal(await s.uploads.removeForOrg(a.id), 3);
    assert.deepEqual([...(await s.uploads.referencedSha256s())], ['a'.repeat(64)], 'b is referenced by no upload now');
    await s.orgs.remove(a.id);
    assert.equal(await s.orgs.byId(a.id), undefined, 'no key holds the organization back');
    assert.deepEqual((await s.keys.list()).map((k) => k.id), ['kb1']);
    assert.equal(await s.uploads.byPath(a.id, 'one'), undefined);
    assert.equal((await s.uploads.byPath(b.id, 'one'))?.orgId, b.id);
    s.close();
  });

  test(`${name}: deadlines, tombstones and gateway ports`, async () => {
    const s = await open();
    await s.sandboxes.insert(sandbox('due', { expiresAt: '2020-01-01T00:00:00.000Z', gatewayPort: 40010 }));
    await s.sandboxes.insert(sandbox('later', { expiresAt: '2999-01-01T00:00:00.000Z', gatewayPort: 40011 }));
    await s.sandboxes.insert(sandbox('old', { status: 'deleted', deletedAt: '2020-01-01T00:00:00.000Z', gatewayPort: 40012 }));
    assert.deepEqual((await s.sandboxes.expired(new Date().toISOString())).map((r) => r.id), ['due']);
    // Idle checks: running sandboxes only, by their check time.
    await s.sandboxes.insert(sandbox('idle-due', { onTimeout: 'pause', idleTimeoutSeconds: 60, autoResume: true, idleCheckAt: '2020-01-01T00:00:00.000Z' }));
    await s.sandboxes.insert(sandbox('idle-later', { idleTimeoutSeconds: 60, idleCheckAt: '2999-01-01T00:00:00.000Z' }));
    await s.sandboxes.insert(sandbox('idle-paused', { status: 'paused', idleTimeoutSeconds: 60, idleCheckAt: '2020-01-01T00:00:00.000Z' }));
    const idle = await s.sandboxes.idleDue(new Date().toISOString());
    assert.deepEqual(idle.map((r) => r.id), ['idle-due']);
    assert.deepEqual([idle[0]!.onTimeout, idle[0]!.idleTimeoutSeconds, idle[0]!.autoResume], ['pause', 60, true]);
    for (const [port, used] of [[40010, true], [40011, true], [40012, false], [40013, false]] as const) assert.equal(await s.sandboxes.gatewayPortUsed(port), used, `port ${port}`);
    assert.equal(await s.sandboxes.purgeDeleted(new Date().toISOString()), 1);
    assert.equal(await s.sandboxes.byId('old'), undefined);
    s.close();
  });

  test(`${name}: previews round-trip, hold their gateway port, and go with their sandbox however it is deleted`, async () => {
    const s = await open();
    const at = '2026-01-01T00:00:00.000Z';
    await s.sandboxes.insert(sandbox('p1', { gatewayPort: 40020 }));
    await s.sandboxes.insert(sandbox('p2'));
    await s.previews.upsert({ sandboxId: 'p1', port: 3000, public: false, gatewayPort: 40021, createdAt: at });
    await s.previews.upsert({ sandboxId: 'p1', port: 80, public: true, gatewayPort: null, createdAt: at });
    await s.previews.upsert({ sandboxId: 'p2', port: 8080, public: false, gatewayPort: 40022, createdAt: at });
    assert.deepEqual(await s.previews.get('p1', 3000), { sandboxId: 'p1', port: 3000, public: false, gatewayPort: 40021, createdAt: at });
    assert.equal(await s.previews.get('p1', 3001), undefined);
    await s.previews.upsert({ sandboxId: 'p1', port: 3000, public: true, gatewayPort: 40021, createdAt: '2027-01-01T00:00:00.000Z' });
    const again = await s.previews.get('p1', 3000);
    assert.deepEqual([again?.public, again?.createdAt], [true, at], 'an upsert changes the flag, not when it was made');
    assert.deepEqual((await s.previews.forSandbox('p1')).map((p) => p.port), [80, 3000]);
    assert.equal(await s.previews.countForOrg('org_a'), 3, "every preview of the organization's sandboxes");
    assert.equal(await s.previews.countForOrg('org_b'), 0);
    assert.equal(await s.sandboxes.gatewayPortUsed(40021), true, "a preview's gateway port is taken");
    // A delete by status (the API's, a deadline's, a lost sandbox's) and a removed row both take them.
    const p1 = (await s.sandboxes.byId('p1'))!;
    await s.sandboxes.update('p1', p1.version, { status: 'deleted', deletedAt: at });
    assert.deepEqual(await s.previews.forSandbox('p1'), []);
    assert.equal(await s.sandboxes.gatewayPortUsed(40021), false);
    await s.sandboxes.remove('p2');
    assert.deepEqual(await s.previews.all(), []);
    await s.sandboxes.insert(sandbox('p3'));
    await s.previews.upsert({ sandboxId: 'p3', port: 5000, public: false, gatewayPort: null, createdAt: at });
    await s.previews.remove('p3', 5000);
    assert.deepEqual(await s.previews.all(), []);
    s.close();
  });

  test(`${name}: keys by hash, revocation; templates visible per organization`, async () => {
    const s = await open();
    const org = await s.orgs.create('acme');
    await s.keys.insert({ id: 'k1', orgId: org.id, name: 'n', hash: 'h1', scopes: ['admin'], createdAt: 'x', revokedAt: null, lastUsedAt: null });
    assert.equal((await s.keys.byHash('h1'))?.id, 'k1');
    assert.equal(await s.keys.revoke('k1', 'now'), true);
    assert.equal(await s.keys.revoke('k1', 'again'), false);
    assert.equal((await s.keys.byHash('h1'))?.revokedAt, 'now');
    const t = {
      id: 't1', orgId: null, name: 'base', displayName: 'B', description: '', category: 'c', language: 'l', vcpu: 1, memoryMb: 1, diskGb: 1,
      status: 'active' as const, isPublic: true, buildId: null, features: [], tags: [], layers: ['x'], env: {}, workdir: null, errorMessage: null,
      createdAt: 'a', updatedAt: 'a',
    };
    await s.templates.upsert(t);
    await s.templates.upsert({ ...t, id: 't2', orgId: org.id, isPublic: false });
    await s.templates.upsert({ ...t, id: 't3', orgId: 'org_other', name: 'theirs', isPublic: false });
    assert.equal((await s.templates.byName('base', org.id))?.id, 't2', "an organization's own template shadows a built-in");
    assert.equal((await s.templates.byName('base', 'org_x'))?.id, 't1');
    assert.equal(await s.templates.byName('theirs', org.id), undefined);
    assert.deepEqual((await s.templates.list(org.id)).map((x) => x.id).sort(), ['t1', 't2']);
    s.close();
  });

  test(`${name}: builds count per organization and survive as rows`, async () => {
    const s = await open();
    const b = { id: 'b1', orgId: 'o', templateId: 't', alias: 'a', status: 'building' as const, progress: 0, currentStep: null, request: { x: 1 }, errorMessage: null, createdAt: new Date().toISOString(), startedAt: null, completedAt: null };
    await s.builds.insert(b);
    await s.builds.update('b1', { progress: 50, currentStep: 'run' });
    assert.equal((await s.builds.byId('b1'))?.progress, 50);
    assert.equal(await s.builds.countSince('o', new Date(Date.now() - 60_000).toISOString()), 1);
    assert.deepEqual((await s.builds.unfinished()).map((x) => x.id), ['b1']);
    assert.deepEqual((await s.builds.running('o')).map((x) => x.id), ['b1']);
    assert.deepEqual(await s.builds.running('other'), []);
    await s.builds.update('b1', { status: 'active' });
    assert.deepEqual(await s.builds.running('o'), [], 'a finished build no longer runs');
    assert.deepEqual((await s.builds.byId('b1'))?.request, { x: 1 });
    // A heartbeat is absent (null) until one is written, and round-trips.
    assert.equal((await s.builds.byId('b1'))?.heartbeatAt, null);
    await s.builds.insert({ ...b, id: 'b2', heartbeatAt: '2026-01-01T00:00:00.000Z' });
    assert.equal((await s.builds.byId('b2'))?.heartbeatAt, '2026-01-01T00:00:00.000Z');
    await s.builds.update('b2', { heartbeatAt: '2026-01-01T00:00:15.000Z' });
    assert.equal((await s.builds.byId('b2'))?.heartbeatAt, '2026-01-01T00:00:15.000Z');
    s.close();
  });

  test(`${name}: snapshots round-trip every field, list newest first per organization and sandbox, count their storage, name their layers`, async () => {
    const s = await open();
    const snap = (id: string, over: Partial<SnapshotRow> = {}): SnapshotRow => ({
      id,
      orgId: 'org_a',
      name: null,
      sandboxId: 'sb1',
      parentId: null,
      templateId: 'tpl_1',
      templateName: 'base',
      layers: [`own-${id}`, 'l1'],
      vcpu: 1,
      memoryMb: 512,
      diskGb: 2,
      templateEnv: { A: '1' },
      envVars: { B: '2' },
      internetAccess: true,
      egress: null,
      sizeBytes: 1000,
      createdAt: '2030-01-01T00:00:01.000Z',
      ...over,
    });
    const full = snap('snap1', { name: 'named', parentId: 'snap0', egress: { internet: true, allow: ['example.com'], deny: [] }, internetAccess: false, sizeBytes: 5 * 1024 ** 3 });
    await s.snapshots.insert(full);
    assert.deepEqual(await s.snapshots.byId('snap1'), full);
    await s.snapshots.insert(snap('snap2', { sandboxId: 'sb2', createdAt: '2030-01-01T00:00:02.000Z' }));
    await s.snapshots.insert(snap('snap3', { sandboxId: 'sb2', createdAt: '2030-01-01T00:00:02.000Z' }));
    await s.snapshots.insert(snap('snapx', { orgId: 'org_b', layers: ['theirs'] }));
    assert.deepEqual((await s.snapshots.list({ orgId: 'org_a', limit: 10 })).map((r) => r.id), ['snap3', 'snap2', 'snap1']);
    assert.deepEqual((await s.snapshots.list({ orgId: 'org_a', sandboxId: 'sb2', limit: 10 })).map((r) => r.id), ['snap3', 'snap2']);
    assert.deepEqual((await s.snapshots.list({ orgId: 'org_a', limit: 10, after: { createdAt: '2030-01-01T00:00:02.000Z', id: 'snap3' } })).map((r) => r.id), ['snap2', 'snap1']);
    assert.equal(await s.snapshots.storageUsed('org_a'), 5 * 1024 ** 3 + 2000);
    assert.equal(await s.snapshots.storageUsed('org_none'), 0);
    assert.deepEqual([...(await s.snapshots.referencedLayers())].sort(), ['l1', 'own-snap1', 'own-snap2', 'own-snap3', 'theirs'].sort());
    assert.equal(await s.snapshots.remove('snap1'), true);
    assert.equal(await s.snapshots.remove('snap1'), false);
    assert.equal(await s.snapshots.byId('snap1'), undefined);
    // A sandbox keeps the snapshot it came from and its lineage.
    await s.sandboxes.insert(sandbox('sbfrom', { snapshotId: 'snap2', lineage: ['sb2', 'sb0'] }));
    const got = await s.sandboxes.byId('sbfrom');
    assert.equal(got?.snapshotId, 'snap2');
    assert.deepEqual(got?.lineage, ['sb2', 'sb0']);
    s.close();
  });

  test(`${name}: sandboxes by node: live, expired and idle ones of one node; counts per node`, async () => {
    const s = await open();
    const past = '2020-01-01T00:00:00.000Z';
    await s.sandboxes.insert(sandbox('a-run', { nodeId: 'node-a', expiresAt: past }));
    await s.sandboxes.insert(sandbox('a-idle', { nodeId: 'node-a', idleTimeoutSeconds: 60, idleCheckAt: past }));
    await s.sandboxes.insert(sandbox('a-stopped', { nodeId: 'node-a', status: 'stopped' }));
    await s.sandboxes.insert(sandbox('a-creating', { nodeId: 'node-a', status: 'creating' }));
    await s.sandboxes.insert(sandbox('a-gone', { nodeId: 'node-a', status: 'deleted', expiresAt: past, deletedAt: past }));
    await s.sandboxes.insert(sandbox('b-run', { nodeId: 'node-b', expiresAt: past }));
    await s.sandboxes.insert(sandbox('b-idle', { nodeId: 'node-b', idleTimeoutSeconds: 60, idleCheckAt: past }));
    await s.sandboxes.insert(sandbox('c-gone', { nodeId: 'node-c', status: 'deleted', deletedAt: past }));
    // A single machine's rows carry its host name: the filter takes any string.
    await s.sandboxes.insert(sandbox('host-run', { nodeId: 'Build.Host.example' }));
    const ids = (rows: SandboxRow[]) => rows.map((r) => r.id).sort();
    const now = new Date().toISOString();
    assert.deepEqual(ids(await s.sandboxes.live('node-a')), ['a-creating', 'a-idle', 'a-run', 'a-stopped']);
    assert.deepEqual(ids(await s.sandboxes.live('node-b')), ['b-idle', 'b-run']);
    assert.deepEqual(ids(await s.sandboxes.live('Build.Host.example')), ['host-run']);
    assert.deepEqual(await s.sandboxes.live('node-c'), []);
    assert.deepEqual(await s.sandboxes.live(''), [], 'an empty id is a node with no sandboxes, not every node');
    assert.deepEqual(ids(await s.sandboxes.live()), ['a-creating', 'a-idle', 'a-run', 'a-stopped', 'b-idle', 'b-run', 'host-run']);
    assert.deepEqual(ids(await s.sandboxes.expired(now, 'node-a')), ['a-run']);
    assert.deepEqual(ids(await s.sandboxes.expired(now, 'node-b')), ['b-run']);
    assert.deepEqual(ids(await s.sandboxes.expired(now)), ['a-run', 'b-run']);
    assert.deepEqual(await s.sandboxes.expired('2019-12-31T23:59:59.999Z', 'node-a'), [], 'the deadline still counts with a node');
    assert.deepEqual(ids(await s.sandboxes.idleDue(now, 'node-a')), ['a-idle']);
    assert.deepEqual(ids(await s.sandboxes.idleDue(now, 'node-b')), ['b-idle']);
    assert.deepEqual(ids(await s.sandboxes.idleDue(now)), ['a-idle', 'b-idle']);
    assert.deepEqual(await s.sandboxes.countByNode(), { 'node-a': 4, 'node-b': 2, 'Build.Host.example': 1 }, 'deleted ones are not counted; a node with none is absent');
    const byNode = await s.sandboxes.usageByNode();
    assert.deepEqual(Object.keys(byNode).sort(), ['Build.Host.example', 'node-a', 'node-b']);
    for (const [nodeId, u] of Object.entries(byNode)) {
      const rows = (await s.sandboxes.live(nodeId)).filter((r) => r.status !== 'deleted');
      const active = rows.filter((r) => ['creating', 'running', 'paused'].includes(r.status));
      assert.deepEqual(
        u,
        {
          active: active.length,
          activeVcpu: active.reduce((n, r) => n + r.vcpu, 0),
          activeMemoryMb: active.reduce((n, r) => n + r.memoryMb, 0),
          stopped: rows.filter((r) => r.status === 'stopped').length,
          diskGb: rows.reduce((n, r) => n + r.diskGb, 0),
        },
        `usage of ${nodeId}`,
      );
    }
    // It follows the rows: one moves to deleted, one is removed.
    const bRun = (await s.sandboxes.byId('b-run'))!;
    await s.sandboxes.update('b-run', bRun.version, { status: 'deleted', deletedAt: now });
    await s.sandboxes.remove('b-idle');
    await s.sandboxes.remove('host-run');
    assert.deepEqual(await s.sandboxes.countByNode(), { 'node-a': 4 });
    for (const nodeId of [1, null, {}]) {
      for (const call of [() => s.sandboxes.live(nodeId as string), () => s.sandboxes.expired(now, nodeId as string), () => s.sandboxes.idleDue(now, nodeId as string)]) {
        await assert.rejects(call(), TypeError, `a node id of ${String(nodeId)}`);
      }
    }
    s.close();
  });

  test(`${name}: volumes: unique names per organization, by id and name, sizes summed per organization; a sandbox names its volumes`, async () => {
    const s = await open();
    const vol = { id: 'vol-00000000000000000001', orgId: 'org_a', name: 'data', sizeGb: 3, nodeId: 'n1', createdAt: '2030-01-01T00:00:00.000Z' };
    assert.equal(await s.volumes.insert(vol), true);
    assert.equal(await s.volumes.insert({ ...vol, id: 'vol-00000000000000000002' }), false, 'the name is taken in org_a');
    assert.equal(await s.volumes.insert({ ...vol, id: 'vol-00000000000000000003', orgId: 'org_b', sizeGb: 5 }), true);
    assert.equal(await s.volumes.insert({ ...vol, id: 'vol-00000000000000000004', name: 'more', sizeGb: 4 }), true);
    assert.deepEqual(await s.volumes.byId(vol.id), vol);
    assert.deepEqual(await s.volumes.byName('org_a', 'data'), vol);
    assert.equal(await s.volumes.byName('org_c', 'data'), undefined);
    assert.deepEqual((await s.volumes.list('org_a')).map((v) => v.name), ['data', 'more']);
    assert.equal((await s.volumes.all()).length, 3);
    assert.equal(await s.volumes.sizeGbForOrg('org_a'), 7);
    assert.equal(await s.volumes.sizeGbForOrg('org_c'), 0);
    const row = sandbox('sbv', { volumes: [{ id: vol.id, name: 'data', path: '/data', readOnly: true }] });
    await s.sandboxes.insert(row);
    assert.deepEqual(await s.sandboxes.byId('sbv'), row);
    assert.equal(await s.volumes.remove(vol.id), true);
    assert.equal(await s.volumes.remove(vol.id), false);
    assert.equal(await s.volumes.sizeGbForOrg('org_a'), 4);
    s.close();
  });

  clusterConformance(name, open);
  replicaConformance(name, open);
}
