import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Config } from '../config/index.js';
import { openBuilder } from '../builder/index.js';
import type { BuildEngine } from '../builder/types.js';
import { belowPrefix } from '../gateway/e2b.js';
import { Gateway } from '../gateway/gateway.js';
import { buildApp } from '../http/app.js';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { FsLayerStore } from '../images/layer-store.js';
import type { Logger } from '../logging.js';
import type { Placement } from '../placement/placement.js';
import type { Runtime } from '../runtime/types.js';
import type { VolumeHost } from '../runtime/volumes.js';
import { VolumeService } from '../services/volumes.js';
import { fileBuildLogs, storeBuildLogs } from '../services/build-logs.js';
import { ClusterSync } from '../services/cluster-sync.js';
import { ConnectionLimits } from '../services/connections.js';
import { EventBus } from '../services/events.js';
import { collectGarbage } from '../services/gc.js';
import type { Services } from '../http/services.js';
import { KeyService } from '../services/keys.js';
import { ApiShare } from '../services/api-share.js';
import type { LayerPublisher } from '../services/layer-publisher.js';
import { KeyedMutex, ReplicaMutex } from '../services/locks.js';
import { Metrics, serveMetrics } from '../services/metrics.js';
import { NodeViews, type InProcessNode } from '../services/node-views.js';
import { localDiskHeld, openDiskRooms, orgStorageFigures, uploadCollector } from './disk-rooms.js';
import { OrgStorage } from '../services/org-storage.js';

import { QuotaService } from '../services/quotas.js';
import { ReplicaPresence } from '../services/replica-presence.js';
import { SharedWindowLimiter, SlidingWindowLimiter, type RateLimiter } from '../services/rate-limit.js';
import { RouteTable } from '../gateway/routes.js';
import type { RouteEntry } from '../services/routes.js';
import { SandboxService } from '../services/sandboxes/index.js';
import { SnapshotService } from '../services/snapshots/index.js';
import { BUILD_HEARTBEAT_MS, TemplateBuildService } from '../services/template-builds/index.js';
import { TemplateService } from '../services/templates.js';
import { startBuiltinTemplates } from '../services/builtin-templates.js';
import { Revocations } from '../services/revocations.js';
import { TokenService } from '../services/tokens.js';
import { localUploadBlobs, StoreUploadBlobs } from '../services/upload-blobs.js';
import { sharedUploadKey, UploadService, uploadKeyFromFile } from '../services/uploads.js';
import type { Store } from '../store/types/index.js';
import { announce } from './banner.js';
import { bootstrapKey, closeStore, loadRoute, sharedTokens, type Log, type openImages } from './shared.js';

/** How often unreferenced layers and blobs are collected. */
const COLLECT_INTERVAL_MS = 10 * 60_000;

/** What a role that serves the API hands the control plane: its store, its images, its nodes, and where builds run. */
export interface ControlPlaneParts {
  config: Config;
  log: Log;
  logger: Logger;
  store: Store;
  images: ReturnType<typeof openImages>;
  /** The nodes: this machine's one, or the cluster's registered ones. */
  placement: Placement;
  /** Where template build steps run: this machine's runtime (its throwaway containers). */
  buildRuntime: Runtime;
  /** Whether the build runtime is this role's own to close (not its node's, which closes it). */
  ownsBuildRuntime: boolean;
  /** Replicas of control share the store: they coordinate through it (locks, signing keys, routes, rate windows). */
  replicated: boolean;
  /** The all-in-one: this machine's volumes (runtime/volumes.ts); a cluster's control has none yet (docs/cluster.md). */
  volumeHost?: VolumeHost;
  /** The all-in-one: its machine, the node it serves in process (the admin API shows it; a cluster's nodes are the registry's). */
  inProcessNode?: InProcessNode;
  /** Control: its layers served to the nodes that lack them, and told to the other replicas when it makes one. */
  cluster?: { layerServing: NonNullable<Services['layerServing']>; nodeRegistry: NonNullable<Services['nodeRegistry']>; publisher: LayerPublisher };
}

/**
 * The API, the gateway and the services over a placement of nodes, served until SIGTERM or
 * SIGINT: the all-in-one daemon (one machine) and each replica of a cluster's control are this,
 * with other nodes. Sandboxes keep running when it stops.
 */
