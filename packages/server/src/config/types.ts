import type { KeyObject } from 'node:crypto';
import type { GatewayConfig } from '../gateway/gateway.js';
import type { DiskReserve } from '../services/disk-room.js';
import type { OrgLimits } from '../services/limits.js';

/** Every setting of the daemon. Only config/ reads process.env. */
export interface Config {
  host: string;
  port: number;
  dataDir: string;
  /**
   * PostgreSQL to keep the state in (postgresql://user:password@host:5432/database), shared by
   * every replica; unset: SQLite in the data directory. It holds a password: never log it.
   */
  databaseUrl: string | undefined;
  /** Where image layers live (shareable between data dirs, e.g. by tests). */
  layersDir: string;
  bootstrapApiKey: string | undefined;
  /** The URL clients use to reach the API (printed, used for presigned upload URLs). */
  publicUrl: string;
  gateway: GatewayConfig;
  /** Preview ports one organization may hold (each takes a gateway port in port mode). */
  maxPreviewsPerOrg: number;
  /** Caps on open connections (services/connections.ts). */
  connections: { perClient: number; perOrg: number; total: number };
  /** Each organization's share of the API (services/api-share.ts): requests a second, burst, longest wait. */
  apiShare: { rate: number; burst: number; maxWaitMs: number };
  tokenTtlSeconds: number;
  /** Lifetime of events tokens (POST /v1/events/token): minutes, they travel in URLs. */
  eventsTokenTtlSeconds: number;
  rateLimit: { sandboxCreatesPerMinute: number };
  /**
   * Where creates get their sandboxes (node/warm-pool.ts). minPerKey: ready sandboxes kept per
   * template and network setting once asked for (0: none held, every create boots); the pool holds
   * ⌈creation rate × horizonSeconds⌉ when that is more, within maxMemoryMb; excess ready for
   * shrinkAfterSeconds is destroyed. bootConcurrency: boots at once (creates and refills).
   */
  warmPool: { minPerKey: number; maxMemoryMb: number; reserve: number; horizonSeconds: number; shrinkAfterSeconds: number; bootConcurrency: number };
  sweepIntervalMs: number;
  tombstoneSeconds: number;
  /** How long a sandbox that slept on its deadline (on_timeout "pause") stays paused before it is deleted. */
  pausedRetentionSeconds: number;
  agentReadyTimeoutMs: number;
  /** Built-in templates to build and serve (default: all). */
  builtinTemplates: string[] | undefined;
  /** Built-in layers above base built at once (SANDBOXD_BUILTIN_BUILD_CONCURRENCY). */
  builtinBuildConcurrency: number;
  /** The one package download cache of every build (SANDBOXD_APT_CACHE_DIR, default <data dir>/apt-cache). */
  aptCacheDir: string;
  agentBundlePath: string;
  /** Per-stream output each background process keeps in its sandbox's agent (SANDBOXD_PROCESS_OUTPUT_RING_KB). */
  processOutputRingKb: number;
  /**
   * Node-local runtime names: several daemons on one host (tests) need distinct ones. egressAllow:
   * IPv4 CIDRs sandboxes may reach although they lie in a blocked (private, reserved...) range.
   * allowAptSources: the host's own apt sources stay reachable (their port only) when they lie in one.
   */
  runtime: { cgroupParent: string; bridge: string; subnet: string; egressAllow: string[]; allowAptSources: boolean };
  /** OCI registry for `from` images Debian's packages cannot provide (null: none). */
  registry: { url: string | null; username: string | undefined; password: string | undefined };
  buildLimits: { perHour: number; perDay: number };
  /** Every organization's limits unless `sandboxd orgs limits` overrides them (null: no limit). */
  limits: OrgLimits;
  /**
   * Admission of writes against the data filesystem's free space (services/disk-room.ts): what is
   * kept free (SANDBOXD_DISK_RESERVE_GB, else SANDBOXD_DISK_RESERVE_PERCENT of the filesystem) and
   * whether writes are admitted at all (SANDBOXD_DISK_ADMISSION=off: sparse disks may oversubscribe),
   * and how far sandbox disks are thinly provisioned: each counts for 1/overcommit of its disk_gb
   * until it holds more (SANDBOXD_DISK_OVERCOMMIT; 1: the sum of disks never exceeds the room).
   */
  disk: { admission: boolean; reserve: DiskReserve; overcommit: number };
  /** Uploads not named or uploaded again for this long are dropped, then their blobs (0: kept for ever). */
  uploadRetentionMs: number;
  buildStepTimeoutMs: number;
  version: string;
  logLevel: string;
  /** json: one JSON object per line; text: readable lines; auto: text on a terminal, else JSON. */
  logFormat: 'json' | 'text' | 'auto';
  /**
   * Prometheus metrics: `listen` (host:port) serves /metrics there without credentials (keep it
   * private); `onApi`: /metrics on the API too, for keys with the metrics:read scope (default: only
   * when there is no address of its own).
   */
  metrics: { listen: { host: string; port: number } | null; onApi: boolean };
  /** A cluster's node role (`sandboxd node`): who it is, where its API listens; the roles' keys. */
  node: NodeConfig;
  /**
   * Layers moved from control to the nodes: where the nodes reach this control replica
   * (SANDBOXD_CONTROL_URL), and what a node takes (the largest layer, the longest fetch).
   */
  layerTransfer: { controlUrl: string; maxBytes: number; timeoutMs: number };
  /**
   * A node's layers directory as a cache (node/layer-cache.ts): the bytes of layers it keeps
   * (SANDBOXD_NODE_LAYER_CACHE_GB) and how long a layer no sandbox names stays
   * (SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS); 0: no limit. Layers in use are never evicted, nor one used
   * in the last `minAgeMs` (SANDBOXD_NODE_LAYER_MIN_AGE_SECONDS). `explicit`: the budget or the idle
   * time was set (a node then evicts even from a layers directory outside its data directory).
   */
  nodeLayerCache: { budgetBytes: number; maxIdleMs: number; minAgeMs: number; explicit: boolean };
}

