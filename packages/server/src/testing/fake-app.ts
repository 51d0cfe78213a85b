import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../http/app.js';
import { loadConfig } from '../config/index.js';
import { Gateway } from '../gateway/gateway.js';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { ConnectionLimits } from '../services/connections.js';
import { EventBus } from '../services/events.js';
import type { Services } from '../http/services.js';
import { KeyService } from '../services/keys.js';
import { KeyedMutex } from '../services/locks.js';
import { QuotaService } from '../services/quotas.js';
import { SlidingWindowLimiter } from '../services/rate-limit.js';
import { RouteTable } from '../gateway/routes.js';
import { SandboxService } from '../services/sandboxes/index.js';
import { TemplateService } from '../services/templates.js';
import { TokenService } from '../services/tokens.js';
import { SnapshotService } from '../services/snapshots/index.js';
import { VolumeService } from '../services/volumes.js';
import type { VolumeHost } from '../runtime/volumes.js';
import { FsLayerStore } from '../images/layer-store.js';
import { SqliteStore } from '../store/sqlite.js';
import type { LocalNode } from '../node/local-node.js';
import type { Placement } from '../placement/placement.js';
import type { FakeRuntime } from './fake-runtime.js';
import { fakeNode, fixedPlacement } from './fake-node.js';

export interface FakeAppOrg {
  id: string;
  /** An API key of the organization with every default scope. */
  key: string;
}

export interface FakeApp {
  app: FastifyInstance;
  runtime: FakeRuntime;
  /** This process's node, on the FakeRuntime, and the placement over it. */
  node: LocalNode;
  placement: Placement;
  store: SqliteStore;
  services: Services;
  /** Two organizations: a sandbox of one is another's 403. */
  orgs: { a: FakeAppOrg; b: FakeAppOrg };
  /** One request through `app.inject` with `key` as X-API-Key; the JSON body. */
  call(key: string, method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

/**
 * The lifecycle API as the daemon wires it (main.ts), minus what needs root: an in-memory SQLite
 * store, this process's node on the FakeRuntime (no container: its agents answer on real unix
 * sockets) behind the real placement, the real gateway
 * in host mode (which opens no port per sandbox), and the built-in `base` template on a layer
 * directory that exists but holds nothing. No warm pool ahead of time, no builds; snapshots (taken
 * through the FakeRuntime's exportLayer into a layer store in the temporary directory) only when
 * `opts.snapshots` asks for them; volumes (their images kept in memory: nothing is mounted, the
 * FakeRuntime mounts nothing) only when `opts.volumes` asks for them (`'cluster'`: the service
 * without a host, as a cluster's control has it).
 */
export async function buildFakeApp(env: NodeJS.ProcessEnv = {}, opts: { snapshots?: boolean; volumes?: boolean | 'cluster' } = {}): Promise<FakeApp> {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-fake-app-'));
  const config = loadConfig({ SANDBOXD_DATA_DIR: dir, SANDBOXD_GATEWAY_DOMAIN: 'sandbox.test', ...env }, { cpus: 4, memoryMb: 8192, diskGb: 100 });
  const store = SqliteStore.open(':memory:');
  const { node, runtime } = fakeNode({ socketDir: join(dir, 'sockets'), agentReadyTimeoutMs: config.agentReadyTimeoutMs });
  await runtime.setupHost();
  const placement = fixedPlacement(store, node);
  await placement.start();
  const layersDir = join(dir, 'layers');
  const keys = new KeyService(store);
  const templates = new TemplateService(store);
  const base = BUILTIN_TEMPLATES.find((t) => t.name === 'base')!;
  const layer = { id: 'fake-base-layer', path: join(layersDir, 'fake-base-layer') };
  await mkdir(layer.path, { recursive: true });
  await templates.registerBuiltin(base, [layer]);
  const tokens = new TokenService(join(dir, 'jwt-ed25519.pem'), config.tokenTtlSeconds);
  const routes = new RouteTable();
  const events = new EventBus();
  const connections = new ConnectionLimits(config.connections);
  const gateway = new Gateway({ config: config.gateway, routes, tokens, keys, portUsed: (port) => store.sandboxes.gatewayPortUsed(port), connections, log: () => undefined });
  const createLimiter = new SlidingWindowLimiter(config.rateLimit.sandboxCreatesPerMinute, 60_000, 'sandbox creation rate limit');
  const quotas = new QuotaService(store, config.limits);
  const locks = new KeyedMutex();
  const snapshots = opts.snapshots
    ? new SnapshotService({
        store,
        placement,
        locks,
        quotas,
        templates,
        layers: new FsLayerStore(join(dir, 'snapshot-layers')),
        sandbox: (orgId, id) => sandboxes.get(orgId, id),
        settle: () => sandboxes.settle(),
        log: () => undefined,
      })
    : undefined;
  const volumes = opts.volumes
    ? new VolumeService({
        store,
        // 'cluster': no host, as a cluster's control has (volumes refused, docs/cluster.md).
        ...(opts.volumes === true ? { host: memoryVolumes(), nodeId: node.id } : { nodeId: '' }),
        quotas,
        deleteSandbox: async (orgId, id) => void (await sandboxes.delete(orgId, id, 'volume_deleted')),
        settle: () => sandboxes.settle(),
        log: () => undefined,
      })
    : undefined;
  const sandboxes: SandboxService = new SandboxService({
    ...(volumes ? { volumes } : {}),
    store,
    placement,
    tokens,
    templates,
    layerPath: (id) => (snapshots?.owns(id) ? snapshots.path(id) : join(layersDir, id)),
    gateway,
    routes,
    events,
    locks,
    ...(snapshots ? { snapshots } : {}),
    createLimiter,
    quotas,
    agentReadyTimeoutMs: config.agentReadyTimeoutMs,
    tombstoneSeconds: config.tombstoneSeconds,
    pausedRetentionSeconds: config.pausedRetentionSeconds,
    log: () => undefined,
  });
  const services: Services = { config, store, keys, tokens, sandboxes, templates, events, createLimiter, quotas, connections, placement, ...(snapshots ? { snapshots } : {}), ...(volumes ? { volumes } : {}) };
  const app = await buildApp({ services });
  const org = async (name: string): Promise<FakeAppOrg> => {
    const o = await keys.ensureOrg(name);
    return { id: o.id, key: (await keys.createKey(o.id)).secret };
  };
  const orgs = { a: await org('org-a'), b: await org('org-b') };
  return {
    app,
    runtime,
    node,
    placement,
    store,
    services,
    orgs,
    call: async (key, method, url, payload) => {
      const res = await app.inject({ method, url, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload: payload as object }) });
      return { status: res.statusCode, body: res.body === '' ? undefined : res.json() };
    },
    close: async () => {
      await app.close();
      await sandboxes.settle();
      await gateway.closeAll();
      await placement.close();
      await runtime.dispose();
      store.close();
      // Retried: a write still under way in the directory (seen right after a request) makes rmdir ENOTEMPTY.
      await rm(dir, { recursive: true, force: true, maxRetries: 5 });
    },
  };
}

/** Volumes whose images are sizes in a map: what a VolumeService needs of a host, without root. */
function memoryVolumes(): VolumeHost {
  const made = new Map<string, number>();
  return {
    create: async (id, bytes) => void made.set(id, bytes),
    usage: async (id) => ({ usedBytes: 0, totalBytes: made.get(id) ?? 0 }),
    destroy: async (id) => void made.delete(id),
    leftovers: async (id) => (made.has(id) ? [id] : []),
  };
}
