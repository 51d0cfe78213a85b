// A node's warm pool behind its API (POST /node/v1/warm): control asks for a sandbox of a spec and
// the node answers with a ready one (or one booted now), whose id it picked; its ready sandboxes
// are reported in the heartbeat and never collected as no one's. FakeRuntime behind a real node
// API: no root, no container.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { FsLayerStore } from '../images/layer-store.js';
import { RemoteRuntime } from '../runtime/remote-runtime.js';
import type { SandboxSpec } from '../runtime/types.js';
import { NodeMembership } from '../services/node-membership.js';
import { NodeWarmPool } from '../services/node-pool.js';
import { OrphanCollector } from '../services/orphans.js';
import { agentGet } from '../services/agent-client.js';
import { clusterWarmKeyOf } from '../services/warm-pool.js';
import { SqliteStore } from '../store/sqlite.js';
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
let pool: NodeWarmPool;
let app: FastifyInstance;
let bare: FastifyInstance;
let url: string;
let remote: RemoteRuntime;
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
  pool = new NodeWarmPool({
    runtime: fake,
    pool: { minPerKey: 1, maxMemoryMb: 1000, horizonSeconds: 0, shrinkAfterMs: 60_000, bootConcurrency: 2, refillDelayMs: 0, tickMs: 0 },
    agentReadyTimeoutMs: 5000,
    log: () => undefined,
  });
  app = nodeApi({ nodeId: 'node-w', runtime: fake, auth: verifier, warm: pool });
  await app.listen({ host: '127.0.0.1', port: 0 });
  url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  remote = new RemoteRuntime({ nodeId: 'node-w', url, auth: signer });
  bare = nodeApi({ nodeId: 'node-w', runtime: fake, auth: verifier });
  await bare.listen({ host: '127.0.0.1', port: 0 });
});

after(async () => {
  await pool?.close();
  await app?.close();
  await bare?.close();
  await fake?.dispose();
  store.close();
  await rm(dir, { recursive: true, force: true });
});

test('the first ask boots one (cold), the pool refills, the next ask is served ready; the node picks the ids', async () => {
  const first = await remote.askWarm(askSpec(), { id: 'tpl-1', label: 'base' });
  assert.equal(first.warm, false, 'nothing was ready yet');
  const spec = booted.get(first.id)!;
  assert.match(first.id, /^sb[a-z0-9]{20}$/);
  assert.equal(spec.hostname, `sandbox-${first.id.slice(2, 10)}`, 'the hostname comes from the id the node picked');
  assert.equal(spec.env.SANDBOX_ID, first.id);
  assert.equal(spec.env.GREETING, 'hi', "the rest of control's spec is kept");
  assert.deepEqual(spec.lowerDirs, [layerDir]);
  assert.equal(await fake.status(first.id), 'running');

  const key = clusterWarmKeyOf(askSpec(), 'tpl-1').key;
  await until('the pool refilled to its minimum', () => pool.readyByKey()[key] === 1);
  const held = pool.held();
  assert.equal(held.length, 1);
  assert.ok(!held.includes(first.id), 'a sandbox handed out is no longer the pool\'s');
  const second = await remote.askWarm(askSpec(), { id: 'tpl-1', label: 'base' });
  assert.deepEqual(second, { id: held[0], warm: true, envSet: false }, 'served the ready one');
  assert.notEqual(second.id, first.id);
  assert.equal(pool.stats().hits, 1);

  // Another spec is another key: not served from this one's ready sandboxes. (Another template:
  // other resources under the same template would be a rebuilt one, whose old key the pool retires.)
  const other = await remote.askWarm(askSpec({ resources: { vcpu: 2, memoryMb: 1024, diskGb: 1, pidsMax: 512 } }), { id: 'tpl-2', label: 'big' });
  assert.equal(other.warm, false);
  assert.equal(booted.get(other.id)!.resources.vcpu, 2);
  for (const id of [first.id, second.id, other.id]) await fake.destroy(id);
});

