// A sandbox's reach (network.ts) on the fake node: the egress policy goes to the store and then to
// the node, what listens inside is read from the node, and preview URLs are capped per sandbox and
// per organization.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { buildSandboxHarness, rejectsWith, type SandboxHarness } from '../../testing/sandbox-harness.js';
import { MAX_PORTS_LISTED, MAX_PREVIEWS_PER_SANDBOX } from './index.js';

const OPEN = { internet_access: true, allow_out: [], deny_out: [] };

describe('setNetwork and ports on the fake node', () => {
  let h: SandboxHarness;
  let org: string;
  before(async () => {
    h = await buildSandboxHarness();
    org = h.orgs.a;
  });
  after(() => h?.close());

  test('a sandbox created without internet access is given none: INVALID_STATE, and asking for none changes nothing', async () => {
    const { sandbox } = await h.create(org, { internet_access: false });
    const id = sandbox.id;
    const before = await h.row(id);
    await rejectsWith(h.sandboxes.setNetwork(org, id, { internet_access: true }), 'INVALID_STATE', { id });
    await rejectsWith(h.sandboxes.setNetwork(org, id, { allow_out: ['example.com'] }), 'INVALID_STATE', { id });
    await rejectsWith(h.sandboxes.setNetwork(org, id, {}), 'INVALID_STATE', { id });
    assert.deepEqual(await h.sandboxes.setNetwork(org, id, { internet_access: false }), { internet_access: false, allow_out: [], deny_out: [] });
    assert.equal((await h.row(id)).version, before.version, 'the row is not written');
    assert.ok(!h.runtime.calls.some((c) => c.verb === 'setEgress' && c.id === id), 'the node is not asked');
  });

  test('the policy is recorded and reaches the node, normalized; the default clears both', async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    const denied = await h.sandboxes.setNetwork(org, id, { deny_out: ['203.0.113.7/24', 'Example.COM.'] });
    assert.deepEqual(denied, { internet_access: true, allow_out: [], deny_out: ['203.0.113.0/24', 'example.com'] });
    assert.deepEqual(h.runtime.egressOf(id), { internet: true, allow: [], deny: ['203.0.113.0/24', 'example.com'] });
    assert.deepEqual((await h.row(id)).egress, { internet: true, allow: [], deny: ['203.0.113.0/24', 'example.com'] });
    const closed = await h.sandboxes.setNetwork(org, id, { internet_access: false, allow_out: ['10.1.2.3'] });
    assert.deepEqual(closed, { internet_access: false, allow_out: ['10.1.2.3'], deny_out: [] });
    assert.deepEqual(h.runtime.egressOf(id), { internet: false, allow: ['10.1.2.3'], deny: [] });
    assert.equal(h.sandboxes.render(await h.row(id)).internet_access, false, 'rendered as it is now');
    assert.deepEqual(await h.sandboxes.setNetwork(org, id, {}), OPEN);
    assert.equal((await h.row(id)).egress, null);
    assert.equal(h.runtime.egressOf(id), undefined);
  });

  test('a bad entry is VALIDATION_ERROR and changes nothing; a node that fails leaves the policy recorded, to retry', async () => {
    const { sandbox } = await h.create(org, { deny_out: ['198.51.100.0/24'] });
    const id = sandbox.id;
    const policy = { internet: true, allow: [], deny: ['198.51.100.0/24'] };
    await rejectsWith(h.sandboxes.setNetwork(org, id, { allow_out: ['[::1]:80'] }), 'VALIDATION_ERROR', { field: 'allow_out' });
    await rejectsWith(h.sandboxes.setNetwork(org, id, { deny_out: ['*.*.example.com'] }), 'VALIDATION_ERROR', { field: 'deny_out' });
    assert.deepEqual((await h.row(id)).egress, policy);
    assert.deepEqual(h.runtime.egressOf(id), policy);
    const heal = h.runtime.failOn('setEgress', new Error('nft: no such table'));
    let err: ServiceError;
    try {
      err = await rejectsWith(h.sandboxes.setNetwork(org, id, { deny_out: ['192.0.2.1'] }), 'RUNTIME_ERROR');
    } finally {
      heal();
    }
    assert.match(err.message, /recorded/);
    assert.ok(!err.message.includes('nft'), "the node's words stay in the detail");
    assert.deepEqual((await h.row(id)).egress?.deny, ['192.0.2.1'], 'recorded');
    assert.deepEqual(h.runtime.egressOf(id), policy, 'not applied');
    await h.sandboxes.setNetwork(org, id, { deny_out: ['192.0.2.1'] });
    assert.deepEqual(h.runtime.egressOf(id)?.deny, ['192.0.2.1'], 'applied on retry');
  });

  test('a stopped sandbox takes a policy, and starts with it; a deleted one or another organization\'s takes none', async () => {
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    await h.sandboxes.stop(org, id);
    await h.sandboxes.setNetwork(org, id, { allow_out: ['pypi.org'], internet_access: false });
    await h.sandboxes.start(org, id);
    assert.deepEqual(h.runtime.egressOf(id), { internet: false, allow: ['pypi.org'], deny: [] });
    await rejectsWith(h.sandboxes.setNetwork(h.orgs.b, id, {}), 'PERMISSION_DENIED');
    await h.sandboxes.delete(org, id);
    await rejectsWith(h.sandboxes.setNetwork(org, id, {}), 'NOT_FOUND');
  });

  test('ports: what listens inside, by port, loopback_only when every address is a loopback one; a stopped sandbox has none, without asking the node', async () => {
    // (A sandbox's tables are read at most once a second: a quiet one of its own, then this one.)
    assert.deepEqual(await h.sandboxes.ports(org, (await h.create(org)).sandbox.id), []);
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    h.runtime.listen(id, [
      { port: 3000, address: '0.0.0.0', family: 4 },
      { port: 5432, address: '127.0.0.1', family: 4 },
      { port: 3000, address: '::', family: 6 },
      { port: 6379, address: '::1', family: 6 },
      { port: 9000, address: '::ffff:7f00:1', family: 6 },
      { port: 9000, address: '10.0.0.2', family: 4 },
    ]);
    const expected = [
      { port: 3000, addresses: ['0.0.0.0', '::'], loopback_only: false },
      { port: 5432, addresses: ['127.0.0.1'], loopback_only: true },
      { port: 6379, addresses: ['::1'], loopback_only: true },
      { port: 9000, addresses: ['::ffff:7f00:1', '10.0.0.2'], loopback_only: false },
    ];
    assert.deepEqual(await h.sandboxes.ports(org, id), expected);
    await h.sandboxes.pause(org, id);
    assert.deepEqual(await h.sandboxes.ports(org, id), expected, 'a paused one still holds its sockets');
    await h.sandboxes.resume(org, id);
    await h.sandboxes.stop(org, id);
    const listening = h.node.listeningPorts.bind(h.node);
    h.node.listeningPorts = () => Promise.reject(new Error('the node must not be asked'));
    try {
      assert.deepEqual(await h.sandboxes.ports(org, id), []);
    } finally {
      h.node.listeningPorts = listening;
    }
    await rejectsWith(h.sandboxes.ports(h.orgs.b, id), 'PERMISSION_DENIED');
  });

  test(`a crowded sandbox: the first ${MAX_PORTS_LISTED} ports are listed, rendered once for every caller of a read`, async () => {
    const id = (await h.create(org)).sandbox.id;
    h.runtime.listen(id, Array.from({ length: 1500 }, (_, i) => ({ port: 10_000 + i, address: '127.0.0.1', family: 4 as const })));
    const [a, b] = await Promise.all([h.sandboxes.portsJson(org, id), h.sandboxes.portsJson(org, id)]);
    assert.equal(a, b);
    const list = JSON.parse(a) as Array<{ port: number }>;
    assert.equal(list.length, MAX_PORTS_LISTED);
    assert.deepEqual([list[0]!.port, list.at(-1)!.port], [10_000, 10_000 + MAX_PORTS_LISTED - 1]);
  });
});

