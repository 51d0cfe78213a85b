import { createServer as createHttpServer } from 'node:http';
import type { Config } from '../config/index.js';
import { Gateway } from '../gateway/gateway.js';
import type { Logger } from '../logging.js';
import { Placement } from '../placement/placement.js';
import { ClusterSigner } from '../runtime/cluster-auth.js';
import { ConnectionLimits } from '../services/connections.js';
import { ClusterSync } from '../services/cluster-sync.js';
import { EventBus } from '../services/events.js';
import { Revocations } from '../services/revocations.js';
import { KeyService } from '../services/keys.js';
import { ReplicaMutex } from '../services/locks.js';
import { QuotaService } from '../services/quotas.js';
import { ReplicaPresence } from '../services/replica-presence.js';
import { SlidingWindowLimiter } from '../services/rate-limit.js';
import { RouteTable } from '../gateway/routes.js';
import type { RouteEntry } from '../services/routes.js';
import { SandboxService } from '../services/sandboxes/index.js';
import { TemplateService } from '../services/templates.js';
import { clusterNodes } from './cluster-nodes.js';
import { closeStore, loadRoute, openStore, sharedTokens, type Log } from './shared.js';

/**
 * `sandboxd edge`: serves every sandbox's public_host and preview URLs (host mode), for a cluster.
 * Stateless: it finds each sandbox in the store and reaches it through the node that holds it; any
 * number of replicas run behind one wildcard name. A request to a sleeping sandbox that wakes on
 * traffic resumes it from here. It runs no sandbox, needs no root and keeps no data directory.
 */
export async function runEdge(config: Config, log: Log, logger: Logger): Promise<{ close: () => Promise<void>; port: number }> {
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
  // The edge creates nothing: it claims nothing on the nodes.
  const nodes = clusterNodes(config, store, new ClusterSigner(config.node.signingKey), log);
  const placement = new Placement({ nodes, usage: () => store.sandboxes.usageByNode(), log });
  await placement.start();
  const tokens = await sharedTokens(store, config.tokenTtlSeconds);
  const keys = new KeyService(store);
  // The tokens a revoked key made stop working here too.
  const revocations = new Revocations(store, tokens, log);
  await revocations.start();
  keys.whenRevoked((id) => revocations.now(id));
  const events = new EventBus();
  const routes: RouteTable = new RouteTable({
    loader: (id, current): Promise<RouteEntry | undefined> => loadRoute(store, placement, gateway, config, id, current),
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
    // E2B's signed file URLs are checked against the token the control plane keeps in the sandbox's row.
    e2bToken: async (id) => (await store.sandboxes.byId(id))?.e2bAccessToken,
    wake: (id): Promise<void> => sandboxes.wake(id),
    touch: (id): void => sandboxes.touch(id),
    logRequest: (fields) => logger.info(fields, 'sandbox request'),
    log,
  });
  // The lifecycle, for what traffic does to a sandbox: wake it (auto_resume), count its use.
  const sandboxes: SandboxService = new SandboxService({
    store,
    placement,
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
    log,
    replicas: { shared: true, used: (id) => sync.used(id), interrupted: (id) => sync.interrupted(id), changed: (id) => sync.routeChanged(id) },
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
  // A node lost: the connections to its sandboxes are dead, not slow.
  placement.onNodeLost((nodeId) => gateway.dropNode(nodeId));
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
  const probesUrl = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${config.port}`;
  log(`edge probes on ${probesUrl}/health and /ready`);
  // This edge in the store's record of what serves from it (`sandboxd cluster status`).
  const presence = new ReplicaPresence({ replicas: store.replicas, role: 'edge', url: probesUrl, version: config.version, log });
  await presence.start();
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      sync.close();
      await new Promise((r) => probes.close(() => r(undefined)));
      await gateway.closeAll().catch((err: unknown) => log('closing sandbox connections failed', { error: String(err) }));
      await placement.close().catch(() => undefined);
      await presence.stop().catch((err: unknown) => log('saying in the store that this edge stopped failed', { error: String(err) }));
      await closeStore(store).catch((err: unknown) => log('closing the store failed', { error: String(err) }));
      log('edge shut down');
    })());
  return { close, port };
}
