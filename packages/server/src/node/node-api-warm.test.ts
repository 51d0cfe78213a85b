// A node's warm pool behind its API (POST /node/v1/warm): control asks for a sandbox of a spec and
// the node answers with a ready one (or one booted now), whose id it picked, holding the create's
// env and policy; its ready sandboxes are reported in the heartbeat and never collected as no
// one's. A LocalNode on the FakeRuntime behind a real node API: no root, no container.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { FsLayerStore } from '../images/layer-store.js';
import type { SandboxSpec } from '../runtime/types.js';
import { SqliteStore } from '../store/sqlite.js';
import { agentGet, agentJson } from './agent-client.js';
import { LocalNode } from './local-node.js';
import { NodeMembership } from './membership.js';
import { OrphanCollector } from './orphans.js';
import { RemoteNode } from './remote-node.js';
import { warmKeyOf } from './warm-key.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { LayerCache } from './layer-cache.js';
import { nodeApi } from './node-api.js';

const { signer, verifier } = testClusterKeys();
const store = SqliteStore.open(':memory:');
let dir: string;
/** The one layer of the specs (the fake wants its directory to exist). */
let layerDir: string;
let fake: FakeRuntime;
let pool: LocalNode;
let app: FastifyInstance;
let url: string;
let remote: RemoteNode;
/** The spec of each sandbox the fake booted, as the node made it. */
const booted = new Map<string, SandboxSpec>();

/** A spec as control's services make it: a placeholder id, hostname and SANDBOX_ID, which the node replaces. */
function askSpec(over: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    id: 'sb',
    hostname: 'sandbox-',
    lowerDirs: [layerDir],
    layerIds: ['l1'],
    resources: { vcpu: 1, memoryMb: 512, diskGb: 1, pidsMax: 512 },
    internetAccess: false,
    env: { PATH: '/usr/bin:/bin', SANDBOX_ID: 'sb', GREETING: 'hi' },
    ...over,
  };
}