export async function runControlPlane(p: ControlPlaneParts): Promise<void> {
  const { config, log, logger, store, images, placement } = p;
  const layers = images.layers;
  const templates = new TemplateService(store);
  const wanted = BUILTIN_TEMPLATES.filter((t) => !config.builtinTemplates || config.builtinTemplates.includes(t.name));
  log(`preparing built-in templates: ${wanted.map((t) => t.name).join(', ')} (a first start builds them from Debian's packages, behind the service)`);
  // In a cluster, a template's layer digests are computed once (kept beside each layer), as soon
  // as it is ready and before a node first asks for them.
  const digests = p.cluster?.layerServing.contents;
  let digesting = Promise.resolve();
  // Shutdown stops the built-ins' builds: their build containers end with the daemon (they would
  // outlive it, holding mounts in the data directory); a build not finished starts again at the next start.
  const builtinStop = new AbortController();
  const builtins = await startBuiltinTemplates({
    signal: builtinStop.signal,
    wanted,
    layers,
    templates,
    runtime: p.buildRuntime,
    aptCacheDir: config.aptCacheDir,
    concurrency: config.builtinBuildConcurrency,
    log,
    onLayers: digests
      ? (ids) => {
          digesting = digesting.then(async () => {
            for (const id of ids) await digests.of(id).catch((err: unknown) => log(`the content digest of layer ${id.slice(0, 12)} could not be computed: ${String(err)}`));
          });
        }
      : undefined,
  });
  void builtins.done.catch((err: unknown) => log('built-in templates: the build stopped', { error: String(err) }));

  const keys = new KeyService(store, new ApiShare(config.apiShare));
  const apiKey = await bootstrapKey(config, keys);
  // Replicas of control (and edges) share the store: they sign with one key, read routes made by
  // others from it, and tell each other what changes (services/cluster-sync.ts).
  const coordination = p.replicated ? store.coordination : undefined;
  const tokens = coordination ? await sharedTokens(store, config.tokenTtlSeconds) : new TokenService(join(config.dataDir, 'keys', 'jwt-ed25519.pem'), config.tokenTtlSeconds);
  // The tokens a revoked key made (sandbox tokens, preview links and sessions) stop working: revoked
  // here, by another replica, or on the host.
  const revocations = new Revocations(store, tokens, log);
  await revocations.start();
  keys.whenRevoked((id) => revocations.now(id));
  let sync: ClusterSync | undefined;
  const routes: RouteTable = new RouteTable(
    coordination
      ? { loader: (id, current): Promise<RouteEntry | undefined> => loadRoute(store, placement, gateway, config, id, current), onChange: (id) => sync?.routeChanged(id), hearing: () => coordination.listening() }
      : {},
  );
  const events = new EventBus();
  const connections = new ConnectionLimits(config.connections);
  let onAgentGone: (id: string) => void = () => undefined;
  // Writes that grow the disk are admitted against its free space (the sandboxes' disks only when
  // they are this machine's: the all-in-one).
  const disk = openDiskRooms(config, store, !!p.inProcessNode);
  const metrics = new Metrics({
    sandboxesByStatus: () => store.sandboxes.countByStatus(),
    committed: async () => {
      const u = await store.sandboxes.usageAll();
      return { memoryMb: u.activeMemoryMb, diskGb: u.diskGb };
    },
    // The nodes' ready sandboxes, and the creates a node served from them or booted for.
    pool: () => placement.warmStats(),
    dataDir: config.dataDir,
    diskRoom: () => (disk ? disk.data.view() : Promise.reject(new Error('no disk admission'))),
    orgStorage: () => orgStorageFigures(store, storage),
  });
  const gateway: Gateway = new Gateway({
    config: config.gateway,
    routes,
    tokens,
    keys,
    portUsed: (port) => store.sandboxes.gatewayPortUsed(port),
    connections,
    onAgentGone: (id) => onAgentGone(id),
    // E2B's signed file URLs are checked against the token the control plane keeps in the sandbox's row.
    e2bToken: async (id) => (await store.sandboxes.byId(id))?.e2bAccessToken,
    wake: (id): Promise<void> => sandboxes.wake(id),
    touch: (id): void => sandboxes.touch(id),
    observeAgent: (seconds, ok) => metrics.agentDuration.observe({ outcome: ok ? 'ok' : 'error' }, seconds),
    logRequest: (fields) => logger.info(fields, 'sandbox request'),
    log,
  });
  // A node lost: the connections to its sandboxes are dead, not slow.
  placement.onNodeLost((nodeId) => gateway.dropNode(nodeId));
  await gateway.listenHostMode();
  // One limit for all of a cluster's replicas, counted in the store; on one machine, in memory.
  const createLimiter: RateLimiter = coordination
    ? new SharedWindowLimiter(store, config.rateLimit.sandboxCreatesPerMinute, 60_000, 'sandbox creation rate limit')
    : new SlidingWindowLimiter(config.rateLimit.sandboxCreatesPerMinute, 60_000, 'sandbox creation rate limit');
  // One replica at a time admits for an organization, and works on a sandbox; one machine locks in-process.
  // max_total_disk_gb counts what an organization stores (snapshots, templates, uploads) beside its sandboxes' disk_gb.
  const quotas = new QuotaService(store, config.limits, coordination ? new ReplicaMutex(coordination, 'org-quota') : new KeyedMutex(), log, (org, fresh): Promise<number> => storage.storedBytes(org, fresh ? 0 : 1000));
  // Snapshot and fork layers: always this data dir's own, so always collected when unused.
  const snapshotLayers = new FsLayerStore(join(config.dataDir, 'snapshot-layers'), { log });
  await snapshotLayers.cleanupStale();
  // In a cluster the nodes fetch a snapshot's layer from here, as they fetch a template's.
  p.cluster?.layerServing.contents.add(snapshotLayers);
  const publisher = p.cluster?.publisher;
  const locks = coordination ? new ReplicaMutex(coordination, 'sandbox') : new KeyedMutex();
  const snapshots = new SnapshotService({
    store,
    placement,
    locks,
    quotas,
    templates,
    layers: snapshotLayers,
    sandbox: (orgId, id) => sandboxes.get(orgId, id),
    settle: () => sandboxes.settle(),
    madeLayer: publisher ? (id) => publisher.announce(id) : undefined,
    // Replicas pin snapshot layers where every replica sees it (another may hold the layer).
    sharedPins: coordination ? store.rates : undefined,
    log,
    ...(disk ? { disk: disk.snapshots } : {}),
  });
  const storage: OrgStorage = new OrgStorage({
    store,
    snapshotsBytes: (org): Promise<number> => snapshots.storageUsed(org),
    layerBytes: async (id) => (await layers.meta(id))?.sizeBytes,
    imageLayers: () => images.images.referencedLayers(),
    ...(p.inProcessNode ? { diskHeld: localDiskHeld(config.dataDir) } : {}),
  });
  const volumes: VolumeService = new VolumeService({
    store,
    host: p.volumeHost,
    nodeId: p.inProcessNode?.id ?? '',
    quotas,
    ...(disk?.claimVolume ? { claimDisk: disk.claimVolume } : {}),
    deleteSandbox: async (orgId, id) => void (await sandboxes.delete(orgId, id, 'volume_deleted')),
    settle: () => sandboxes.settle(),
    dropWarm: (poolId) => placement.dropWarm(poolId),
    log,
  });
  await volumes.remountAll();
  const sandboxes: SandboxService = new SandboxService({
    volumes,
    store,
    placement,
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
    log,
    metrics,
    ...(disk?.claimSandbox ? { claimDisk: disk.claimSandbox } : {}),
    ...(coordination ? { replicas: { shared: true, used: (id: string) => sync?.used(id), interrupted: (id: string) => sync?.interrupted(id), changed: (id: string) => sync?.routeChanged(id) } } : {}),
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

  const builder = openBuilder({ dataDir: config.dataDir, runtime: p.buildRuntime, layers: images.layers, bases: images.bases, stepTimeoutMs: config.buildStepTimeoutMs });
  await builder.cleanupStale();
  // Replicas share the upload URLs' key and the uploaded bytes through the store; one machine keeps
  // both in its data directory, as it always did, and its build logs as files there.
  const uploadBlobs = coordination ? new StoreUploadBlobs(store, images.blobs) : localUploadBlobs(images.blobs);
  const uploadKey = coordination ? await sharedUploadKey(store) : uploadKeyFromFile(join(config.dataDir, 'keys', 'upload-hmac.key'));
  const uploads = new UploadService(store, uploadBlobs, uploadKey, config.publicUrl, {
    claimQuota: (org, bytes) => quotas.admit(org, { sandboxes: 0, memoryMb: 0, diskGb: 0, storedBytes: bytes }, async () => storage.holdUpload(org, bytes)),
    // Replicas keep uploads in the store, not in this data directory.
    ...(disk && !coordination ? { claimDisk: disk.claimUpload } : {}),
  });
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
    ...(disk ? { claimDisk: disk.claimBuild, claimStepLayer: disk.claimStepLayer } : {}),
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
  // Uploads past their retention, then blobs no upload references (services/blob-gc.ts).
  const gcUploads = uploadCollector(config, store, images, !!coordination, log);
  const gcLayers = async () => {
    await gcUploads().catch((err: unknown) => log('collecting uploads failed', { error: String(err) }));
    if (!ownsLayers) return;
    // A deleted sandbox's overlay may still be coming down over the layers in question.
    await sandboxes.settle();
    const removed = await collectGarbage(store, images);
    // The build cache's entries for those layers point at nothing now.
    if (removed.length) log(`removed ${removed.length} unreferenced layer(s) and ${await builder.pruneCache()} build cache entr(ies) of them`);
    await snapshots.collectSoon();
  };
  // What deletes, failed builds and rebuilds left unreferenced (layers, the build cache's, blobs)
  // is collected on its own, not only when a template or an organization is deleted.
  const collectTimer = setInterval(() => {
    const run = () => gcLayers().catch((err: unknown) => log('collection failed', { error: String(err) }));
    void (coordination ? coordination.tryExclusive('collect', run) : run());
  }, COLLECT_INTERVAL_MS);
  collectTimer.unref();
  const stopOomWatch = sandboxes.watchOom();
  const services: Services = {
    config,
    store,
    keys,
    tokens,
    sandboxes,
    templates,
    events,
    createLimiter,
    quotas,
    builds,
    uploads,
    gcLayers,
    placement,
    connections,
    metrics,
    snapshots,
    layerServing: p.cluster?.layerServing,
    nodeRegistry: p.cluster?.nodeRegistry,
    nodeViews: new NodeViews(store, p.inProcessNode),
    storage,
    volumes,
  };
  // E2B's data plane (E2B_SANDBOX_URL=http://<api>/e2b/sandbox): through the gateway, before Fastify reads a body.
  const e2b = { match: (url: string | undefined) => belowPrefix(url), request: gateway.serveE2b.bind(gateway) };
  const app = await buildApp({ services, logger, raw: e2b });
  await app.listen({ host: config.host, port: config.port });
  const metricsServer = config.metrics.listen ? await serveMetrics(metrics, config.metrics.listen) : undefined;
  if (metricsServer) log(`Prometheus metrics on http://${config.metrics.listen!.host.includes(':') ? `[${config.metrics.listen!.host}]` : config.metrics.listen!.host}:${(metricsServer.address() as AddressInfo).port}/metrics (no credentials: keep it private)`);
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  // This process in the store's record of what serves from it (`sandboxd cluster status`).
  const presence = new ReplicaPresence({ replicas: store.replicas, role: p.replicated ? 'control' : 'serve', url, version: config.version, log });
  await presence.start();
  announce(config, { url, apiKey }, log, process.stdout, { banner: !p.replicated });

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: shutting down; sandboxes keep running`);
    clearInterval(sweepTimer);
    clearInterval(collectTimer);
    clearInterval(buildSweep);
    builds.close();
    builtinStop.abort();
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
      // Requests under way get a few seconds; then long-lived streams (events, build logs, a
      // process's attach, E2B's Connect streams relayed through /e2b/sandbox) are cut: their
      // clients reconnect to the next daemon, and the sandboxes behind them keep running.
      await step('closing the API', () => {
        const force = setTimeout(() => app.server.closeAllConnections(), 5000);
        return app.close().finally(() => clearTimeout(force));
      });
      if (metricsServer) await step('closing the metrics address', () => new Promise((r) => metricsServer.close(() => r(undefined))));
      await step('closing sandbox connections', () => gateway.closeAll());
      await step('finishing deletes', () => sandboxes.settle());
      await step('stopping the built-in templates\' builds', () => Promise.race([builtins.done.catch(() => undefined), new Promise((r) => setTimeout(r, 30_000).unref())]));
      // This machine's node empties its warm pool and lets go of its runtime's spares; a cluster's
      // nodes keep theirs (only the connections to them close).
      await step('letting go of the nodes', () => placement.close());
      if (p.ownsBuildRuntime) await step("releasing the build runtime's spares", () => p.buildRuntime.close());
      await step('saying in the store that this process stopped', () => presence.stop());
      await step('closing the store', () => closeStore(store));
      log('shut down');
      process.exit(0);
    })();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}
