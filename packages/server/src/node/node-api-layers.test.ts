// Layers moved from control to a node: control names them by id and digest with a token for that
// node and layer; the node boots from its own layers directory, fetching once what it lacks, and
// takes no path from the wire. Tokens of each kind open only their own door. Root (tar keeps owners).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { internalLayerRoutes } from '../http/routes/internal-layers.js';
import { LayerContents, readContentRecord } from '../images/layer-content.js';
import { LayerFetcher } from '../images/layer-fetch.js';
import { FsLayerStore } from '../images/layer-store.js';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import { RemoteNode } from './remote-node.js';
import type { LayerRef, LayerSource, SandboxSpec } from '../runtime/types.js';
import type { Services } from '../http/services.js';
import { LayerPublisher, LayerServer } from '../services/layer-publisher.js';
import { SqliteStore } from '../store/sqlite.js';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { FakeRuntime } from '../testing/fake-runtime.js';
import { makeTestTls } from '../testing/tls.js';
import { layersDigestOf } from './membership.js';
import { LayerCache } from './layer-cache.js';
import { nodeOver } from '../testing/fake-node.js';
import { nodeApi } from './node-api.js';

const { signer, verifier } = testClusterKeys();
const LAYER = 'a'.repeat(64);
const OTHER = 'b'.repeat(64);