async function until(what: string, check: () => boolean, ms = 5000): Promise<void> {
  for (const t0 = Date.now(); !check(); ) {
    if (Date.now() - t0 > ms) assert.fail(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sbd-nwarm-'));
  layerDir = join(dir, 'l1');
  await mkdir(layerDir);
  fake = new FakeRuntime({ socketDir: join(dir, 's') });
  await fake.setupHost();
  const create = fake.create.bind(fake);
  fake.create = (spec) => {
    booted.set(spec.id, spec);
    return create(spec);
  };
  pool = new LocalNode({
    id: 'node-w',
    runtime: fake,
    pool: { minPerKey: 1, maxMemoryMb: 1000, horizonSeconds: 0, shrinkAfterMs: 60_000, bootConcurrency: 2, refillDelayMs: 0, tickMs: 0 },
    agentReadyTimeoutMs: 5000,
    log: () => undefined,
  });
  app = nodeApi({ node: pool, auth: verifier, byReference: false });
  await app.listen({ host: '127.0.0.1', port: 0 });
  url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  remote = new RemoteNode({ id: 'node-w', url, auth: signer });
});

/** Control's ask of a sandbox of `spec` for pool `poolId`, with the create's env and policy. */
function ask(spec: SandboxSpec, poolId: string, label: string, env: Record<string, string> = {}, egress: SandboxSpec['egress'] | null = null) {
  return remote.take({ spec, poolId, label, env, egress });
}

after(async () => {
  await pool?.close();
  await app?.close();
  await fake?.dispose();
  store.close();
  await rm(dir, { recursive: true, force: true });
});

test('the first ask boots one (cold), the pool refills, the next ask is served ready; the node picks the ids', async () => {
  const first = await ask(askSpec(), 'tpl-1', 'base');
  assert.equal(first.warm, false, 'nothing was ready yet');
  const spec = booted.get(first.id)!;
  assert.match(first.id, /^sb[a-z0-9]{20}$/);
  assert.equal(spec.hostname, `sandbox-${first.id.slice(2, 10)}`, 'the hostname comes from the id the node picked');
  assert.equal(spec.env.SANDBOX_ID, first.id);
  assert.equal(spec.env.GREETING, 'hi', "the rest of control's spec is kept");
  assert.deepEqual(spec.lowerDirs, [layerDir]);
  assert.equal(await fake.status(first.id), 'running');

  const key = warmKeyOf(askSpec(), 'tpl-1').key;
  await until('the pool refilled to its minimum', () => pool.readyByKey()[key] === 1);
  const held = pool.held();
  assert.equal(held.length, 1);
  assert.ok(!held.includes(first.id), 'a sandbox handed out is no longer the pool\'s');
  const second = await ask(askSpec(), 'tpl-1', 'base');
  assert.deepEqual(second, { id: held[0], warm: true }, 'served the ready one');
  assert.notEqual(second.id, first.id);
  assert.equal(pool.warmStats().hits, 1);

  // Another spec is another key: not served from this one's ready sandboxes. (Another template:
  // other resources under the same template would be a rebuilt one, whose old key the pool retires.)
  const other = await ask(askSpec({ resources: { vcpu: 2, memoryMb: 1024, diskGb: 1, pidsMax: 512 } }), 'tpl-2', 'big');
  assert.equal(other.warm, false);
  assert.equal(booted.get(other.id)!.resources.vcpu, 2);
  for (const id of [first.id, second.id, other.id]) await fake.destroy(id);
});

test('the heartbeat reports the ready sandboxes per key; the collector leaves them alone and takes a handed-out one no one claimed', async () => {
  const key = warmKeyOf(askSpec(), 'tpl-1').key;
  await until('ready again', () => pool.readyByKey()[key] === 1);
  await store.nodes.register({ id: 'node-w', url, capacity: { vcpu: 2, memoryMb: 2048, diskGb: 10, maxSandboxes: 10 } }, 30_000);
  const m = new NodeMembership({ store, node: pool, id: 'node-w', url, capacity: { vcpu: 2, memoryMb: 2048, diskGb: 10, maxSandboxes: 10 }, leaseMs: 30_000, warm: () => pool.readyByKey() });
  const row = await m.beat();
  m.stop();
  assert.equal(row?.warm[key], 1, JSON.stringify(row?.warm));
  assert.deepEqual((await store.nodes.byId('node-w'))?.warm, pool.readyByKey());

  const handed = await ask(askSpec(), 'tpl-1', 'base');
  assert.equal(handed.warm, true);
  await until('ready again', () => pool.readyByKey()[key] === 1);
  const ready = pool.held();
  const orphans = new OrphanCollector({ nodeId: 'node-w', node: pool, store, graceMs: 1000, held: () => pool.held(), log: () => undefined });
  const t0 = Date.now();
  await orphans.collect(t0);
  await orphans.collect(t0 + 2000);
  assert.deepEqual(orphans.destroyed, [handed.id], 'the handed-out sandbox, unclaimed and unrecorded past the grace, is collected');
  for (const id of ready) assert.equal(await fake.status(id), 'running', "the pool's ready sandbox is the node's own");
});

test('asks are read as an attacker would send them: unsigned, malformed or naming what the node gives are refused', async () => {
  const post = async (body: unknown, token?: string, base = url) => {
    const res = await fetch(`${base}/node/v1/warm`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as { code?: string; message?: string } };
  };
  const { id: _id, hostname: _h, ...rest } = askSpec();
  const { SANDBOX_ID: _s, ...env } = rest.env;
  const good = { spec: { ...rest, env }, pool_id: 'tpl-1', label: 'base' };
  const token = await signer.tokenFor('node-w');
  assert.equal((await post(good)).status, 401, 'no token');
  assert.equal((await post(good, await testClusterKeys().signer.tokenFor('node-w'))).status, 401, "another cluster's token");
  assert.equal((await post(good, await signer.tokenFor('node-x'))).status, 401, "another node's token");
  const before = pool.held().length + (await fake.list()).length;
  const cases: Array<[string, unknown]> = [
    ['not an object', [good]],
    ['an unknown top field', { ...good, extra: 1 }],
    ['no pool id', { ...good, pool_id: undefined }],
    ['a pool id with spaces', { ...good, pool_id: 'a b' }],
    ['a long label', { ...good, label: 'x'.repeat(201) }],
    ['an id of its own', { ...good, spec: { ...good.spec, id: 'sbmine' } }],
    ['a hostname of its own', { ...good, spec: { ...good.spec, hostname: 'mine' } }],
    ['SANDBOX_ID in env', { ...good, spec: { ...good.spec, env: { ...env, SANDBOX_ID: 'sbmine' } } }],
    ['an env value that is not text', { ...good, spec: { ...good.spec, env: { A: 1 } } }],
    ['an env name that is not a name', { ...good, spec: { ...good.spec, env: { 'A=B': 'x' } } }],
    ['a NUL in env', { ...good, spec: { ...good.spec, env: { A: 'x\u0000y' } } }],
    ['too many env entries', { ...good, spec: { ...good.spec, env: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`V${i}`, 'x'])) } }],
    ['no resources', { ...good, spec: { ...good.spec, resources: undefined } }],
    ['resources as text', { ...good, spec: { ...good.spec, resources: { ...good.spec.resources, memoryMb: '512' } } }],
    ['too little memory', { ...good, spec: { ...good.spec, resources: { ...good.spec.resources, memoryMb: 1 } } }],
    ['negative cores', { ...good, spec: { ...good.spec, resources: { ...good.spec.resources, vcpu: -1 } } }],
    ['an unknown resource', { ...good, spec: { ...good.spec, resources: { ...good.spec.resources, devices: 1 } } }],
    ['internetAccess as text', { ...good, spec: { ...good.spec, internetAccess: 'yes' } }],
    ['a bad egress entry', { ...good, spec: { ...good.spec, egress: { internet: true, allow: ['::1'], deny: [] } } }],
    ['egress with a field more', { ...good, spec: { ...good.spec, egress: { internet: true, allow: [], deny: [], ports: [] } } }],
    ['a relative layer path', { ...good, spec: { ...good.spec, lowerDirs: ['../etc'] } }],
    ['layer ids that do not match the paths', { ...good, spec: { ...good.spec, layerIds: [] } }],
    ['layers by reference on a node that takes paths', { ...good, spec: { ...good.spec, layers: [] } }],
    ['agent_env not an object', { ...good, agent_env: ['A=1'] }],
    ['an agent_env name with =', { ...good, agent_env: { 'A=B': 'x' } }],
    ['an empty agent_env name', { ...good, agent_env: { '': 'x' } }],
    ['an agent_env value that is not text', { ...good, agent_env: { A: 1 } }],
    ['a NUL in an agent_env value', { ...good, agent_env: { A: 'x\u0000y' } }],
    ['an egress that is not a policy', { ...good, egress: { internet: true } }],
    ['a bad egress entry', { ...good, egress: { internet: true, allow: ['::1'], deny: [] } }],
  ];
  for (const [what, body] of cases) {
    const r = await post(body, token);
    assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, 'VALIDATION_ERROR', what);
  }
  const huge = await post({ ...good, agent_env: { A: 'x'.repeat(17 * 1024 * 1024) } }, token);
  assert.deepEqual([huge.status, huge.body.code], [413, 'PAYLOAD_TOO_LARGE'], 'a body past the node API\'s limit');
  assert.equal(pool.held().length + (await fake.list()).length, before, 'nothing was booted for a refused ask');
});

