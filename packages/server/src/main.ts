import { existsSync, mkdirSync, readFileSync, statfsSync, statSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { join } from 'node:path';
import { lookup } from 'node:dns/promises';
import { availableParallelism, hostname, totalmem } from 'node:os';
import { loadConfig, type Config } from './config.js';
import { secureDataDir } from './data-dir.js';
import { SqliteStore } from './store/sqlite.js';
import { PostgresStore } from './store/postgres.js';
import { describeUrl } from './store/postgres-url.js';
import type { Store } from './store/types.js';
import { CrunRuntime } from './runtime/index.js';
import { ensureSystemPackages } from './runtime/system-packages.js';
import { blockedRangeOf, type EgressEndpoint } from './runtime/host.js';
import { readHostAptConfig } from './images/apt-sources.js';
import { openBuilder } from './builder/index.js';
import type { BuildEngine } from './builder/types.js';
import { nodeApi } from './node/node-api.js';
import { OrphanCollector } from './services/orphans.js';
import { NodeMembership, storeRegistry, type NodeRegistry } from './services/node-membership.js';
import { NodeRegistryAuth } from './services/node-registry.js';
import { RegistryClient } from './services/registry-client.js';
import { ClusterRuntime } from './services/cluster-runtime.js';
import type { Runtime } from './runtime/types.js';
import { ClusterSigner, ClusterVerifier } from './runtime/cluster-auth.js';
import { openImageServices } from './images/index.js';
import { ensurePythonCompatLayer } from './images/base-images.js';
import { sharedUploadKey, UploadService, uploadKeyFromFile } from './services/uploads.js';
import { localUploadBlobs, StoreUploadBlobs } from './services/upload-blobs.js';
import { fileBuildLogs, storeBuildLogs } from './services/build-logs.js';
import { BUILD_HEARTBEAT_MS, TemplateBuildService } from './services/template-builds.js';
import { collectGarbage } from './services/gc.js';
import { ensureBuiltinTemplates } from './images/bootstrap.js';
import { BUILTIN_TEMPLATES } from './images/builtin.js';
import { ALL_SCOPES, KeyService } from './services/keys.js';
import { TokenService } from './services/tokens.js';
import { TemplateService } from './services/templates.js';
import { routeOf, SandboxService } from './services/sandboxes.js';
import { SnapshotService } from './services/snapshots.js';
import { FsLayerStore } from './images/layer-store.js';
import { LayerContents } from './images/layer-content.js';
import { LayerFetcher } from './images/layer-fetch.js';
import { LayerCache } from './node/layer-cache.js';
import { LayerPublisher, LayerServer } from './services/layer-publisher.js';
import { QuotaService } from './services/quotas.js';
import { SharedWindowLimiter, SlidingWindowLimiter, type RateLimiter } from './services/rate-limit.js';
import { EventBus } from './services/events.js';
import { KeyedMutex, ReplicaMutex } from './services/locks.js';
import { RouteTable, type RouteEntry } from './services/routes.js';
import { ClusterSync } from './services/cluster-sync.js';
import { WarmPool } from './services/warm-pool.js';
import { NodeWarmPool } from './services/node-pool.js';
import { Metrics, serveMetrics } from './services/metrics.js';
import { Gateway } from './gateway/gateway.js';
import { ConnectionLimits } from './services/connections.js';
import { buildApp } from './http/app.js';
import { createLogger, type Logger } from './logging.js';
import type { Services } from './services/index.js';

/** The daemon's logger: replaced by one of the configured level and format once the config is read. */
let logger: Logger = createLogger('info');

/** One event of the daemon's, at info (warn when it says something failed), with its fields. */
function log(msg: string, extra?: Record<string, unknown>): void {
  const fields = extra ?? {};
  if (/\b(failed|warning|cannot|could not)\b/i.test(msg)) logger.warn(fields, msg);
  else logger.info(fields, msg);
}

/** The image side of the data dir (layers, blobs, imported images, builder), as configured. */
export function openImages(config: Config, log: (line: string) => void) {
  return openImageServices({
    dataDir: config.dataDir,
    layersDir: config.layersDir,
    registryUrl: config.registry.url,
    registryUsername: config.registry.username,
    registryPassword: config.registry.password,
    registryHint: 'SANDBOXD_REGISTRY_URL',
    log,
  });
}

/**
 * Images get the host's apt sources, so a mirror or proxy in a blocked range (an internal one on
 * 10.x, say) would break every `apt-get install` in sandboxes and builds. The host already trusts
 * these sources: sandboxes may reach each one's address on its port (not the rest of its range,
 * never its DNS ports), unless SANDBOXD_EGRESS_ALLOW_APT_SOURCES=false, in which case the start
 * says what breaks and how to allow it.
 */
async function blockedAptSources(egressAllow: string[]): Promise<Array<EgressEndpoint & { host: string; range: string }>> {
  const endpoints = new Map<string, { host: string; port: number }>();
  for (const src of (await readHostAptConfig()).sources) {
    for (const uri of src.uris) {
      try {
        const u = new URL(uri);
        if (u.protocol !== 'http:' && u.protocol !== 'https:') continue;
        const port = Number(u.port) || (u.protocol === 'https:' ? 443 : 80);
        endpoints.set(`${u.hostname}:${port}`, { host: u.hostname, port });
      } catch {
        /* not a URL (cdrom:, file:) */
      }
    }
  }
  const out: Array<EgressEndpoint & { host: string; range: string }> = [];
  for (const { host, port } of endpoints.values()) {
    // A resolver that does not answer must not hold the start up for long.
    const addrs = await Promise.race([
      lookup(host, { all: true, family: 4 }).catch(() => []),
      new Promise<[]>((r) => setTimeout(() => r([]), 3000).unref()),
    ]);
    for (const { address } of addrs) {
      const range = blockedRangeOf(address, egressAllow);
      if (range) out.push({ host, address, port, range });
    }
  }
  return out;
}

/** The store the config names: PostgreSQL at SANDBOXD_DATABASE_URL when set, else SQLite in the data directory. */
export async function openStore(config: Config, log?: (line: string) => void): Promise<Store> {
  if (!config.databaseUrl) return SqliteStore.open(join(config.dataDir, 'sandboxd.db'));
  log?.(`store: PostgreSQL at ${describeUrl(config.databaseUrl)}`);
  return PostgresStore.open(config.databaseUrl);
}

/** Closes the store, waiting for a networked one's connections to end. */
async function closeStore(store: Store): Promise<void> {
  if (store instanceof PostgresStore) await store.end();
  else store.close();
}

/** The signing key of sandbox, events and preview tokens, one for every replica: made by the first, kept in the store. */
async function sharedTokens(store: Store, ttlSeconds: number): Promise<TokenService> {
  const pem = await store.kv.setIfAbsent('token-signing-key', TokenService.newKeyPem());
  return new TokenService({ pem }, ttlSeconds);
}

/**
 * A sandbox's route as the store has it (cluster roles: another replica may have made it), with
 * its previews' public or private state in host mode.
 */
async function loadRoute(store: Store, runtime: Runtime, gateway: Gateway, config: Config, id: string, current: () => boolean): Promise<RouteEntry | undefined> {
  // Read at once (each a round trip to PostgreSQL, before a gateway's first request to the sandbox).
  const [row, previews] = await Promise.all([store.sandboxes.byId(id), config.gateway.mode === 'host' ? store.previews.forSandbox(id) : []]);
  if (!row || row.status === 'deleted') return undefined;
  // A preview made private while this read: this read's "public" is not applied after it.
  if (current()) for (const p of previews) await gateway.openPreview(id, p.port, p.public, null);
  // The cluster's runtime would read the row again to find its node.
  if (runtime instanceof ClusterRuntime) runtime.remember(row);
  return routeOf(row, runtime);
}

/** The admin key of the default organization: pinned by config, else generated once and kept 0600. */
async function bootstrapKey(config: Config, keys: KeyService): Promise<string> {
  if (config.bootstrapApiKey) {
    await keys.ensureBootstrapKey(config.bootstrapApiKey);
    return config.bootstrapApiKey;
  }
  const file = join(config.dataDir, 'api-key');
  if (existsSync(file)) {
    const secret = readFileSync(file, 'utf8').trim();
    await keys.ensureBootstrapKey(secret);
    return secret;
  }
  const org = await keys.ensureOrg('default');
  const { secret } = await keys.createKey(org.id, { name: 'bootstrap', scopes: [...ALL_SCOPES] });
  writeFileSync(file, `${secret}\n`, { mode: 0o600 });
  return secret;
}

/** This machine's runtime, its host prepared: system packages, apt sources' reachability, bridge, rules. */
async function openRuntime(config: Config): Promise<CrunRuntime> {
  await ensureSystemPackages(log);
  const aptExceptions = await blockedAptSources(config.runtime.egressAllow).catch((err: unknown) => {
    log(`checking the apt sources' reachability: ${String(err)}`);
    return [];
  });
  for (const a of aptExceptions) {
    log(
      config.runtime.allowAptSources
        ? `sandboxes may reach the host's apt source ${a.host} (${a.address} port ${a.port}), although ${a.range} is blocked (SANDBOXD_EGRESS_ALLOW_APT_SOURCES=false closes it)`
        : `warning: sandboxes cannot reach the apt source ${a.host} (${a.address} is in the blocked range ${a.range}); allow it with SANDBOXD_EGRESS_ALLOW_APT_SOURCES=true or SANDBOXD_EGRESS_ALLOW=${a.address}/32`,
    );
  }
  const runtime = new CrunRuntime({
    dataDir: config.dataDir,
    agentBundlePath: config.agentBundlePath,
    cgroupParent: config.runtime.cgroupParent,
    bridgeName: config.runtime.bridge,
    subnetCidr: config.runtime.subnet,
    egressAllow: config.runtime.egressAllow,
    egressAllowEndpoints: config.runtime.allowAptSources ? aptExceptions.map(({ address, port }) => ({ address, port })) : [],
    log,
  });
  await runtime.setupHost();
  return runtime;
}

/** The size of the filesystem a directory is on, GB. */
function diskGbOf(dir: string): number {
  const fs = statfsSync(dir);
  return Math.floor((fs.blocks * fs.bsize) / 1024 ** 3);
}

/**
 * Secrets read into the config leave the environment, so that no host tool the daemon runs (crun,
 * ip, the egress proxy) inherits them. (The cluster's signing key is only ever in a file, read
 * into the config; the verify key, SANDBOXD_CLUSTER_VERIFY_KEY, is public.)
 */
function scrubSecrets(env: NodeJS.ProcessEnv): void {
  for (const name of ['SANDBOXD_DATABASE_URL', 'SANDBOXD_BOOTSTRAP_API_KEY', 'SANDBOXD_REGISTRY_PASSWORD', 'SANDBOXD_NODE_CREDENTIAL']) delete env[name];
}

/** What every role that runs sandboxes checks first: root, the agent bundle, a private data directory. */
async function prepareMachine(config: Config): Promise<void> {
  if (process.getuid?.() !== 0) {
    throw new Error('sandboxd must run as root: it creates containers, mounts, cgroups and network namespaces (try: sudo npm start)');
  }
  if (!existsSync(config.agentBundlePath)) {
    throw new Error(`agent bundle ${config.agentBundlePath} is missing: run "npm run build" first`);
  }
  // Agents' sockets are <data dir>/sandboxes/<id>/agent.sock, and a unix socket's path is at most
  // 107 bytes: past that, every boot would fail with a bare ENOENT.
  const longest = join(config.dataDir, 'sandboxes', 'x'.repeat(24), 'agent.sock').length;
  if (longest > 107) {
    throw new Error(`SANDBOXD_DATA_DIR is too long (${config.dataDir.length} characters): sandboxes' agent sockets under it would pass the 107-byte limit of a unix socket's path; use a directory of at most ${config.dataDir.length - (longest - 107)} characters`);
  }
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  for (const f of await secureDataDir(config.dataDir, config.layersDir)) {
    log(`${f.path}: mode ${f.from.toString(8)} → ${f.to.toString(8)} (secrets and tenant data are root's alone)`);
  }
}

/**
 * `sandboxd node`: a machine of a cluster that hosts sandboxes. It runs this machine's runtime and
 * serves it to control over the node API (node/node-api.ts), taking only calls control signed for
 * it, checked with the cluster's public key: a node holds nothing that signs for control, so one
 * taken over cannot drive the others. Its sandboxes keep running when it stops.
 */
export async function runNode(env: NodeJS.ProcessEnv = process.env): Promise<{ close: () => Promise<void> }> {
  const config = loadConfig(env);
  scrubSecrets(env);
  logger = createLogger(config.logLevel, { format: config.logFormat === 'auto' ? undefined : config.logFormat });
  if (config.node.signingKey) {
    throw new Error(
      "sandboxd node must not hold the cluster's signing key (SANDBOXD_CLUSTER_SIGNING_KEY_FILE is control's alone): a node needs the public key only, SANDBOXD_CLUSTER_VERIFY_KEY_FILE (cluster-verify.pem of `sandboxd cluster keygen`)",
    );
  }
  if (!config.node.verifyKey) {
    throw new Error('sandboxd node needs the public key of its cluster (the pair of the private key control signs with): set SANDBOXD_CLUSTER_VERIFY_KEY_FILE (cluster-verify.pem of `sandboxd cluster keygen`) or SANDBOXD_CLUSTER_VERIFY_KEY (its PEM)');
  }
  await prepareMachine(config);
  log(`starting sandboxd ${config.version} as node ${config.node.id}; data directory ${config.dataDir}`);
  const runtime = await openRuntime(config);
  // Its own layers directory, a cache: what it lacks is fetched from control on first use; what no
  // sandbox here uses goes when it is over its budget or idle too long (node/layer-cache.ts).
  const layerStore = new FsLayerStore(config.layersDir, { log });
  await layerStore.cleanupStale();
  // A layers directory outside the data directory may be shared (with control, another daemon):
  // it holds layers this node knows nothing about, so it is evicted from only when asked outright.
  const cache = config.nodeLayerCache;
  const evicts = config.layersDir.startsWith(`${config.dataDir}/`) || cache.explicit;
  if (evicts) log(`layer cache: keeps ${cache.budgetBytes ? `${(cache.budgetBytes / 1024 ** 3).toFixed(1)} GB of layers` : 'layers without a budget'}, ${cache.maxIdleMs ? `evicts a layer unused for ${cache.maxIdleMs / 3_600_000} h` : 'with no idle limit'}; never one in use or used in the last ${cache.minAgeMs / 1000} s`);
  else log(`layer cache: off, ${config.layersDir} lies outside the data directory (set SANDBOXD_NODE_LAYER_CACHE_GB or SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS to evict from it all the same)`);
  const layerCache = new LayerCache({
    store: layerStore,
    recordsDir: join(config.dataDir, 'layer-use'),
    sandboxes: () => runtime.list(),
    budgetBytes: evicts ? cache.budgetBytes : 0,
    maxIdleMs: evicts ? cache.maxIdleMs : 0,
    minAgeMs: cache.minAgeMs,
    log,
  });
  await layerCache.start();
  const layers = new LayerFetcher({ store: layerStore, maxBytes: config.layerTransfer.maxBytes, timeoutMs: config.layerTransfer.timeoutMs, ca: config.node.clusterCa ?? undefined, onFetched: () => layerCache.nudge(), log });
  let orphans: OrphanCollector | undefined;
  const layerIds = () => layerStore.list();
  // The node's warm pool, sized as the all-in-one daemon's is (SANDBOXD_WARM_POOL_*,
  // SANDBOXD_BOOT_CONCURRENCY) from the asks of every control replica.
  const warm = new NodeWarmPool({
    runtime,
    pool: {
      minPerKey: config.warmPool.minPerKey,
      maxMemoryMb: config.warmPool.maxMemoryMb,
      reserveSandboxes: config.warmPool.reserve,
      horizonSeconds: config.warmPool.horizonSeconds,
      shrinkAfterMs: config.warmPool.shrinkAfterSeconds * 1000,
      bootConcurrency: config.warmPool.bootConcurrency,
    },
    agentReadyTimeoutMs: config.agentReadyTimeoutMs,
    layerUse: layerCache,
    log,
  });
  // Snapshots' copies on their way to control: what a crash left there is of no use to anyone.
  const exportsDir = join(config.dataDir, 'exports');
  await rm(exportsDir, { recursive: true, force: true });
  const app = nodeApi({
    nodeId: config.node.id,
    runtime,
    auth: new ClusterVerifier(config.node.verifyKey),
    log,
    layers,
    layerUse: layerCache,
    layerIds,
    exportsDir,
    warm,
    ...(config.node.tls ? { https: config.node.tls } : {}),
    // What this node fetches at most is what it sends at most (control holds the same limit).
    exportMaxBytes: config.layerTransfer.maxBytes,
    orphans: { claim: (owner, ids, ttlMs) => orphans?.claim(owner, ids, ttlMs) },
  });
  await app.listen({ host: config.node.listen.host, port: config.node.listen.port });
  log(`node ${config.node.id} serves its runtime at ${config.node.url} (listening on ${config.node.listen.host}:${config.node.listen.port})`);
  // It joins the registry, which control places sandboxes from: through control with its registry
  // credential (no database credentials on the node), or in the cluster's database itself.
  let membership: NodeMembership | undefined;
  let store: Store | undefined;
  let registry: NodeRegistry | undefined;
  if (config.node.credential) {
    if (!config.node.controlUrl) throw new Error('a node with a registry credential needs SANDBOXD_CONTROL_URL: where it reaches control (any replica)');
    if (config.databaseUrl) log('SANDBOXD_NODE_CREDENTIAL_FILE is set: this node registers through control, and does not use SANDBOXD_DATABASE_URL');
    registry = new RegistryClient({ controlUrl: config.node.controlUrl, credential: config.node.credential, ca: config.node.clusterCa ?? undefined });
    log(`node ${config.node.id} registers through control at ${config.node.controlUrl}`);
  } else if (config.databaseUrl) {
    store = await openStore(config, log);
    registry = storeRegistry(store);
  }
  if (registry) {
    const reg = registry;
    membership = new NodeMembership({
      registry: reg,
      runtime,
      id: config.node.id,
      url: config.node.url,
      capacity: {
        vcpu: availableParallelism(),
        memoryMb: Math.floor(totalmem() / 1024 / 1024),
        diskGb: diskGbOf(config.dataDir),
        maxSandboxes: config.node.maxSandboxes,
      },
      leaseMs: config.node.leaseSeconds * 1000,
      layers: layerIds,
      warm: () => warm.readyByKey(),
      log,
    });
    // What no control replica owns (one died mid-create, or with its warm pool) goes after a grace.
    const collector = new OrphanCollector({ nodeId: config.node.id, runtime, liveIds: () => reg.liveIds(config.node.id), graceMs: config.node.orphanGraceSeconds * 1000, held: () => warm.held(), log });
    if (store) {
      await membership.start();
      orphans = collector;
      orphans.start();
    } else {
      // Through control, which may start after this node: registered once it answers.
      const m = membership;
      void m.startWhenReachable(2000).then((registered) => {
        if (!registered || closing) return;
        orphans = collector;
        orphans.start();
      });
    }
  } else {
    log('no SANDBOXD_NODE_CREDENTIAL_FILE and no SANDBOXD_DATABASE_URL: this node is not in a registry (control must be given its URL)');
  }
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      membership?.stop();
      await orphans?.stop();
      await layerCache.stop();
      if (store) await closeStore(store).catch((err: unknown) => log('closing the store failed', { error: String(err) }));
      await app.close().catch((err: unknown) => log('closing the node API failed', { error: String(err) }));
      // Its ready sandboxes are no one's once it is gone (a node started again does not know them).
      await warm.close().catch((err: unknown) => log('emptying the warm pool failed', { error: String(err) }));
      await runtime.close().catch((err: unknown) => log('releasing runtime spares failed', { error: String(err) }));
      log('node shut down; its sandboxes keep running');
    })());
  return { close };
}