describe('layers from control to a node', () => {
  let dir: string;
  let control: FastifyInstance;
  let node: FastifyInstance;
  let controlUrl: string;
  let nodeUrl: string;
  let nodeStore: FsLayerStore;
  let contents: LayerContents;
  let fake: FakeRuntime;
  let cache: LayerCache;
  /** The cache's clock runs this far ahead of the layers' use marks. */
  let aheadMs = 0;
  /** Runs inside a create, its layers resolved and the sandbox not made yet. */
  let duringCreate: (() => Promise<void>) | undefined;
  const served: string[] = [];
  const booted: SandboxSpec[] = [];
  const logs: string[] = [];

  const spec = (id: string, layerIds = [LAYER]): SandboxSpec => ({
    id,
    lowerDirs: layerIds.map((l) => `/control/only/${l}/tree`),
    layerIds,
    resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 64 },
    internetAccess: false,
    hostname: id,
    env: {},
  });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sbd-layers-'));
    const controlStore = new FsLayerStore(join(dir, 'control-layers'));
    for (const [id, text] of [
      [LAYER, 'hello'],
      [OTHER, 'other'],
    ] as const) {
      await controlStore.ensureLayer(
        id,
        async (tree) => {
          mkdirSync(join(tree, 'etc'));
          writeFileSync(join(tree, 'etc/greeting'), Buffer.alloc(200_000, text));
          spawnSync('chown', ['-R', `${CANONICAL_ID_OFFSET}:${CANONICAL_ID_OFFSET}`, tree]);
          return { kind: 'test', sizeBytes: 200_000, entries: 3 };
        },
        () => undefined,
      );
    }
    contents = new LayerContents(controlStore);
    const server = new LayerServer(contents, signer);
    const open = server.open.bind(server);
    server.open = (id) => {
      served.push(id);
      return open(id);
    };
    control = Fastify();
    internalLayerRoutes(control, { layerServing: server } as unknown as Services);
    control.setErrorHandler((err: { status?: number; code?: string }, _req, reply) => reply.code(err.status ?? 500).send({ code: err.code }));
    await control.listen({ host: '127.0.0.1', port: 0 });
    controlUrl = `http://127.0.0.1:${(control.server.address() as AddressInfo).port}`;

    nodeStore = new FsLayerStore(join(dir, 'node-layers'));
    fake = new FakeRuntime({ socketDir: join(dir, 's') });
    await fake.setupHost();
    const create = fake.create.bind(fake);
    fake.create = async (s) => {
      booted.push(s);
      await duringCreate?.();
      return create(s);
    };
    // A cache that keeps nothing it may drop (a budget of one byte), as runNode wires it.
    cache = new LayerCache({ store: nodeStore, recordsDir: join(dir, 'layer-use'), sandboxes: () => fake.list(), budgetBytes: 1, maxIdleMs: 0, intervalMs: 0, now: () => Date.now() + aheadMs, log: (l) => logs.push(l) });
    await cache.start();
    const layers = new LayerFetcher({ store: nodeStore, maxBytes: 1e9, timeoutMs: 30_000, onFetched: () => cache.nudge(), log: (l) => logs.push(l) });
    node = nodeApi({ node: nodeOver(fake, 'node-l', { layers, layerUse: cache, layerIds: () => nodeStore.list() }), byReference: true, auth: verifier });
    await node.listen({ host: '127.0.0.1', port: 0 });
    nodeUrl = `http://127.0.0.1:${(node.server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await cache?.stop();
    await node?.close();
    await control?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const remote = (source: LayerSource = new LayerPublisher({ contents, signer, controlUrl })) => new RemoteNode({ id: 'node-l', url: nodeUrl, auth: signer, layers: source });
  /** A take of a sandbox of `layerIds` (the node picks its id). */
  const take = async (rt: RemoteNode, layerIds = [LAYER]) => (await rt.take({ spec: spec('', layerIds), poolId: `p-${layerIds.join('-')}`, label: 'layers', env: {}, egress: null })).id;

  test("a take boots from the node's own copy, fetched once and verified; later takes do not fetch", async () => {
    const rt = remote();
    await Promise.all([take(rt), take(rt)]);
    await take(rt);
    assert.deepEqual(served, [LAYER], 'one download for three creates, two of them at once');
    assert.ok(booted.length === 3 && booted.every((s) => s.lowerDirs[0] === nodeStore.path(LAYER)), JSON.stringify(booted.map((s) => s.lowerDirs)));
    const record = await readContentRecord(dirname(nodeStore.path(LAYER)));
    assert.deepEqual(record, await contents.of(LAYER));
    assert.ok(logs.some((l) => /^fetched layer aaaaaaaaaaaa \(\d+\.\d MB\) from control in \d+\.\d s$/.test(l)), logs.join('\n'));
    assert.deepEqual(await nodeStore.list(), [LAYER]);
  });

  test('a layer whose bytes do not match the digest control named is refused, and nothing is left of it', async () => {
    const liar = { refs: async (ids: string[], nodeId: string): Promise<LayerRef[]> => (await new LayerPublisher({ contents, signer, controlUrl }).refs(ids, nodeId)).map((r) => ({ ...r, digest: `sha256:${'0'.repeat(64)}` })) };
    await assert.rejects(take(remote(liar), [OTHER]), (err: { code?: string; detail?: string }) => err.code === 'RUNTIME_ERROR' && /digest/.test(String(err.detail)));
    assert.equal(await nodeStore.has(OTHER), false);
    assert.deepEqual(readdirSync(nodeStore.root).filter((n) => n.startsWith('.tmp-')), []);
  });

  test('the node takes no path from the wire', async () => {
    const res = await fetch(`${nodeUrl}/node/v1/sandboxes/sb-path/start`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await signer.tokenFor('node-l')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...spec('sb-path'), layerIds: undefined }),
    });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { message: string }).message, /by reference/);
  });

  test('layer tokens open only their layer, node tokens no layer, and a layer token no node', async () => {
    const get = (id: string, token?: string) => fetch(`${controlUrl}/internal/v1/layers/${id}`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
    const ok = await get(OTHER, await signer.layerTokenFor('node-l', OTHER));
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get('x-sandboxd-layer-digest'), (await contents.of(OTHER)).digest);
    await ok.body?.cancel();
    assert.equal((await get(OTHER)).status, 401);
    assert.equal((await get(OTHER, await signer.layerTokenFor('node-l', LAYER))).status, 401, "another layer's token");
    assert.equal((await get(OTHER, await signer.tokenFor('node-l'))).status, 401, "a node's call token");
    assert.equal(await signer.checkLayerToken(await signer.layerTokenFor('node-x', OTHER), OTHER), 'node-x');
    await assert.rejects(verifier.verify(await signer.layerTokenFor('node-l', LAYER), 'node-l'), { code: 'AUTHENTICATION_ERROR' });
    const other = testClusterKeys().signer;
    assert.equal((await get(OTHER, await other.layerTokenFor('node-l', OTHER))).status, 401, "another cluster's token");
  });

  test("a layer another replica made: a replica without it sends the node to the one that said it holds it; no such word, or a word not well formed, is refused", async () => {
    const kv = SqliteStore.open(':memory:').kv;
    const holder = new LayerPublisher({ contents, signer, controlUrl, kv });
    const empty = new LayerContents(new FsLayerStore(join(dir, 'replica-b-layers')));
    const other = new LayerPublisher({ contents: empty, signer, controlUrl: 'http://127.0.0.1:9', kv });
    await assert.rejects(other.refs([LAYER], 'node-l'), { code: 'INVALID_STATE' });
    await holder.announce(LAYER);
    const [ref] = await other.refs([LAYER], 'node-l');
    const own = (await holder.refs([LAYER], 'node-l'))[0]!;
    assert.equal(ref!.url, `${controlUrl}/internal/v1/layers/${LAYER}`);
    assert.deepEqual([ref!.digest, ref!.bytes], [own.digest, own.bytes]);
    // The node can fetch it with that token from the holder.
    assert.equal((await fetch(ref!.url, { headers: { authorization: `Bearer ${ref!.token}` } }).then(async (r) => (await r.arrayBuffer(), r.status))), 200);
    for (const bad of ['not json', '{"url":"file:///etc","digest":"sha256:' + '0'.repeat(64) + '","bytes":1}', '{"url":"http://x","digest":"md5:1","bytes":1}', '{"url":"http://x","digest":"sha256:' + '0'.repeat(64) + '","bytes":-1}']) {
      await kv.set(`layer-holder/${LAYER}`, bad);
      // (A replica that found the ref lately sends it as found: one that looks now.)
      await assert.rejects(new LayerPublisher({ contents: empty, signer, controlUrl: 'http://127.0.0.1:9', kv }).refs([LAYER], 'node-l'), { code: 'INVALID_STATE' }, bad);
    }
  });

  test("a layer's ref, once found, is sent without looking again for a while (one look per layer, not per create); after it, looked for again", async () => {
    let looks = 0;
    const counted = { has: (id: string) => (looks++, contents.has(id)), of: (id: string) => contents.of(id) } as unknown as LayerContents;
    const publisher = new LayerPublisher({ contents: counted, signer, controlUrl });
    const first = await publisher.refs([LAYER, OTHER], 'node-l');
    assert.equal(looks, 2);
    const again = await Promise.all([publisher.refs([LAYER, OTHER], 'node-l'), publisher.refs([LAYER], 'node-m')]);
    assert.equal(looks, 2, 'found lately: not looked for again');
    assert.deepEqual(again[0], first, 'the same refs, tokens included (the signer keeps its tokens too)');
    assert.equal(await signer.checkLayerToken(again[1][0]!.token, LAYER), 'node-m', "each node gets a token of its own");
    const fresh = new LayerPublisher({ contents: counted, signer, controlUrl, refsFreshMs: 0 });
    await fresh.refs([LAYER], 'node-l');
    await fresh.refs([LAYER], 'node-l');
    assert.equal(looks, 4, 'past its freshness, looked for at every ask');
  });

  test("control's layer route behind TLS: fetched with the cluster's CA, refused without it", async () => {
    const tls = makeTestTls(['IP:127.0.0.1']);
    const secure = Fastify({ https: { cert: tls.cert, key: tls.key } });
    try {
      internalLayerRoutes(secure as unknown as FastifyInstance, { layerServing: new LayerServer(contents, signer) } as unknown as Services);
      secure.setErrorHandler((err: { status?: number; code?: string }, _req, reply) => reply.code(err.status ?? 500).send({ code: err.code }));
      await secure.listen({ host: '127.0.0.1', port: 0 });
      const secureUrl = `https://127.0.0.1:${(secure.server.address() as AddressInfo).port}`;
      const [ref] = await new LayerPublisher({ contents, signer, controlUrl: secureUrl }).refs([OTHER], 'node-l');
      const without = new LayerFetcher({ store: new FsLayerStore(join(dir, 'tls-none')), maxBytes: 1e9, timeoutMs: 10_000 });
      await assert.rejects(without.ensure(ref!), { code: 'RUNTIME_ERROR' });
      const withCa = new LayerFetcher({ store: new FsLayerStore(join(dir, 'tls-ca')), maxBytes: 1e9, timeoutMs: 10_000, ca: tls.ca });
      const path = await withCa.ensure(ref!);
      assert.ok(readdirSync(path).includes('etc'), 'the layer came over TLS');
    } finally {
      await secure.close();
      tls.remove();
    }
  });

  test("the node's cache: a sandbox's layer stays while it exists; once it is destroyed the layer is evicted, leaves the list the heartbeat digests, and the next create fetches it again", async () => {
    const rt = remote();
    const layerList = async () => {
      const res = await fetch(`${nodeUrl}/node/v1/layers`, { headers: { authorization: `Bearer ${await signer.tokenFor('node-l')}` } });
      return ((await res.json()) as { ids: string[] }).ids;
    };
    const cached = await take(rt);
    const sandboxes = await fake.list();
    assert.ok(sandboxes.length >= 2 && sandboxes.includes(cached), JSON.stringify(sandboxes));
    // Long past the minimum age: only the sandboxes' records hold the layer now.
    aheadMs = 3_600_000;
    assert.deepEqual(await cache.pass(), []);
    assert.ok(await nodeStore.has(LAYER));
    const before = await layerList();
    assert.ok(before.includes(LAYER));
    for (const id of sandboxes) await rt.destroy(id);
    const evicted = await cache.pass();
    assert.deepEqual(evicted.map((e) => [e.id, e.reason]), [[LAYER, 'budget']], logs.join('\n'));
    assert.equal(await nodeStore.has(LAYER), false);
    const after = await layerList();
    assert.ok(!after.includes(LAYER));
    assert.notEqual(layersDigestOf(after), layersDigestOf(before), 'the heartbeat reports another set: control stops counting the node as holding it');
    const downloads = served.filter((id) => id === LAYER).length;
    aheadMs = 0;
    // A pass while the next create is under way (the sandbox not listed yet, its layer's use mark
    // long past the minimum age): the create's record holds the layer.
    let during: unknown;
    duringCreate = async () => {
      aheadMs = 3_600_000;
      // The first may be the pass the fetch asked for, begun before the clock moved.
      during = [...(await cache.pass()), ...(await cache.pass())];
    };
    const again = await take(rt).finally(() => (duringCreate = undefined));
    assert.deepEqual(during, []);
    assert.equal(served.filter((id) => id === LAYER).length, downloads + 1, 'fetched again');
    assert.equal(booted.at(-1)!.lowerDirs[0], nodeStore.path(LAYER));
    assert.ok(await nodeStore.has(LAYER));
    await rt.destroy(again);
  });
});