test("the node sets the create's env_vars on the agent and its policy on the network before it answers; a sandbox whose agent does not take them is destroyed and the next one handed out", async () => {
  const key = { id: 'tpl-env', label: 'base' };
  const policy = { internet: true, allow: [], deny: ['203.0.113.0/24'] };
  const first = await ask(askSpec({ internetAccess: true }), key.id, key.label, { TOKEN: 'abc', 'odd name-1': 'x y' }, policy);
  const env = await agentGet((t) => fake.dialAgent(first.id, t), '/env', 2000);
  assert.deepEqual((env.body as { env_vars: Record<string, string> }).env_vars, { TOKEN: 'abc', 'odd name-1': 'x y' });
  assert.deepEqual(fake.egressOf(first.id), policy, 'the policy is set before the answer');
  // As big an env as the public API takes goes in the ask.
  const big = { BIG: 'x'.repeat(2 * 1024 * 1024), ['N'.repeat(5000)]: 'a long name', ...Object.fromEntries(Array.from({ length: 250_000 }, (_, i) => [`V${i}`, String(i)])) };
  const bigOne = await ask(askSpec({ internetAccess: true }), key.id, key.label, big);
  const bigEnv = (await agentJson((t) => fake.dialAgent(bigOne.id, t), 'GET', '/env', undefined, 5000, 16 * 1024 * 1024)).body as { env_vars: Record<string, string> };
  assert.equal(bigEnv.env_vars.BIG?.length, 2 * 1024 * 1024);
  assert.equal(bigEnv.env_vars.V249999, '249999');
  assert.equal(bigEnv.env_vars['N'.repeat(5000)], 'a long name');
  // The pool refills for the key; its ready sandbox's agent stops answering.
  const k = warmKeyOf(askSpec({ internetAccess: true }), key.id, key.label).key;
  await until('a ready sandbox of the key', () => (pool.readyByKey()[k] ?? 0) >= 1);
  const broken = new Set(pool.held());
  const dial = fake.dialAgent.bind(fake);
  fake.dialAgent = (id, t) => (broken.has(id) ? Promise.reject(new Error('the agent is gone')) : dial(id, t));
  try {
    const next = await ask(askSpec({ internetAccess: true }), key.id, key.label, { TOKEN: 'def' });
    assert.ok(!broken.has(next.id), 'another sandbox than the broken one');
    const got = await agentGet((t) => fake.dialAgent(next.id, t), '/env', 2000);
    assert.deepEqual((got.body as { env_vars: Record<string, string> }).env_vars, { TOKEN: 'def' });
    const left = new Set(await fake.list());
    for (const id of broken) if (!pool.held().includes(id)) assert.ok(!left.has(id), `the broken sandbox ${id} was destroyed`);
    await fake.destroy(next.id);
  } finally {
    fake.dialAgent = dial;
  }
  for (const id of [first.id, bigOne.id]) await fake.destroy(id);
});

