import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ServiceError, type CreateSandboxBody } from '@sandboxd/protocol';
import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { FsLayerStore } from '../images/layer-store.js';
import type { LocalNode } from '../node/local-node.js';
import type { Placement } from '../placement/placement.js';
import { EventBus, type SandboxEventMessage } from '../services/events.js';
import { KeyService } from '../services/keys.js';
import { LIMIT_NAMES, type OrgLimits } from '../services/limits.js';
import { KeyedMutex } from '../services/locks.js';
import { QuotaService } from '../services/quotas.js';
import { SlidingWindowLimiter } from '../services/rate-limit.js';
import { RouteTable } from '../gateway/routes.js';
import { SandboxService, type GatewayControl, type Replicas, type SandboxServiceDeps } from '../services/sandboxes/index.js';
import type { Created } from '../services/sandboxes/create.js';
import { SnapshotService } from '../services/snapshots/index.js';
import { TemplateService } from '../services/templates.js';
import { TokenService } from '../services/tokens.js';
import { SqliteStore } from '../store/sqlite.js';
import type { SandboxRow } from '../store/types/index.js';
import { fakeNode, fixedPlacement } from './fake-node.js';
import type { FakeRuntime } from './fake-runtime.js';

/**
 * TEST DOUBLE. The gateway as the sandbox service drives it, in port mode, with nothing listening:
 * it hands out port numbers, and records what it was asked (opens, closes, interrupts, previews)
 * so that a test can say what the service did to it. `busyIds` are sandboxes with a request in
 * flight; `taken` are ports another program holds (opening one fails, as a real listen would).
 */
export class StubGateway implements GatewayControl {
  readonly opened = new Map<string, number>();
  readonly closed: string[] = [];
  readonly interrupted: string[] = [];
  readonly busyIds = new Set<string>();
  readonly taken = new Set<number>();
  /** Open previews by `<sandbox id>:<port>`. */
  readonly previews = new Map<string, { isPublic: boolean; gatewayPort: number }>();
  /** Set: every open fails with it. */
  failOpen: Error | undefined;
  private nextPort = 40_000;

  async open(sandboxId: string, port: number | null): Promise<number> {
    if (this.failOpen) throw this.failOpen;
    const p = this.claim(port);
    this.opened.set(sandboxId, p);
    return p;
  }

  async close(sandboxId: string): Promise<void> {
    this.closed.push(sandboxId);
    this.opened.delete(sandboxId);
    for (const k of [...this.previews.keys()]) if (k.startsWith(`${sandboxId}:`)) this.previews.delete(k);
  }

  publicHost(_sandboxId: string, port: number | null): string {
    return `http://127.0.0.1:${port}`;
  }

  busy(sandboxId: string): boolean {
    return this.busyIds.has(sandboxId);
  }

  interrupt(sandboxId: string): void {
    this.interrupted.push(sandboxId);
  }

  async openPreview(sandboxId: string, port: number, isPublic: boolean, gatewayPort: number | null): Promise<number> {
    const existing = this.previews.get(`${sandboxId}:${port}`);
    const p = existing?.gatewayPort ?? this.claim(gatewayPort);
    this.previews.set(`${sandboxId}:${port}`, { isPublic, gatewayPort: p });
    return p;
  }

  previewUrl(_sandboxId: string, _port: number, gatewayPort: number | null): string {
    return `http://127.0.0.1:${gatewayPort}`;
  }

  private claim(port: number | null): number {
    if (port !== null && this.taken.has(port)) throw Object.assign(new Error(`listen EADDRINUSE: port ${port}`), { code: 'EADDRINUSE' });
    if (port !== null) return port;
    while (this.taken.has(this.nextPort)) this.nextPort++;
    return this.nextPort++;
  }
}

export interface SandboxHarness {
  sandboxes: SandboxService;
  store: SqliteStore;
  /** The first node and its runtime (the only ones unless `nodeIds` named more). */
  node: LocalNode;
  runtime: FakeRuntime;
  nodes: Array<{ node: LocalNode; runtime: FakeRuntime }>;
  placement: Placement;
  gateway: StubGateway;
  routes: RouteTable;
  /** The sandboxes' locks (a test holds one to be a verb under way). */
  locks: KeyedMutex;
  tokens: TokenService;
  quotas: QuotaService;
  /** Every event the service published, in order. */
  events: SandboxEventMessage[];
  /** Two organizations' ids: a sandbox of one is another's 403. */
  orgs: { a: string; b: string };
  /** A sandbox of the built-in `base` template, created through the service. */
  create(orgId: string, body?: Omit<CreateSandboxBody, 'template_name'>): Promise<Created>;
  /** The stored row of a sandbox (throws when there is none). */
  row(id: string): Promise<SandboxRow>;
  /** With `snapshots`: where snapshot, fork and move layers are made. */
  snapshotLayers?: FsLayerStore;
  close(): Promise<void>;
}

export interface SandboxHarnessOptions extends Partial<Pick<SandboxServiceDeps, 'maxPreviewsPerOrg' | 'pausedRetentionSeconds' | 'tombstoneSeconds' | 'agentReadyTimeoutMs'>> {
  replicas?: Replicas;
  /** The nodes placement holds (default one, `fake-node`), each on a FakeRuntime of its own. */
  nodeIds?: string[];
  /** With a snapshot service (its layers in a store of the harness's own: `snapshotLayers`). */
  snapshots?: boolean;
}

