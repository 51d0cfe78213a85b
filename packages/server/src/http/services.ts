import type { LayerServer } from '../services/layer-publisher.js';
import type { NodeRegistryAuth } from '../services/node-registry.js';
import type { NodeViews } from '../services/node-views.js';
import type { Config } from '../config/index.js';
import type { ConnectionLimits } from '../services/connections.js';
import type { Store } from '../store/types/index.js';
import type { EventBus } from '../services/events.js';
import type { KeyService } from '../services/keys.js';
import type { RateLimiter } from '../services/rate-limit.js';
import type { SandboxService } from '../services/sandboxes/index.js';
import type { TemplateService } from '../services/templates.js';
import type { TemplateBuildService } from '../services/template-builds/index.js';
import type { TokenService } from '../services/tokens.js';
import type { UploadService } from '../services/uploads.js';
import type { OrgStorage } from '../services/org-storage.js';
import type { QuotaService } from '../services/quotas.js';
import type { Metrics } from '../services/metrics.js';
import type { SnapshotService } from '../services/snapshots/index.js';
import type { VolumeService } from '../services/volumes.js';

/** Everything the HTTP layer may call. */
export interface Services {
  config: Config;
  store: Store;
  keys: KeyService;
  /** Sandbox and events tokens. */
  tokens: TokenService;
  sandboxes: SandboxService;
  templates: TemplateService;
  events: EventBus;
  createLimiter: RateLimiter;
  quotas: QuotaService;
  builds?: TemplateBuildService;
  /** The nodes, whose warm pools forget a deleted template (absent: no pool to tell). */
  placement?: { dropWarm(poolId: string): Promise<void> };
  uploads?: UploadService;
  /** Caps on open connections per client and per organization (absent: none, e.g. in unit tests). */
  connections?: ConnectionLimits;
  /** Removes layers no template or live sandbox references. */
  gcLayers?: () => Promise<void>;
  /** Prometheus metrics (absent: none kept, e.g. in unit tests). */
  metrics?: Metrics;
  /** Snapshots of sandboxes (absent: the snapshot routes answer 503). */
  snapshots?: SnapshotService;
  /** Control: its layers, served to the nodes that lack them (absent: the layer route answers 404). */
  layerServing?: LayerServer;
  /** Control: checks the registry credentials of nodes that register through it (absent: the registry routes answer 404). */
  nodeRegistry?: NodeRegistryAuth;
  /** The nodes as the admin API shows them (absent: the store's registry, as control's). */
  nodeViews?: NodeViews;
  /** What each organization stores (absent: GET /v1/account/limits shows no storage). */
  storage?: OrgStorage;
  /** Volumes (issue 32; absent: the volume routes answer 409). */
  volumes?: VolumeService;
}