test("control drops a template's ready sandboxes (deleted); other keys' stay; a bad or unsigned drop is refused", async () => {
  const key = warmKeyOf(askSpec(), 'tpl-1').key;
  const other = warmKeyOf(askSpec({ resources: { vcpu: 2, memoryMb: 1024, diskGb: 1, pidsMax: 512 } }), 'tpl-2').key;
  await until('both keys ready', () => pool.readyByKey()[key] === 1 && pool.readyByKey()[other] === 1);
  const ready = pool.held();
  const keys = Object.keys(pool.readyByKey()).sort();
  const del = async (path: string, token?: string) => (await fetch(`${url}${path}`, { method: 'DELETE', headers: token ? { authorization: `Bearer ${token}` } : {} })).status;
  assert.equal(await del('/node/v1/warm/tpl-1'), 401, 'no token');
  assert.equal(await del(`/node/v1/warm/${encodeURIComponent('a b')}`, await signer.tokenFor('node-w')), 400, 'a pool id with a space');
  assert.deepEqual(Object.keys(pool.readyByKey()).sort(), keys, 'nothing dropped by a refused call');
  await remote.dropWarm('tpl-1');
  assert.equal(pool.readyByKey()[key], undefined, "tpl-1's ready sandbox is gone");
  assert.equal(pool.readyByKey()[other], 1, "tpl-2's stays");
  const gone = ready.filter((id) => !pool.held().includes(id));
  assert.equal(gone.length, 1);
  assert.equal(await fake.status(gone[0]!), 'missing', 'destroyed');
  await remote.dropWarm('tpl-never-asked');
});