export interface NodeConfig {
  /** [a-z0-9-], ≤ 63: this machine's name in the cluster (default: its host name). */
  id: string;
  /** Where the node API listens (control and edge call it; keep it on the cluster's private network). */
  listen: { host: string; port: number };
  /** How control reaches it (default: http://<listen host, or the host name for 0.0.0.0>:<port>). */
  url: string;
  /**
   * Control's Ed25519 private key, which signs its calls to the nodes (SANDBOXD_CLUSTER_SIGNING_KEY_FILE;
   * null: not configured, `sandboxd control` refuses to start; `sandboxd node` refuses to start with it).
   */
  signingKey: KeyObject | null;
  /** Where it was read from (control warns at start when others may read that file). */
  signingKeyFile: string | null;
  /**
   * The matching public key, with which a node checks control's calls (SANDBOXD_CLUSTER_VERIFY_KEY_FILE
   * or SANDBOXD_CLUSTER_VERIFY_KEY; null: not configured, `sandboxd node` refuses to start).
   */
  verifyKey: KeyObject | null;
  /** A node that has not heartbeat for this long is taken for lost (it heartbeats every third of it). */
  leaseSeconds: number;
  /** The most sandboxes placement puts on this node. */
  maxSandboxes: number;
  /** A sandbox this node holds that no row of the store and no control replica claims is destroyed after this long. */
  orphanGraceSeconds: number;
  /** Control: how often it claims on nodes what it holds unrecorded (a claim lasts four times this). */
  claimSeconds: number;
  /**
   * A node's registry credential (SANDBOXD_NODE_CREDENTIAL_FILE or SANDBOXD_NODE_CREDENTIAL): with
   * it, the node registers and heartbeats through control (`controlUrl`), with no database credentials.
   */
  credential: string | null;
  /** The file the credential was read from (SANDBOXD_NODE_CREDENTIAL_FILE): the node writes its renewed credential there. */
  credentialFile: string | null;
  /**
   * SANDBOXD_CONTROL_URL as given (none: not set), where a node with a credential reaches control:
   * one address (the replicas' service, or a balancer) or a comma-separated list of replicas.
   */
  controlUrls: string[];
  /** A node: its API over TLS (SANDBOXD_NODE_TLS_CERT_FILE and SANDBOXD_NODE_TLS_KEY_FILE, PEM); null: plain HTTP. */
  tls: { cert: string; key: string } | null;
  /** Control and edge: the CA bundle (PEM) that nodes' TLS certificates are checked against (SANDBOXD_CLUSTER_CA_FILE); null: the system's. */
  clusterCa: string | null;
  /**
   * Control's placement: how far past a node's cores and memory the limits of the sandboxes on it
   * may add up (sandboxes rarely use their whole limits; their cgroups still cap each one).
   */
  overcommit: { cpu: number; memory: number };
}