/**
 * `sandboxd edge`: serves every sandbox's public_host and preview URLs (host mode), for a cluster.
 * Stateless: it finds each sandbox in the store and reaches it through the node that holds it; any
 * number of replicas run behind one wildcard name. A request to a sleeping sandbox that wakes on
 * traffic resumes it from here. It runs no sandbox, needs no root and keeps no data directory.
 */
export async function runEdge(env: NodeJS.ProcessEnv = process.env): Promise<{ close: () => Promise<void>; port: number }> {
  const config = loadConfig(env);
  scrubSecrets(env);
  logger = createLogger(config.logLevel, { format: config.logFormat === 'auto' ? undefined : config.logFormat });
  // The edge calls the nodes (relay, resume) as control does, so it signs with control's key.
  if (!config.databaseUrl || !config.node.signingKey) {
    throw new Error(
      "sandboxd edge needs the cluster: SANDBOXD_DATABASE_URL (PostgreSQL) and SANDBOXD_CLUSTER_SIGNING_KEY_FILE (the cluster's private key, as control has it: the edge calls the nodes too)",
    );
  }
  if (config.gateway.mode !== 'host') {
    throw new Error('sandboxd edge serves sandboxes by host name: set SANDBOXD_GATEWAY_DOMAIN (its wildcard DNS name points at the edge replicas) and SANDBOXD_GATEWAY_PORT, the same as control has');
  }
  log(`starting sandboxd ${config.version} as edge`);
  const store = await openStore(config, log);
  const coordination = store.coordination!;
  const runtime = new ClusterRuntime({ store, auth: new ClusterSigner(config.node.signingKey), claimEveryMs: 0, ca: config.node.clusterCa ?? undefined, log });
  await runtime.setupHost();
  const tokens = await sharedTokens(store, config.tokenTtlSeconds);
  const keys = new KeyService(store);
  const events = new EventBus();
  const routes: RouteTable = new RouteTable({
    loader: (id, current): Promise<RouteEntry | undefined> => loadRoute(store, runtime, gateway, config, id, current),
    onChange: (id) => sync.routeChanged(id),
    hearing: () => coordination.listening(),
  });
  const gateway: Gateway = new Gateway({
    config: config.gateway,
    routes,
    tokens,
    keys,
    portUsed: async () => false,
    connections: new ConnectionLimits(config.connections),
    onAgentGone: (id) => sandboxes.agentGone(id),
    wake: (id): Promise<void> => sandboxes.wake(id),
    touch: (id): void => sandboxes.touch(id),
    logRequest: (fields) => logger.info(fields, 'sandbox request'),
    log,
  });
  // The lifecycle, for what traffic does to a sandbox: wake it (auto_resume), count its use.
  const sandboxes: SandboxService = new SandboxService({
    store,
    runtime,
    tokens,
    templates: new TemplateService(store),
    layerPath: () => {
      throw new Error('the edge boots no sandbox');
    },
    gateway,
    routes,
    events,
    // A wake (auto_resume) is a lifecycle verb like control's: under the same locks as theirs.
    locks: new ReplicaMutex(coordination, 'sandbox'),
    createLimiter: new SlidingWindowLimiter(0, 60_000, 'sandbox creation rate limit'),
    quotas: new QuotaService(store, config.limits, new ReplicaMutex(coordination, 'org-quota')),
    agentReadyTimeoutMs: config.agentReadyTimeoutMs,
    tombstoneSeconds: config.tombstoneSeconds,
    nodeId: hostname(),
    log,
    cluster: { used: (id) => sync.used(id), interrupted: (id) => sync.interrupted(id), changed: (id) => sync.routeChanged(id) },
  });
  const sync = new ClusterSync({
    coordination,
    routes,
    events,
    activity: (id, at) => sandboxes.usedElsewhere(id, at),
    interrupt: (id) => gateway.interrupt(id),
    busy: () => gateway.busyIds(),
    log,
  });
  runtime.onNodeLost = (nodeId) => gateway.dropNode(nodeId);
  await gateway.listenHostMode();
  const port = config.gateway.hostModePort;
  log(`edge serves sandboxes at http://<id>.${config.gateway.domain}:${port} (listening on ${config.gateway.bindHost}:${port})`);
  // Its own address for probes: /health (the process answers), /ready (and its store does).
  const probes = createHttpServer((req, res) => {
    const answer = (code: number, body: Record<string, unknown>) => {
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.url === '/health') return answer(200, { status: 'ok', role: 'edge' });
    if (req.url === '/ready') {
      return void store.sandboxes.countByStatus().then(
        () => answer(200, { status: 'ready', role: 'edge' }),
        () => answer(503, { status: 'unavailable', role: 'edge', reason: 'the store does not answer' }),
      );
    }
    answer(404, { error: { code: 'ROUTE_NOT_FOUND', message: 'the edge answers /health and /ready here; sandboxes on the gateway port' } });
  });
  await new Promise<void>((resolve, reject) => probes.once('error', reject).listen(config.port, config.host, () => resolve()));
  log(`edge probes on http://${config.host}:${config.port}/health and /ready`);
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      sync.close();
      await new Promise((r) => probes.close(() => r(undefined)));
      await gateway.closeAll().catch((err: unknown) => log('closing sandbox connections failed', { error: String(err) }));
      await runtime.close().catch(() => undefined);
      await closeStore(store).catch((err: unknown) => log('closing the store failed', { error: String(err) }));
      log('edge shut down');
    })());
  return { close, port };
}