test('the heartbeat reports the ready sandboxes per key; the collector leaves them alone and takes a handed-out one no one claimed', async () => {
  const key = clusterWarmKeyOf(askSpec(), 'tpl-1').key;
  await until('ready again', () => pool.readyByKey()[key] === 1);
  await store.nodes.register({ id: 'node-w', url, capacity: { vcpu: 2, memoryMb: 2048, diskGb: 10, maxSandboxes: 10 } }, 30_000);
  const m = new NodeMembership({ store, runtime: fake, id: 'node-w', url, capacity: { vcpu: 2, memoryMb: 2048, diskGb: 10, maxSandboxes: 10 }, leaseMs: 30_000, warm: () => pool.readyByKey() });
  const row = await m.beat();
  m.stop();
  assert.equal(row?.warm[key], 1, JSON.stringify(row?.warm));
  assert.deepEqual((await store.nodes.byId('node-w'))?.warm, pool.readyByKey());

  const handed = await remote.askWarm(askSpec(), { id: 'tpl-1', label: 'base' });
  assert.equal(handed.warm, true);
  await until('ready again', () => pool.readyByKey()[key] === 1);
  const ready = pool.held();
  const orphans = new OrphanCollector({ nodeId: 'node-w', runtime: fake, store, graceMs: 1000, held: () => pool.held(), log: () => undefined });
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
    ['too many agent_env entries', { ...good, agent_env: Object.fromEntries(Array.from({ length: 4097 }, (_, i) => [`V${i}`, 'x'])) }],
    ['too big an agent_env', { ...good, agent_env: { A: 'x'.repeat(600 * 1024) } }],
  ];
  for (const [what, body] of cases) {
    const r = await post(body, token);
    assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, 'VALIDATION_ERROR', what);
  }
  assert.equal(pool.held().length + (await fake.list()).length, before, 'nothing was booted for a refused ask');
  const none = await post(good, token, `http://127.0.0.1:${(bare.server.address() as AddressInfo).port}`);
  assert.deepEqual([none.status, none.body.code], [404, 'ROUTE_NOT_FOUND'], 'a node without a pool has no such route (as one of an earlier version)');
});

test("with the create's env_vars, the node sets them on the agent before it answers; a sandbox whose agent does not take them is destroyed and the next one handed out", async () => {
  const key = { id: 'tpl-env', label: 'base' };
  const first = await remote.askWarm(askSpec(), key, { TOKEN: 'abc', 'odd name-1': 'x y' });
  assert.equal(first.envSet, true);
  const env = await agentGet((t) => fake.dialAgent(first.id, t), '/env', 2000);
  assert.deepEqual((env.body as { env_vars: Record<string, string> }).env_vars, { TOKEN: 'abc', 'odd name-1': 'x y' });
  // The pool refills for the key; its ready sandbox's agent stops answering.
  const k = clusterWarmKeyOf(askSpec(), key.id, key.label).key;
  await until('a ready sandbox of the key', () => (pool.readyByKey()[k] ?? 0) >= 1);
  const broken = new Set(pool.held());
  const dial = fake.dialAgent.bind(fake);
  fake.dialAgent = (id, t) => (broken.has(id) ? Promise.reject(new Error('the agent is gone')) : dial(id, t));
  try {
    const next = await remote.askWarm(askSpec(), key, { TOKEN: 'def' });
    assert.equal(next.envSet, true);
    assert.ok(!broken.has(next.id), 'another sandbox than the broken one');
    const got = await agentGet((t) => fake.dialAgent(next.id, t), '/env', 2000);
    assert.deepEqual((got.body as { env_vars: Record<string, string> }).env_vars, { TOKEN: 'def' });
    const left = new Set(await fake.list());
    for (const id of broken) if (!pool.held().includes(id)) assert.ok(!left.has(id), `the broken sandbox ${id} was destroyed`);
  } finally {
    fake.dialAgent = dial;
  }
  // Without env_vars, as an ask was before: nothing is set, and the node does not say it was.
  const plain = await remote.askWarm(askSpec(), key);
  assert.equal(plain.envSet, false);
  for (const id of [first.id, plain.id]) await fake.destroy(id);
});