describe('previews on the fake node', () => {
  let h: SandboxHarness;
  const changed: string[] = [];
  before(async () => {
    h = await buildSandboxHarness({ maxPreviewsPerOrg: 34, replicas: { shared: true, used: () => undefined, interrupted: () => undefined, changed: (id) => changed.push(id) } });
  });
  after(() => h?.close());

  test('a private preview comes with a signed link for its port; asked again it keeps its gateway port; made public it has no link', async () => {
    const org = h.orgs.a;
    const { sandbox } = await h.create(org);
    const id = sandbox.id;
    const first = await h.sandboxes.preview(org, id, 3000, { mayWake: true });
    const gw = (await h.store.previews.get(id, 3000))?.gatewayPort;
    assert.equal(typeof gw, 'number');
    assert.deepEqual([first.port, first.url, first.public], [3000, `http://127.0.0.1:${gw}`, false]);
    const token = new URL(first.signed_url!).searchParams.get('token')!;
    assert.ok(first.signed_url!.startsWith(`${first.url}/_sandboxd/auth?token=`));
    const claims = await h.tokens.verifyPreview(token, 'link', id, 3000);
    assert.deepEqual([claims.sandboxId, claims.port, claims.wake], [id, 3000, true]);
    await assert.rejects(h.tokens.verifyPreview(token, 'link', id, 3001), 'the link opens its own port only');
    assert.ok(Math.abs(Date.parse(first.signed_url_expires_at!) - Date.now() - 600_000) < 5000);
    assert.deepEqual(changed, [id], 'the other replicas are told');
    const again = await h.sandboxes.preview(org, id, 3000, { mayWake: false });
    assert.equal(again.url, first.url);
    assert.deepEqual(changed, [id], 'nothing changed, nothing told');
    const pub = await h.sandboxes.preview(org, id, 3000, { setPublic: true, mayWake: false });
    assert.deepEqual(pub, { port: 3000, url: first.url, public: true });
    assert.equal((await h.store.previews.get(id, 3000))?.public, true);
    assert.deepEqual(h.gateway.previews.get(`${id}:3000`), { isPublic: true, gatewayPort: gw });
    assert.equal((await h.sandboxes.preview(org, id, 3000, { mayWake: false })).public, true, 'it stays public');
    await rejectsWith(h.sandboxes.preview(h.orgs.b, id, 3000, { mayWake: false }), 'PERMISSION_DENIED');
  });

  test('a key that may only read: no preview made, no signed link into a private one; what exists it may read', async () => {
    const org = h.orgs.a;
    const id = (await h.create(org)).sandbox.id;
    await rejectsWith(h.sandboxes.preview(org, id, 3000, { mayWake: false, readOnly: true }), 'PERMISSION_DENIED', { id, port: 3000 });
    assert.equal(await h.store.previews.get(id, 3000), undefined, 'nothing was made');
    const made = await h.sandboxes.preview(org, id, 3000, { mayWake: true });
    assert.ok(made.signed_url);
    const read = await h.sandboxes.preview(org, id, 3000, { mayWake: false, readOnly: true });
    assert.deepEqual(read, { port: 3000, url: made.url, public: false }, 'the private preview, without a link');
    await h.sandboxes.preview(org, id, 3000, { setPublic: true, mayWake: true });
    assert.deepEqual(await h.sandboxes.preview(org, id, 3000, { mayWake: false, readOnly: true }), { port: 3000, url: made.url, public: true });
  });

  test(`a sandbox holds at most ${MAX_PREVIEWS_PER_SANDBOX} previews, an organization at most its maximum; a deleted sandbox's go with it`, async () => {
    const org = h.orgs.b;
    const full = (await h.create(org)).sandbox.id;
    for (let p = 1; p <= MAX_PREVIEWS_PER_SANDBOX; p++) await h.sandboxes.preview(org, full, 10_000 + p, { mayWake: false });
    await rejectsWith(h.sandboxes.preview(org, full, 20_000, { mayWake: false }), 'LIMIT_EXCEEDED', { id: full });
    assert.equal((await h.sandboxes.preview(org, full, 10_001, { setPublic: true, mayWake: false })).public, true, 'one it holds still answers');
    const other = (await h.create(org)).sandbox.id;
    await h.sandboxes.preview(org, other, 80, { mayWake: false });
    await h.sandboxes.preview(org, other, 81, { mayWake: false });
    await rejectsWith(h.sandboxes.preview(org, other, 82, { mayWake: false }), 'ORG_QUOTA_EXCEEDED', { limit: 'previews', max: 34, used: 34 });
    assert.equal((await h.store.previews.forSandbox(other)).length, 2);
    await h.sandboxes.preview(h.orgs.a, (await h.create(h.orgs.a)).sandbox.id, 82, { mayWake: false });
    await h.sandboxes.delete(org, full);
    assert.equal((await h.sandboxes.preview(org, other, 82, { mayWake: false })).port, 82, 'room again');
    await rejectsWith(h.sandboxes.preview(org, full, 10_001, { mayWake: false }), 'NOT_FOUND');
  });

  test('a gateway that serves no previews refuses them', async () => {
    const { sandbox } = await h.create(h.orgs.a);
    const openPreview = h.gateway.openPreview;
    Object.assign(h.gateway, { openPreview: undefined });
    try {
      await rejectsWith(h.sandboxes.preview(h.orgs.a, sandbox.id, 3000, { mayWake: false }), 'RUNTIME_ERROR');
    } finally {
      Object.assign(h.gateway, { openPreview });
    }
    assert.equal(await h.store.previews.get(sandbox.id, 3000), undefined);
  });
});