/**
 * `serve`: the whole service on this machine (its own runtime). `control`: the same API and gateway
 * for a cluster, over the nodes of the registry (ClusterRuntime) and the cluster's PostgreSQL; any
 * number of replicas (see docs/cluster.md).
 */
export async function serve(env: NodeJS.ProcessEnv = process.env, role: 'serve' | 'control' = 'serve'): Promise<void> {
  const config = loadConfig(env);
  scrubSecrets(env);
  logger = createLogger(config.logLevel, { format: config.logFormat === 'auto' ? undefined : config.logFormat });
  if (role === 'control' && (!config.databaseUrl || !config.node.signingKey)) {
    throw new Error(
      "sandboxd control needs the cluster: SANDBOXD_DATABASE_URL (PostgreSQL, the same as its nodes') and SANDBOXD_CLUSTER_SIGNING_KEY_FILE (the private key, cluster-signing.pem of `sandboxd cluster keygen`, whose public key the nodes hold)",
    );
  }
  await prepareMachine(config);
  log(`starting sandboxd ${config.version}${role === 'control' ? ' as control' : ''}; data directory ${config.dataDir}`);
  const keyFile = config.node.signingKeyFile;
  const keyMode = role === 'control' && keyFile ? statSync(keyFile).mode & 0o777 : 0;
  if (keyMode & 0o077) log(`${keyFile}: mode ${keyMode.toString(8)}: the cluster's signing key commands every node; make it root's alone (chmod 600)`);
  log('default limits of every organization (null: none; sandboxd orgs limits overrides them)', config.limits);

  const store = await openStore(config, log);
  const images = openImages(config, log);
  await images.cleanupStale();
  const layers = images.layers;
  let runtime: Runtime;
  /** Where build steps run: this machine's runtime (a cluster's control has one of its own for them). */
  let buildRuntime: Runtime | undefined;
  let layerServing: Services['layerServing'];
  let nodeRegistry: Services['nodeRegistry'];
  let publisher: LayerPublisher | undefined;
  if (role === 'control') {
    // The nodes fetch the layers they lack from this replica (its own layers directory).
    const signer = new ClusterSigner(config.node.signingKey!);
    // Nodes without database credentials register through here, each with its own credential.
    nodeRegistry = new NodeRegistryAuth(signer);
    const contents = new LayerContents(layers, log);
    layerServing = new LayerServer(contents, signer);
    publisher = new LayerPublisher({ contents, signer, controlUrl: config.layerTransfer.controlUrl, kv: store.kv });
    log(`cluster: nodes fetch the layers they lack from ${config.layerTransfer.controlUrl} (SANDBOXD_CONTROL_URL)`);
    const cluster = new ClusterRuntime({ store, auth: signer, ca: config.node.clusterCa ?? undefined, overcommit: config.node.overcommit, claimEveryMs: config.node.claimSeconds * 1000, layers: publisher, agentReadyTimeoutMs: config.agentReadyTimeoutMs, exportMaxBytes: config.layerTransfer.maxBytes, log });
    await cluster.setupHost();
    const nodes = cluster.known();
    log(`cluster: ${nodes.length} node(s) registered: ${nodes.map((n) => `${n.id} (${n.status})`).join(', ') || 'none yet'}`);
    runtime = cluster;
    // Template builds run their steps here, in throwaway containers of this machine (with the same
    // isolation as sandboxes): their layers land in this replica's layers directory, which the
    // nodes fetch from like the built-in templates'.
    buildRuntime = await openRuntime(config);
  } else {
    runtime = await openRuntime(config);
  }

  const templates = new TemplateService(store);
  const wanted = BUILTIN_TEMPLATES.filter((t) => !config.builtinTemplates || config.builtinTemplates.includes(t.name));
  log(`preparing built-in templates: ${wanted.map((t) => t.name).join(', ')} (first start builds them from Debian's packages)`);
  const built = await ensureBuiltinTemplates(layers, wanted, log);
  // The Python templates get pip/python under /usr/local/bin and system-wide pip installs, as clients expect.
  const pythonCompat = wanted.some((t) => t.language === 'python') ? await ensurePythonCompatLayer(layers, log) : undefined;
  const builtinLayers = new Set<string>();
  for (const t of wanted) {
    const stack = t.language === 'python' && pythonCompat ? [pythonCompat, built.get(t.name)!] : [built.get(t.name)!];
    await templates.registerBuiltin(t, stack);
    for (const l of stack) builtinLayers.add(l.id);
  }
  // Their digests are computed once (kept beside each layer) and before a node first asks for them.
  if (layerServing) {
    const contents = layerServing.contents;
    void (async () => {
      for (const id of builtinLayers) await contents.of(id).catch((err: unknown) => log(`the content digest of layer ${id.slice(0, 12)} could not be computed: ${String(err)}`));
    })();
  }

  const keys = new KeyService(store);
  const apiKey = await bootstrapKey(config, keys);
  // Several replicas of control (and edge) share the store: they sign with one key, read routes
  // made by others from it, and tell each other what changes (services/cluster-sync.ts).
  const coordination = role === 'control' ? store.coordination : undefined;
  const tokens = coordination ? await sharedTokens(store, config.tokenTtlSeconds) : new TokenService(join(config.dataDir, 'keys', 'jwt-ed25519.pem'), config.tokenTtlSeconds);
  let sync: ClusterSync | undefined;
  const routes: RouteTable = new RouteTable(
    coordination
      ? { loader: (id, current): Promise<RouteEntry | undefined> => loadRoute(store, runtime, gateway, config, id, current), onChange: (id) => sync?.routeChanged(id), hearing: () => coordination.listening() }
      : {},
  );
  const events = new EventBus();
  const connections = new ConnectionLimits(config.connections);
  let onAgentGone: (id: string) => void = () => undefined;
  // The pool is made below; the metrics read it when scraped.
  const poolRef: { pool?: WarmPool } = {};
  const metrics = new Metrics({
    sandboxesByStatus: () => store.sandboxes.countByStatus(),
    committed: async () => {
      const u = await store.sandboxes.usageAll();
      return { memoryMb: u.activeMemoryMb, diskGb: u.diskGb };
    },
    pool: () => {
      // In a cluster the ready sandboxes are the nodes' (their heartbeats say how many), and the
      // hits are the creates a node served from them.
      if (runtime instanceof ClusterRuntime) return { ready: runtime.warmReady(), booting: 0, hits: runtime.warmHits, misses: runtime.warmMisses };
      const keys = poolRef.pool?.stats() ?? [];
      return {
        ready: keys.reduce((n, k) => n + k.ready, 0),
        booting: keys.reduce((n, k) => n + k.booting, 0),
        hits: poolRef.pool?.hits ?? 0,
        misses: poolRef.pool?.misses ?? 0,
      };
    },
    dataDir: config.dataDir,
  });
  const gateway: Gateway = new Gateway({
    config: config.gateway,
    routes,
    tokens,
    keys,
    portUsed: (port) => store.sandboxes.gatewayPortUsed(port),
    connections,
    onAgentGone: (id) => onAgentGone(id),
    wake: (id): Promise<void> => sandboxes.wake(id),
    touch: (id): void => sandboxes.touch(id),
    observeAgent: (seconds, ok) => metrics.agentDuration.observe({ outcome: ok ? 'ok' : 'error' }, seconds),
    logRequest: (fields) => logger.info(fields, 'sandbox request'),
    log,
  });
  await gateway.listenHostMode();
  if (runtime instanceof ClusterRuntime) runtime.onNodeLost = (nodeId) => gateway.dropNode(nodeId);
  // One limit for all of a cluster's replicas, counted in the store; on one machine, in memory.
  const createLimiter: RateLimiter = coordination
    ? new SharedWindowLimiter(store, config.rateLimit.sandboxCreatesPerMinute, 60_000, 'sandbox creation rate limit')
    : new SlidingWindowLimiter(config.rateLimit.sandboxCreatesPerMinute, 60_000, 'sandbox creation rate limit');
  // In a cluster the nodes hold the ready sandboxes (services/node-pool.ts): one pool per node,
  // shared by every replica and reported to placement, rather than one per replica that a dead
  // replica leaves to the nodes' grace. Control's pool holds none (minimum 0, no budget): it only
  // hands the nodes' sandboxes to its creates in their order, as many asks at once as come (each
  // node bounds its own boots).
  const pool = new WarmPool(
    role === 'control'
      ? { runtime, log, minPerKey: 0, maxMemoryMb: 0, reserveSandboxes: 0, horizonSeconds: 0, shrinkAfterMs: 1000, bootConcurrency: 256 }
      : {
          runtime,
          log,
          minPerKey: config.warmPool.minPerKey,
          maxMemoryMb: config.warmPool.maxMemoryMb,
          reserveSandboxes: config.warmPool.reserve,
          horizonSeconds: config.warmPool.horizonSeconds,
          shrinkAfterMs: config.warmPool.shrinkAfterSeconds * 1000,
          bootConcurrency: config.warmPool.bootConcurrency,
        },
  );
  poolRef.pool = pool;
  // One replica at a time admits for an organization, and works on a sandbox; one machine locks in-process.
  const quotas = new QuotaService(store, config.limits, coordination ? new ReplicaMutex(coordination, 'org-quota') : new KeyedMutex(), log);
  // Snapshot and fork layers: always this data dir's own, so always collected when unused.
  const snapshotLayers = new FsLayerStore(join(config.dataDir, 'snapshot-layers'), { log });
  await snapshotLayers.cleanupStale();
  // In a cluster the nodes fetch a snapshot's layer from here, as they fetch a template's.
  layerServing?.contents.add(snapshotLayers);
  const locks = coordination ? new ReplicaMutex(coordination, 'sandbox') : new KeyedMutex();
  const snapshots = new SnapshotService({
    store,
    runtime,
    locks,
    quotas,
    templates,
    layers: snapshotLayers,
    sandbox: (orgId, id) => sandboxes.get(orgId, id),
    settle: () => sandboxes.settle(),
    pool,
    madeLayer: publisher ? (id) => publisher.announce(id) : undefined,
    // Replicas pin snapshot layers where every replica sees it (another may hold the layer).
    sharedPins: coordination ? store.rates : undefined,
    log,
  });
  const sandboxes: SandboxService = new SandboxService({
    pool,
    store,
    runtime,
    tokens,
    templates,
    layerPath: (id) => (snapshots.owns(id) ? snapshots.path(id) : layers.path(id)),
    gateway,
    routes,
    events,
    locks,
    snapshots,
    createLimiter,
    quotas,
    agentReadyTimeoutMs: config.agentReadyTimeoutMs,
    tombstoneSeconds: config.tombstoneSeconds,
    pausedRetentionSeconds: config.pausedRetentionSeconds,
    maxPreviewsPerOrg: config.maxPreviewsPerOrg,
    nodeId: hostname(),
    log,
    metrics,
    ...(coordination ? { cluster: { used: (id: string) => sync?.used(id), interrupted: (id: string) => sync?.interrupted(id), changed: (id: string) => sync?.routeChanged(id) } } : {}),
  });

  onAgentGone = (id) => sandboxes.agentGone(id);
  if (coordination) {
    sync = new ClusterSync({
      coordination,
      routes,
      events,
      activity: (id, at) => sandboxes.usedElsewhere(id, at),
      interrupt: (id) => gateway.interrupt(id),
      busy: () => gateway.busyIds(),
      log,
    });
  }
  // Replicas that start together reconcile one after the other.
  const rec = coordination ? await coordination.exclusive('reconcile', () => sandboxes.reconcile()) : await sandboxes.reconcile();
  log('reconciled sandboxes with the runtime', rec);
  const expired = await sandboxes.sweep();
  // What reconcile and the sweep deleted is off the host before the service answers.
  await sandboxes.settle();
  if (expired) log(`deleted ${expired} sandbox(es) whose deadline passed while the service was down`);
  // Layers a crash left unreferenced (a snapshot taken but not recorded, a fork cut short).
  await snapshots.collectSoon();
  let sweeping = false;
  const sweepTimer = setInterval(() => {
    if (sweeping) return;
    sweeping = true;
    // One replica at a time sweeps (deadlines, idle pauses, tombstones); the others skip the turn.
    (coordination ? coordination.tryExclusive('sweep', () => sandboxes.sweep()) : sandboxes.sweep())
      .catch((err: unknown) => log('sweep failed', { error: String(err) }))
      .finally(() => (sweeping = false));
  }, config.sweepIntervalMs);

  const builder = openBuilder({ dataDir: config.dataDir, runtime: buildRuntime ?? runtime, layers: images.layers, bases: images.bases, stepTimeoutMs: config.buildStepTimeoutMs });
  await builder.cleanupStale();
  // Replicas share the upload URLs' key and the uploaded bytes through the store; one machine keeps
  // both in its data directory, as it always did, and its build logs as files there.
  const uploadBlobs = coordination ? new StoreUploadBlobs(store, images.blobs) : localUploadBlobs(images.blobs);
  const uploadKey = coordination ? await sharedUploadKey(store) : uploadKeyFromFile(join(config.dataDir, 'keys', 'upload-hmac.key'));
  const uploads = new UploadService(store, uploadBlobs, uploadKey, config.publicUrl);
  // In a cluster, the replica that built a template says in the store that it holds its layers:
  // a create through another replica sends the node here for them (unless that one has them too).
  const engine: BuildEngine = publisher
    ? {
        run: async (input, hooks) => {
          const result = await builder.engine.run(input, hooks);
          for (const id of result.layerIds) await publisher.announce(id);
          return result;
        },
      }
    : builder.engine;
  const builds = new TemplateBuildService({
    store,
    uploads,
    engine,
    limits: config.buildLimits,
    log,
    quotas,
    metrics,
    logs: coordination ? storeBuildLogs(store) : fileBuildLogs(join(config.dataDir, 'build-logs')),
    ...(coordination ? { coordination } : {}),
  });
  if (uploadBlobs instanceof StoreUploadBlobs) {
    const purge = () =>
      uploadBlobs
        .purgeStale()
        .then((n) => n && log(`dropped ${n} upload(s) cut short in the store`))
        .catch((err: unknown) => log('cannot drop uploads cut short', { error: String(err) }));
    void purge();
    setInterval(() => void purge(), 3600_000).unref();
  }
  const interrupted = await builds.failInterrupted();
  if (interrupted) log(`${interrupted} template build(s) were interrupted by the restart and marked failed`);
  // Replicas: a build whose replica died is failed by another, without waiting for a restart.
  const buildSweep = coordination
    ? setInterval(() => {
        coordination
          .tryExclusive('build-sweep', () => builds.failInterrupted())
          .then((r) => r.ran && r.value && log(`${r.value} template build(s) of a control replica that stopped were marked failed`))
          .catch((err: unknown) => log('build sweep failed', { error: String(err) }));
      }, BUILD_HEARTBEAT_MS * 2)
    : undefined;
  // Layers are collected only when they live in this data dir: a shared layer dir (tests, several
  // daemons) holds layers this daemon knows nothing about.
  const ownsLayers = config.layersDir.startsWith(`${config.dataDir}/`);
  const gcLayers = async () => {
    if (!ownsLayers) return;
    // A deleted sandbox's overlay may still be coming down over the layers in question.
    await sandboxes.settle();
    const removed = await collectGarbage(store, images);
    if (removed.length) log(`removed ${removed.length} unreferenced layer(s)`);
    await snapshots.collectSoon();
  };
  const stopOomWatch = sandboxes.watchOom();
  const services: Services = { config, store, keys, tokens, sandboxes, templates, events, createLimiter, quotas, builds, uploads, gcLayers, pool, connections, metrics, snapshots, layerServing, nodeRegistry };
  const app = await buildApp({ services, logger });
  await app.listen({ host: config.host, port: config.port });
  const metricsServer = config.metrics.listen ? await serveMetrics(metrics, config.metrics.listen) : undefined;
  if (metricsServer) log(`Prometheus metrics on http://${config.metrics.listen!.host.includes(':') ? `[${config.metrics.listen!.host}]` : config.metrics.listen!.host}:${(metricsServer.address() as AddressInfo).port}/metrics (no credentials: keep it private)`);
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  process.stdout.write(
    [
      '',
      `sandboxd is listening on ${url}`,
      `  API key:   ${apiKey}`,
      `  try:       curl -s -H 'X-API-Key: ${apiKey}' ${url}/v1/templates`,
      `  console:   ${url}/console    API reference: ${url}/docs`,
      `  sandboxes: public_host on ${config.gateway.mode === 'port' ? `${config.gateway.publicHostname} ports ${config.gateway.portMin}-${config.gateway.portMax}` : `*.${config.gateway.domain}:${config.gateway.hostModePort}`}`,
      '',
    ].join('\n') + '\n',
  );

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: shutting down; sandboxes keep running`);
    clearInterval(sweepTimer);
    clearInterval(buildSweep);
    builds.close();
    stopOomWatch();
    sync?.close();
    // Each step is logged with its duration: a shutdown that takes long says where.
    const step = async (what: string, fn: () => Promise<unknown>) => {
      const t0 = performance.now();
      await fn().catch((err: unknown) => log(`shutdown: ${what} failed`, { error: String(err) }));
      const ms = Math.round(performance.now() - t0);
      if (ms >= 1000) log(`shutdown: ${what} took ${(ms / 1000).toFixed(1)} s`);
    };
    void (async () => {
      await step('closing the API', () => app.close());
      if (metricsServer) await step('closing the metrics address', () => new Promise((r) => metricsServer.close(() => r(undefined))));
      await step('closing sandbox connections', () => gateway.closeAll());
      await step('finishing deletes', () => sandboxes.settle());
      await step('emptying the warm pool', () => pool.close());
      await step('releasing runtime spares', () => runtime.close());
      if (buildRuntime) await step("releasing the build runtime's spares", () => buildRuntime!.close());
      await step('closing the store', () => closeStore(store));
      log('shut down');
      process.exit(0);
    })();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}