test('a node of an earlier version refuses agent_env: the ask is made again without it, and control is told the env is not set', async () => {
  const old = Fastify();
  const asks: Array<Record<string, unknown>> = [];
  old.post('/node/v1/warm', async (req, reply) => {
    const body = req.body as Record<string, unknown>;
    asks.push(body);
    if ('agent_env' in body) return reply.code(400).send({ code: 'VALIDATION_ERROR', message: 'warm ask: unknown field "agent_env"' });
    return { id: 'sbold0000000000000000001'.slice(0, 24), warm: true };
  });
  await old.listen({ host: '127.0.0.1', port: 0 });
  try {
    const r = new RemoteRuntime({ nodeId: 'node-w', url: `http://127.0.0.1:${(old.server.address() as AddressInfo).port}`, auth: signer });
    const got = await r.askWarm(askSpec(), { id: 'tpl-old', label: 'base' }, { A: '1' });
    assert.equal(got.envSet, false);
    assert.deepEqual(
      asks.map((a) => 'agent_env' in a),
      [true, false],
    );
    // Env too big for an ask goes through the relay: it is not sent at all.
    asks.length = 0;
    const big = await r.askWarm(askSpec(), { id: 'tpl-old', label: 'base' }, { A: 'x'.repeat(300 * 1024) });
    assert.equal(big.envSet, false);
    assert.deepEqual(
      asks.map((a) => 'agent_env' in a),
      [false],
    );
  } finally {
    await old.close();
  }
});

test("control drops a template's ready sandboxes (deleted); other keys' stay; a bad or unsigned drop is refused", async () => {
  const key = clusterWarmKeyOf(askSpec(), 'tpl-1').key;
  const other = clusterWarmKeyOf(askSpec({ resources: { vcpu: 2, memoryMb: 1024, diskGb: 1, pidsMax: 512 } }), 'tpl-2').key;
  await until('both keys ready', () => pool.readyByKey()[key] === 1 && pool.readyByKey()[other] === 1);
  const ready = pool.held();
  const del = async (path: string, token?: string) => (await fetch(`${url}${path}`, { method: 'DELETE', headers: token ? { authorization: `Bearer ${token}` } : {} })).status;
  assert.equal(await del('/node/v1/warm/tpl-1'), 401, 'no token');
  assert.equal(await del(`/node/v1/warm/${encodeURIComponent('a b')}`, await signer.tokenFor('node-w')), 400, 'a pool id with a space');
  assert.deepEqual(Object.keys(pool.readyByKey()).sort(), [key, other].sort(), 'nothing dropped by a refused call');
  await remote.dropWarm('tpl-1');
  assert.deepEqual(pool.readyByKey(), { [other]: 1 }, "tpl-1's ready sandbox is gone, tpl-2's stays");
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
  const own = new NodeWarmPool({
    runtime: fake,
    pool: { minPerKey: 1, maxMemoryMb: 1000, horizonSeconds: 0, shrinkAfterMs: 60_000, bootConcurrency: 1, refillDelayMs: 0, tickMs: 0 },
    agentReadyTimeoutMs: 5000,
    layerUse: cache,
    log: () => undefined,
  });
  try {
    const lowerDirs = async () => {
      atResolve = await recorded();
      return [layerDir];
    };
    const spec = askSpec({ layerIds: ['l-held'] });
    const got = await own.take({ spec, lowerDirs, poolId: 'tpl-held', label: 'base' });
    assert.ok(atResolve?.includes(got.id), 'the record was there before the layers were resolved');
    const record = JSON.parse(await readFile(join(dir, 'layer-use', `${got.id}.json`), 'utf8')) as { layers: string[] };
    assert.deepEqual(record.layers, ['l-held']);
    const key = clusterWarmKeyOf(spec, 'tpl-held').key;
    await until('the pool refilled', () => own.readyByKey()[key] === 1);
    const ready = own.held()[0]!;
    assert.ok((await recorded()).includes(ready));
    await own.drop('tpl-held');
    assert.ok(!(await recorded()).includes(ready), 'a dropped sandbox no longer holds its layers');
    assert.ok((await recorded()).includes(got.id), 'the one handed out still does (control destroys it through the node API)');
    await fake.destroy(got.id);
  } finally {
    await own.close();
    await cache.stop();
  }
});