test("the pool's sandboxes hold their layers in the node's layer cache: recorded before the boot resolves them, released when the pool destroys them", async () => {
  const cache = new LayerCache({ store: new FsLayerStore(join(dir, 'cache-layers')), recordsDir: join(dir, 'layer-use'), sandboxes: () => fake.list(), budgetBytes: 0, maxIdleMs: 0, intervalMs: 0 });
  await cache.start();
  const recorded = async () => (await readdir(join(dir, 'layer-use')).catch(() => [] as string[])).filter((n) => n.endsWith('.json')).map((n) => n.slice(0, -5));
  let atResolve: string[] | undefined;
  const own = new LocalNode({
    id: 'node-held',
    runtime: fake,
    pool: { minPerKey: 1, maxMemoryMb: 1000, horizonSeconds: 0, shrinkAfterMs: 60_000, bootConcurrency: 1, refillDelayMs: 0, tickMs: 0 },
    agentReadyTimeoutMs: 5000,
    layerUse: cache,
    layers: {
      resolve: async () => {
        atResolve = await recorded();
        return [layerDir];
      },
    },
    log: () => undefined,
  });
  try {
    const ref = { id: 'l-held', digest: `sha256:${'0'.repeat(64)}`, bytes: 1, url: 'http://127.0.0.1:9/never', token: 'unused' };
    const spec = { ...askSpec({ layerIds: ['l-held'] }), lowerDirs: [], layerRefs: [ref] };
    const got = await own.take({ spec, poolId: 'tpl-held', label: 'base', env: {}, egress: null });
    assert.ok(atResolve?.includes(got.id), 'the record was there before the layers were resolved');
    const record = JSON.parse(await readFile(join(dir, 'layer-use', `${got.id}.json`), 'utf8')) as { layers: string[] };
    assert.deepEqual(record.layers, ['l-held']);
    const key = warmKeyOf(spec, 'tpl-held').key;
    await until('the pool refilled', () => own.readyByKey()[key] === 1);
    const ready = own.held()[0]!;
    assert.ok((await recorded()).includes(ready));
    await own.dropWarm('tpl-held');
    assert.ok(!(await recorded()).includes(ready), 'a dropped sandbox no longer holds its layers');
    assert.ok((await recorded()).includes(got.id), 'the one handed out still does (control destroys it through the node API)');
    await own.destroy(got.id);
  } finally {
    await own.close();
    await cache.stop();
  }
});

test('a heartbeat that says the node drains empties its pool, which then boots only for the asks that still come; active again, it refills', async () => {
  const capacity = { vcpu: 2, memoryMb: 2048, diskGb: 10, maxSandboxes: 10 };
  await store.nodes.register({ id: 'node-w', url, capacity }, 30_000);
  const key = warmKeyOf(askSpec(), 'tpl-1').key;
  const first = await ask(askSpec(), 'tpl-1', 'base');
  await until('ready', () => pool.readyByKey()[key] === 1);
  const ready = pool.held();
  // As roles/node.ts has it.
  const m = new NodeMembership({ store, node: pool, id: 'node-w', url, capacity, leaseMs: 30_000, warm: () => pool.readyByKey(), onStatus: (s) => pool.holdWarm(s !== 'draining') });
  try {
    await store.nodes.setStatus('node-w', 'draining');
    await m.beat();
    assert.deepEqual(pool.held(), [], 'nothing held ready');
    for (const id of ready) await until(`${id} destroyed`, () => !booted.has(id) || fake.calls.some((c) => c.verb === 'destroy' && c.id === id));
    const cold = await ask(askSpec(), 'tpl-1', 'base');
    assert.equal(cold.warm, false, 'an ask that still comes is served by a boot');
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(pool.held(), [], 'and nothing is booted ahead');
    assert.deepEqual((await m.beat())?.warm, {}, 'its heartbeat reports none ready');
    await store.nodes.setStatus('node-w', 'active');
    await m.beat();
    await until('refilled', () => pool.readyByKey()[key] === 1);
    for (const id of [first.id, cold.id]) await fake.destroy(id);
  } finally {
    m.stop();
  }
});

test('an ask whose connection control closed before the node read it (a node stopped and then going on) hands out nothing', async () => {
  const before = new Set(await fake.list());
  const body = JSON.stringify({ spec: askSpec(), pool_id: 'tpl-gone', label: 'gone', agent_env: {} });
  const token = await signer.tokenFor('node-w');
  // The ask and the end of what control sends arrive together, as a stopped node reads them.
  await new Promise<void>((resolve, reject) => {
    const sock = connect((app.server.address() as AddressInfo).port, '127.0.0.1', () => {
      sock.end(`POST /node/v1/warm HTTP/1.1\r\nHost: node\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`, () => {
        // This process is the node too: it stops for a while, and then reads both at once.
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
      });
    });
    sock.on('error', reject);
    sock.on('close', () => resolve());
    sock.resume();
  });
  // Whatever it booted is its pool's (ready for the next ask) or destroyed: none is handed out to no one.
  await new Promise((r) => setTimeout(r, 500));
  const held = new Set(pool.held());
  const handedOut = (await fake.list()).filter((id) => !before.has(id) && !held.has(id));
  assert.deepEqual(handedOut, []);
  await pool.dropWarm('tpl-gone');
});