/**
 * The sandbox service as the all-in-one daemon composes it (roles/), minus HTTP and root: an
 * in-memory SQLite store, placement over fake nodes (the real LocalNode on the FakeRuntime, whose
 * agents answer on real unix sockets), the StubGateway, no limits (set them with
 * store.orgs.setLimits), no snapshots unless asked for, and the built-in `base` template on an
 * empty layer.
 */
export async function buildSandboxHarness(o: SandboxHarnessOptions = {}): Promise<SandboxHarness> {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-svc-'));
  const store = SqliteStore.open(':memory:');
  const nodes = (o.nodeIds ?? ['fake-node']).map((id, i) => fakeNode({ id, socketDir: join(dir, `s${i}`), agentReadyTimeoutMs: o.agentReadyTimeoutMs ?? 2000 }));
  for (const n of nodes) await n.runtime.setupHost();
  const placement = fixedPlacement(store, ...nodes.map((n) => n.node));
  await placement.start();
  const layersDir = join(dir, 'layers');
  const templates = new TemplateService(store);
  const layer = { id: 'fake-base-layer', path: join(layersDir, 'fake-base-layer') };
  await mkdir(layer.path, { recursive: true });
  await templates.registerBuiltin(BUILTIN_TEMPLATES.find((t) => t.name === 'base')!, [layer]);
  const keys = new KeyService(store);
  const tokens = new TokenService({ pem: TokenService.newKeyPem() }, 3600);
  const routes = new RouteTable();
  const eventBus = new EventBus();
  const events: SandboxEventMessage[] = [];
  eventBus.subscribe((m) => events.push(m));
  const gateway = new StubGateway();
  const locks = new KeyedMutex();
  const noLimits = Object.fromEntries(LIMIT_NAMES.map((n) => [n, null])) as OrgLimits;
  const quotas = new QuotaService(store, noLimits);
  const snapshotLayers = o.snapshots ? new FsLayerStore(join(dir, 'snapshot-layers')) : undefined;
  const snapshots = snapshotLayers
    ? new SnapshotService({ store, placement, locks, quotas, templates, layers: snapshotLayers, sandbox: (orgId, id) => sandboxes.get(orgId, id), settle: () => sandboxes.settle(), log: () => undefined })
    : undefined;
  const sandboxes: SandboxService = new SandboxService({
    store,
    placement,
    tokens,
    templates,
    layerPath: (id) => (snapshots?.owns(id) ? snapshots.path(id) : join(layersDir, id)),
    gateway,
    snapshots,
    routes,
    events: eventBus,
    locks,
    createLimiter: new SlidingWindowLimiter(1000, 60_000, 'sandbox creation rate limit'),
    quotas,
    agentReadyTimeoutMs: o.agentReadyTimeoutMs ?? 2000,
    tombstoneSeconds: o.tombstoneSeconds ?? 86_400,
    pausedRetentionSeconds: o.pausedRetentionSeconds,
    maxPreviewsPerOrg: o.maxPreviewsPerOrg,
    replicas: o.replicas,
    log: () => undefined,
  });
  const orgs = { a: (await keys.ensureOrg('org-a')).id, b: (await keys.ensureOrg('org-b')).id };
  return {
    sandboxes,
    store,
    node: nodes[0]!.node,
    runtime: nodes[0]!.runtime,
    nodes,
    placement,
    gateway,
    routes,
    locks,
    tokens,
    quotas,
    events,
    orgs,
    create: (orgId, body = {}) => sandboxes.create(orgId, { template_name: 'base', ...body }),
    row: async (id) => {
      const row = await store.sandboxes.byId(id);
      if (!row) throw new Error(`no row for sandbox ${id}`);
      return row;
    },
    snapshotLayers,
    close: async () => {
      await sandboxes.settle();
      // The deletes' teardowns start collections of unused layers: they end before the files go.
      await snapshots?.collectSoon();
      await placement.close();
      for (const n of nodes) await n.runtime.dispose();
      store.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Asserts that `p` rejects with a ServiceError of `code` whose extra fields include `extra`. */
export async function rejectsWith(p: Promise<unknown>, code: string, extra: Record<string, unknown> = {}): Promise<ServiceError> {
  let caught: unknown;
  try {
    await p;
  } catch (err) {
    caught = err;
  }
  if (!(caught instanceof ServiceError)) throw new Error(`expected a ServiceError ${code}, got ${caught === undefined ? 'no error' : String(caught)}`);
  if (caught.code !== code) throw new Error(`expected ${code}, got ${caught.code}: ${caught.message}`);
  for (const [k, v] of Object.entries(extra)) {
    if (JSON.stringify(caught.extra[k]) !== JSON.stringify(v)) throw new Error(`${code}: expected ${k} ${JSON.stringify(v)}, got ${JSON.stringify(caught.extra[k])}`);
  }
  return caught;
}

/** Polls `check` every 20 ms until it holds (or throws after `timeoutMs`). */
export async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  for (const end = Date.now() + timeoutMs; !(await check()); ) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
