import { LOG_LEVELS } from './logging.js';
import { existsSync, readFileSync, statfsSync } from 'node:fs';
import type { DiskReserve } from './services/disk-room.js';
import type { KeyObject } from 'node:crypto';
import { availableParallelism, hostname, totalmem } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LIMIT_MINIMUMS, type LimitName, type OrgLimits } from './services/limits.js';
import { signingKeyFromPem, verifyKeyFromPem } from './runtime/cluster-auth.js';
import { normalizeCidr } from './runtime/net.js';
import { budgetSandboxes, READY_SANDBOX_COST_MB, reserveForMemory } from './node/pool-sizing.js';
import { describeUrl, isPostgresUrl } from './store/postgres-url.js';
import type { GatewayConfig } from './gateway/gateway.js';

/** Every setting of the daemon. Only this file reads process.env. */
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

export class ConfigError extends Error {}

function int(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min || v > max) throw new ConfigError(`${name} must be an integer in [${min}, ${max}], got "${raw}"`);
  return v;
}

/** A ratio of at least 1 (overcommit). */
function ratio(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 1 || v > 1000) throw new ConfigError(`${name} must be a number from 1 to 1000, got "${raw}"`);
  return v;
}

/** What the default limits are derived from. */
export interface HostFacts {
  cpus: number;
  memoryMb: number;
  /** Size of the filesystem that holds the data directory. */
  diskGb: number;
}

export function hostFacts(dataDir: string): HostFacts {
  let dir = dataDir;
  while (!existsSync(dir) && dirname(dir) !== dir) dir = dirname(dir);
  const fs = statfsSync(dir);
  return {
    cpus: availableParallelism(),
    memoryMb: Math.floor(totalmem() / 2 ** 20),
    diskGb: Math.floor((fs.blocks * fs.bsize) / 2 ** 30),
  };
}

/**
 * Default limits: a sandbox may have up to the host's cores and half its memory and data disk (at
 * least what the built-in code-interpreter needs: 2 vCPU, 2 GB, 10 GB); an organization may hold
 * 100 sandboxes and up to the host's memory and data disk in total (so one organization alone can
 * never commit more than the host has); a sandbox lives an hour unless asked otherwise, a day at
 * most per request (it can be extended). 0 in a variable means no limit.
 */
function limitsFrom(env: NodeJS.ProcessEnv, host: HostFacts): OrgLimits {
  const defaults: OrgLimits = {
    max_vcpu: Math.max(2, host.cpus),
    max_memory_mb: Math.max(2048, Math.floor(host.memoryMb / 2)),
    max_disk_gb: Math.max(10, Math.floor(host.diskGb / 2)),
    max_sandboxes: 100,
    max_total_memory_mb: Math.max(2048, host.memoryMb),
    max_total_disk_gb: Math.max(10, host.diskGb),
    default_timeout_seconds: 3600,
    max_timeout_seconds: 86_400,
    max_snapshot_storage_mb: Math.max(10_240, Math.floor((host.diskGb * 1024) / 4)),
  };
  const out = { ...defaults };
  for (const name of Object.keys(defaults) as LimitName[]) {
    const variable = `SANDBOXD_${name.toUpperCase()}`;
    const v = int(env, variable, defaults[name] ?? 0, 0);
    if (v !== 0 && v < LIMIT_MINIMUMS[name]) throw new ConfigError(`${variable} must be 0 (no limit) or at least ${LIMIT_MINIMUMS[name]}, got "${env[variable]}"`);
    out[name] = v === 0 ? null : v;
  }
  const [d, m] = [out.default_timeout_seconds, out.max_timeout_seconds];
  if (m !== null && d === null) {
    throw new ConfigError(`SANDBOXD_DEFAULT_TIMEOUT_SECONDS=0 (never expire) needs SANDBOXD_MAX_TIMEOUT_SECONDS=0 (no maximum) too, got ${m}`);
  }
  if (m !== null && d !== null && d > m) {
    throw new ConfigError(`SANDBOXD_DEFAULT_TIMEOUT_SECONDS (${d}) must not be above SANDBOXD_MAX_TIMEOUT_SECONDS (${m})`);
  }
  return out;
}

/**
 * The warm pool's budget defaults to a tenth of the host's memory, at most 4 GiB: ~10 MiB per
 * ready sandbox (READY_SANDBOX_COST_MB), so 240 ready sandboxes on a 24 GiB host. The horizon is
 * long because a burst can only be served from ready sandboxes: a 2-core host boots 13–20 a second,
 * so 100 creates after 10 s at 2/s meet p99 ≤ 1.5 s only with ~90 s of that rate held (30 s: p99
 * ~5 s; bench/burst); the budget bounds what it costs. Boots are CPU-bound (the agent's start, crun,
 * the kernel's namespace and mount work): two per core keep the cores busy while one waits, and
 * more only make each create wait longer (8 or 16 at once did no better than 4 on 2 cores).
 */
function warmPoolFrom(env: NodeJS.ProcessEnv, host: HostFacts): Config['warmPool'] {
  const byDefault = Math.max(READY_SANDBOX_COST_MB, Math.min(4096, Math.floor(host.memoryMb / 10)));
  const maxMemoryMb = int(env, 'SANDBOXD_WARM_POOL_MAX_MEMORY_MB', byDefault, 0);
  if (maxMemoryMb !== 0 && maxMemoryMb < READY_SANDBOX_COST_MB) {
    throw new ConfigError(
      `SANDBOXD_WARM_POOL_MAX_MEMORY_MB must be 0 (no warm pool) or at least ${READY_SANDBOX_COST_MB} (one ready sandbox costs ~${READY_SANDBOX_COST_MB} MiB), got "${env.SANDBOXD_WARM_POOL_MAX_MEMORY_MB}"`,
    );
  }
  if (maxMemoryMb > host.memoryMb) {
    throw new ConfigError(`SANDBOXD_WARM_POOL_MAX_MEMORY_MB (${maxMemoryMb}) must not be above the host's memory (${host.memoryMb} MB)`);
  }
  return {
    minPerKey: int(env, 'SANDBOXD_WARM_POOL_SIZE', 2, 0, 50),
    maxMemoryMb,
    // Sized to the machine's memory (5 % of it, within the budget): on the 24 GiB reference host
    // ~120 sandboxes (~1 GiB idle, 8 MiB each in its memory cgroup), which serve 100 creates out of
    // the blue all from ready ones (p99 1.1–1.7 s; 60 left 40 to boot: p99 2.1–3.1 s; bench/burst);
    // 40 on an 8 GiB machine.
    reserve: int(env, 'SANDBOXD_WARM_POOL_RESERVE', reserveForMemory(host.memoryMb, budgetSandboxes(maxMemoryMb)), 0, 100_000),
    horizonSeconds: int(env, 'SANDBOXD_WARM_POOL_HORIZON_SECONDS', 90, 0, 3600),
    shrinkAfterSeconds: int(env, 'SANDBOXD_WARM_POOL_SHRINK_AFTER_SECONDS', 30, 1, 86_400),
    bootConcurrency: int(env, 'SANDBOXD_BOOT_CONCURRENCY', 2 * Math.max(1, host.cpus), 1, 256),
  };
}

function bool(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === '') return fallback;
  if (['1', 'true', 'yes', 'on'].includes(raw)) return true;
  if (['0', 'false', 'no', 'off'].includes(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

function logLevelFrom(env: NodeJS.ProcessEnv): string {
  const level = (env.SANDBOXD_LOG_LEVEL || 'info').trim().toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new ConfigError(`SANDBOXD_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got "${env.SANDBOXD_LOG_LEVEL}"`);
  return level;
}

function logFormatFrom(env: NodeJS.ProcessEnv): Config['logFormat'] {
  const f = (env.SANDBOXD_LOG_FORMAT || 'auto').trim().toLowerCase();
  if (f !== 'json' && f !== 'text' && f !== 'auto') throw new ConfigError(`SANDBOXD_LOG_FORMAT must be json, text or auto, got "${env.SANDBOXD_LOG_FORMAT}"`);
  return f;
}

function metricsFrom(env: NodeJS.ProcessEnv): Config['metrics'] {
  const raw = env.SANDBOXD_METRICS_LISTEN?.trim();
  let listen: Config['metrics']['listen'] = null;
  if (raw) {
    const m = /^(\[[0-9a-fA-F:.]+\]|[\w.-]+):(\d{1,5})$/.exec(raw);
    const port = Number(m?.[2]);
    if (!m || port < 1 || port > 65535) throw new ConfigError(`SANDBOXD_METRICS_LISTEN must be host:port (e.g. 127.0.0.1:9464), got "${raw}"`);
    listen = { host: m[1]!.replace(/^\[|\]$/g, ''), port };
  }
  return { listen, onApi: bool(env, 'SANDBOXD_METRICS_ON_API', listen === null) };
}

/** SANDBOXD_NODE_*: this machine's part in a cluster. */
function nodeFrom(env: NodeJS.ProcessEnv): NodeConfig {
  const id = (env.SANDBOXD_NODE_ID || hostname().split('.')[0] || 'node').toLowerCase().replace(/[^a-z0-9-]/g, '-').replace(/^-+/, '').slice(0, 63) || 'node';
  if (env.SANDBOXD_NODE_ID && env.SANDBOXD_NODE_ID !== id) throw new ConfigError(`SANDBOXD_NODE_ID must be lowercase letters, digits and dashes (at most 63), got "${env.SANDBOXD_NODE_ID}"`);
  const raw = (env.SANDBOXD_NODE_LISTEN || '127.0.0.1:7070').trim();
  const m = /^(\[[0-9a-fA-F:.]+\]|[\w.-]+):(\d{1,5})$/.exec(raw);
  const port = Number(m?.[2]);
  if (!m || port < 1 || port > 65535) throw new ConfigError(`SANDBOXD_NODE_LISTEN must be host:port (e.g. 10.0.0.7:7070), got "${raw}"`);
  const host = m[1]!.replace(/^\[|\]$/g, '');
  const shown = host === '0.0.0.0' || host === '::' ? hostname() : host.includes(':') ? `[${host}]` : host;
  const readPem = (name: string): string => {
    try {
      return readFileSync(env[name]!, 'utf8');
    } catch (err) {
      throw new ConfigError(`${name} cannot be read: ${(err as Error).message}`);
    }
  };
  let tls: NodeConfig['tls'] = null;
  if (env.SANDBOXD_NODE_TLS_CERT_FILE || env.SANDBOXD_NODE_TLS_KEY_FILE) {
    if (!env.SANDBOXD_NODE_TLS_CERT_FILE || !env.SANDBOXD_NODE_TLS_KEY_FILE) throw new ConfigError('a node API over TLS needs both SANDBOXD_NODE_TLS_CERT_FILE and SANDBOXD_NODE_TLS_KEY_FILE');
    tls = { cert: readPem('SANDBOXD_NODE_TLS_CERT_FILE'), key: readPem('SANDBOXD_NODE_TLS_KEY_FILE') };
    if (!/-----BEGIN CERTIFICATE-----/.test(tls.cert)) throw new ConfigError('SANDBOXD_NODE_TLS_CERT_FILE holds no PEM certificate');
    if (!/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(tls.key)) throw new ConfigError('SANDBOXD_NODE_TLS_KEY_FILE holds no PEM private key');
  }
  const clusterCa = env.SANDBOXD_CLUSTER_CA_FILE ? readPem('SANDBOXD_CLUSTER_CA_FILE') : null;
  if (clusterCa !== null && !/-----BEGIN CERTIFICATE-----/.test(clusterCa)) throw new ConfigError('SANDBOXD_CLUSTER_CA_FILE holds no PEM certificate');
  const scheme = tls ? 'https' : 'http';
  const url = (env.SANDBOXD_NODE_URL || `${scheme}://${shown}:${port}`).replace(/\/+$/, '');
  if (!new RegExp(`^${scheme}://[^/]+$`).test(url)) {
    throw new ConfigError(`SANDBOXD_NODE_URL must be ${scheme}://host:port${tls ? ' (the node API is served over TLS)' : ' (https:// needs SANDBOXD_NODE_TLS_CERT_FILE and SANDBOXD_NODE_TLS_KEY_FILE)'}, got "${url}"`);
  }
  const overcommit = { cpu: ratio(env, 'SANDBOXD_OVERCOMMIT_CPU', 16), memory: ratio(env, 'SANDBOXD_OVERCOMMIT_MEMORY', 1.5) };
  let credential: string | null = env.SANDBOXD_NODE_CREDENTIAL?.trim() || null;
  if (env.SANDBOXD_NODE_CREDENTIAL_FILE) {
    try {
      credential = readFileSync(env.SANDBOXD_NODE_CREDENTIAL_FILE, 'utf8').trim();
    } catch (err) {
      throw new ConfigError(`SANDBOXD_NODE_CREDENTIAL_FILE cannot be read: ${(err as Error).message}`);
    }
  }
  if (credential !== null && !/^[\w-]+\.[\w-]+\.[\w-]+$/.test(credential)) throw new ConfigError('the node credential (SANDBOXD_NODE_CREDENTIAL_FILE) is not one: make it with `sandboxd cluster node-credential <node id>`');
  const controlUrls = controlUrlsFrom(env);
  return { id, listen: { host, port }, url, ...clusterKeysFrom(env), credential, credentialFile: env.SANDBOXD_NODE_CREDENTIAL_FILE || null, controlUrls, tls, clusterCa, overcommit, leaseSeconds: int(env, 'SANDBOXD_NODE_LEASE_SECONDS', 15, 3, 3600), maxSandboxes: int(env, 'SANDBOXD_NODE_MAX_SANDBOXES', 1000, 1), orphanGraceSeconds: int(env, 'SANDBOXD_NODE_ORPHAN_GRACE_SECONDS', 300, 10, 86_400), claimSeconds: int(env, 'SANDBOXD_CLUSTER_CLAIM_SECONDS', 30, 1, 150) };
}

/**
 * SANDBOXD_CLUSTER_*: the cluster's Ed25519 key pair, control's private half and the nodes' public
 * half (`sandboxd cluster keygen` makes them). Each is checked here, so a role with the wrong key
 * (a node given the private one above all) refuses to start with a clear message.
 */
function clusterKeysFrom(env: NodeJS.ProcessEnv): Pick<NodeConfig, 'signingKey' | 'signingKeyFile' | 'verifyKey'> {
  const read = (name: string): string => {
    try {
      return readFileSync(env[name]!, 'utf8');
    } catch (err) {
      throw new ConfigError(`${name} cannot be read: ${(err as Error).message}`);
    }
  };
  let signingKey: KeyObject | null = null;
  if (env.SANDBOXD_CLUSTER_SIGNING_KEY_FILE) {
    try {
      signingKey = signingKeyFromPem(read('SANDBOXD_CLUSTER_SIGNING_KEY_FILE'));
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      throw new ConfigError(`SANDBOXD_CLUSTER_SIGNING_KEY_FILE (${env.SANDBOXD_CLUSTER_SIGNING_KEY_FILE}): ${(err as Error).message}`);
    }
  }
  if (env.SANDBOXD_CLUSTER_VERIFY_KEY_FILE && env.SANDBOXD_CLUSTER_VERIFY_KEY) {
    throw new ConfigError('set one of SANDBOXD_CLUSTER_VERIFY_KEY_FILE and SANDBOXD_CLUSTER_VERIFY_KEY, not both');
  }
  let verifyKey: KeyObject | null = null;
  const verifyFrom = env.SANDBOXD_CLUSTER_VERIFY_KEY_FILE ? 'SANDBOXD_CLUSTER_VERIFY_KEY_FILE' : env.SANDBOXD_CLUSTER_VERIFY_KEY ? 'SANDBOXD_CLUSTER_VERIFY_KEY' : undefined;
  if (verifyFrom) {
    const pem = verifyFrom === 'SANDBOXD_CLUSTER_VERIFY_KEY_FILE' ? read(verifyFrom) : env.SANDBOXD_CLUSTER_VERIFY_KEY!;
    try {
      verifyKey = verifyKeyFromPem(pem);
    } catch (err) {
      const where = verifyFrom === 'SANDBOXD_CLUSTER_VERIFY_KEY_FILE' ? `${verifyFrom} (${env.SANDBOXD_CLUSTER_VERIFY_KEY_FILE})` : verifyFrom;
      throw new ConfigError(`${where}: ${(err as Error).message}`);
    }
  }
  return { signingKey, signingKeyFile: signingKey ? env.SANDBOXD_CLUSTER_SIGNING_KEY_FILE! : null, verifyKey };
}

function databaseUrlFrom(env: NodeJS.ProcessEnv): string | undefined {
  const raw = env.SANDBOXD_DATABASE_URL?.trim();
  if (!raw) return undefined;
  if (!isPostgresUrl(raw)) {
    throw new ConfigError(`SANDBOXD_DATABASE_URL must be a postgres:// or postgresql:// URL (postgresql://user:password@host:5432/database), got ${describeUrl(raw)}`);
  }
  return raw;
}

function cidrList(env: NodeJS.ProcessEnv, name: string): string[] {
  const items = (env[name] ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  return items.map((item) => {
    try {
      return normalizeCidr(item);
    } catch {
      throw new ConfigError(`${name} must list IPv4 addresses or CIDRs separated by commas, got "${item}"`);
    }
  });
}

const here = dirname(fileURLToPath(import.meta.url));
/** packages/server/dist → repository root. */
export const REPO_ROOT = resolve(here, '../../..');

/** Where the service keeps its state unless SANDBOXD_DATA_DIR says otherwise. */
export const DEFAULT_DATA_DIR = '/var/lib/sandboxd';

/** The service's layer directory as `env` configures it (the test suite takes built-in layers from there). */
export function serviceLayersDir(env: NodeJS.ProcessEnv = process.env): string {
  return resolve(env.SANDBOXD_LAYERS_DIR || join(resolve(env.SANDBOXD_DATA_DIR || DEFAULT_DATA_DIR), 'layers'));
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, facts?: HostFacts): Config {
  const host = env.SANDBOXD_HOST || '127.0.0.1';
  const port = int(env, 'SANDBOXD_PORT', 8080, 0, 65535);
  const dataDir = resolve(env.SANDBOXD_DATA_DIR || DEFAULT_DATA_DIR);
  const gatewayHostname = env.SANDBOXD_GATEWAY_HOSTNAME || (host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host);
  const [portMin, portMax] = (env.SANDBOXD_GATEWAY_PORTS || '40000-44999').split('-').map((s) => Number(s));
  if (!Number.isInteger(portMin) || !Number.isInteger(portMax) || portMin! < 1 || portMax! > 65535 || portMin! > portMax!) {
    throw new ConfigError(`SANDBOXD_GATEWAY_PORTS must look like 40000-44999, got "${env.SANDBOXD_GATEWAY_PORTS}"`);
  }
  const domain = env.SANDBOXD_GATEWAY_DOMAIN || '';
  const publicUrl = (env.SANDBOXD_PUBLIC_URL || `http://${gatewayHostname}:${port}`).replace(/\/+$/, '');
  const templates = env.SANDBOXD_TEMPLATES?.split(',').map((s) => s.trim()).filter(Boolean);
  const machine = facts ?? hostFacts(dataDir);
  const spliceMin = int(env, 'SANDBOXD_SPLICE_MIN_BYTES', 8 << 20, 0);
  return {
    host,
    port,
    dataDir,
    databaseUrl: databaseUrlFrom(env),
    node: nodeFrom(env),
    layersDir: resolve(env.SANDBOXD_LAYERS_DIR || join(dataDir, 'layers')),
    bootstrapApiKey: env.SANDBOXD_BOOTSTRAP_API_KEY || undefined,
    publicUrl,
    gateway: {
      mode: domain ? 'host' : 'port',
      bindHost: env.SANDBOXD_GATEWAY_BIND || (domain ? host : gatewayHostname),
      publicHostname: gatewayHostname,
      portMin: portMin!,
      portMax: portMax!,
      domain,
      hostModePort: int(env, 'SANDBOXD_GATEWAY_PORT', 8081, 0, 65535),
      idleTimeoutMs: int(env, 'SANDBOXD_TUNNEL_IDLE_TIMEOUT_SECONDS', 300, 1, 7 * 86_400) * 1000,
      // The agent's longest execution (a day) plus time to report it.
      responseHeadersTimeoutMs: (86_400 + 300) * 1000,
      // 0 turns the in-kernel relay off. A helper's start costs 2–7 ms (fork and exec by a large
      // process, more on a busy machine): below a few MiB the daemon relays a body as fast itself.
      ...(spliceMin > 0 ? { splice: { dir: join(dataDir, 'bin'), minBytes: spliceMin } } : {}),
    },
    maxPreviewsPerOrg: int(env, 'SANDBOXD_MAX_PREVIEWS_PER_ORG', 256, 0),
    connections: {
      perClient: int(env, 'SANDBOXD_MAX_CONNECTIONS_PER_CLIENT', 1000, 1),
      perOrg: int(env, 'SANDBOXD_MAX_CONNECTIONS_PER_ORG', 2000, 1),
      // File descriptors are 20000 here; each proxied connection may hold two.
      total: int(env, 'SANDBOXD_MAX_CONNECTIONS', 8000, 1),
    },
    apiShare: {
      rate: int(env, 'SANDBOXD_API_RATE_PER_ORG', 100, 0),
      burst: int(env, 'SANDBOXD_API_BURST_PER_ORG', 1000, 1),
      maxWaitMs: 10_000,
    },
    tokenTtlSeconds: int(env, 'SANDBOXD_TOKEN_TTL_SECONDS', 24 * 3600, 1),
    eventsTokenTtlSeconds: int(env, 'SANDBOXD_EVENTS_TOKEN_TTL_SECONDS', 300, 1, 3600),
    rateLimit: { sandboxCreatesPerMinute: int(env, 'SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE', 120, 1) },
    warmPool: warmPoolFrom(env, machine),
    sweepIntervalMs: int(env, 'SANDBOXD_SWEEP_INTERVAL_MS', 1000, 50),
    tombstoneSeconds: int(env, 'SANDBOXD_TOMBSTONE_SECONDS', 24 * 3600, 0),
    pausedRetentionSeconds: int(env, 'SANDBOXD_PAUSED_RETENTION_SECONDS', 7 * 86_400, 1),
    agentReadyTimeoutMs: int(env, 'SANDBOXD_AGENT_READY_TIMEOUT_MS', 15000, 100),
    builtinTemplates: templates && templates.length ? templates : undefined,
    builtinBuildConcurrency: int(env, 'SANDBOXD_BUILTIN_BUILD_CONCURRENCY', 2, 1, 8),
    aptCacheDir: resolve(env.SANDBOXD_APT_CACHE_DIR || join(dataDir, 'apt-cache')),
    processOutputRingKb: int(env, 'SANDBOXD_PROCESS_OUTPUT_RING_KB', 1024, 1, 1024 * 1024),
    agentBundlePath: resolve(env.SANDBOXD_AGENT_BUNDLE || join(REPO_ROOT, 'packages/agent/bundle/agent.cjs')),
    runtime: {
      cgroupParent: env.SANDBOXD_CGROUP_PARENT || 'sandboxd',
      bridge: env.SANDBOXD_BRIDGE || 'sbbr0',
      subnet: env.SANDBOXD_SUBNET || '10.88.0.0/16',
      egressAllow: cidrList(env, 'SANDBOXD_EGRESS_ALLOW'),
      allowAptSources: bool(env, 'SANDBOXD_EGRESS_ALLOW_APT_SOURCES', true),
    },
    registry: {
      url: env.SANDBOXD_REGISTRY_URL === 'none' ? null : env.SANDBOXD_REGISTRY_URL || 'https://registry-1.docker.io',
      username: env.SANDBOXD_REGISTRY_USERNAME || undefined,
      password: env.SANDBOXD_REGISTRY_PASSWORD || undefined,
    },
    buildLimits: { perHour: int(env, 'SANDBOXD_BUILDS_PER_HOUR', 10, 1), perDay: int(env, 'SANDBOXD_BUILDS_PER_DAY', 50, 1) },
    buildStepTimeoutMs: int(env, 'SANDBOXD_BUILD_STEP_TIMEOUT_SECONDS', 1800, 1) * 1000,
    limits: limitsFrom(env, machine),
    disk: diskFrom(env),
    uploadRetentionMs: int(env, 'SANDBOXD_UPLOAD_RETENTION_HOURS', 168, 0, 100 * 365 * 24) * 3_600_000,
    version: '0.1.0',
    logLevel: logLevelFrom(env),
    logFormat: logFormatFrom(env),
    metrics: metricsFrom(env),
    layerTransfer: layerTransferFrom(env, host, port),
    nodeLayerCache: nodeLayerCacheFrom(env, machine),
  };
}

/** 5 % of the data filesystem kept free by default; a size in GB (fractions allowed) instead when set. */
function diskFrom(env: NodeJS.ProcessEnv): Config['disk'] {
  const mode = (env.SANDBOXD_DISK_ADMISSION || 'on').toLowerCase();
  if (mode !== 'on' && mode !== 'off') throw new ConfigError(`SANDBOXD_DISK_ADMISSION must be on or off, got "${env.SANDBOXD_DISK_ADMISSION}"`);
  const percent = int(env, 'SANDBOXD_DISK_RESERVE_PERCENT', 5, 0, 90);
  // 4: a host with 70 GB free holds 140 sandboxes of 2 GB (a burst of 100 is admitted) rather than
  // 35, and what they may write past their share is what the reserve and refusals guard.
  const overcommit = int(env, 'SANDBOXD_DISK_OVERCOMMIT', 4, 1, 1000);
  const raw = env.SANDBOXD_DISK_RESERVE_GB;
  if (raw === undefined || raw === '') return { admission: mode === 'on', reserve: { percent }, overcommit };
  const gb = Number(raw);
  if (!Number.isFinite(gb) || gb < 0 || gb > 1_000_000) throw new ConfigError(`SANDBOXD_DISK_RESERVE_GB must be a number of GB from 0 up, got "${raw}"`);
  return { admission: mode === 'on', reserve: { percent, bytes: Math.round(gb * 1024 ** 3) }, overcommit };
}

/** A quarter of the data directory's filesystem by default (at least 1 GB), a week idle, ten minutes' grace. */
function nodeLayerCacheFrom(env: NodeJS.ProcessEnv, host: HostFacts): Config['nodeLayerCache'] {
  const raw = env.SANDBOXD_NODE_LAYER_CACHE_GB;
  let gb = Math.max(1, Math.floor(host.diskGb / 4));
  if (raw !== undefined && raw !== '') {
    gb = Number(raw);
    // Fractions are allowed (a small node, a test); 0 turns the budget off.
    if (!Number.isFinite(gb) || gb < 0 || gb > 1_000_000) throw new ConfigError(`SANDBOXD_NODE_LAYER_CACHE_GB must be a number of GB from 0 (no budget) up, got "${raw}"`);
  }
  return {
    budgetBytes: Math.round(gb * 1024 ** 3),
    maxIdleMs: int(env, 'SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS', 7 * 24, 0, 100 * 365 * 24) * 3_600_000,
    minAgeMs: int(env, 'SANDBOXD_NODE_LAYER_MIN_AGE_SECONDS', 600, 1, 86_400) * 1000,
    explicit: !!env.SANDBOXD_NODE_LAYER_CACHE_GB || !!env.SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS,
  };
}

/** SANDBOXD_CONTROL_URL: one address, or a comma-separated list (a node tries each in turn). */
function controlUrlsFrom(env: NodeJS.ProcessEnv): string[] {
  const urls = (env.SANDBOXD_CONTROL_URL ?? '')
    .split(',')
    .map((u) => u.trim().replace(/\/+$/, ''))
    .filter((u) => u !== '');
  for (const u of urls) {
    if (!/^https?:\/\/(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?(\/[^?#]*)?$/.test(u)) throw new ConfigError(`SANDBOXD_CONTROL_URL must be http(s)://host:port, or a comma-separated list of them, got "${u}"`);
  }
  return urls;
}

/** SANDBOXD_CONTROL_URL (control's own address: the first) and SANDBOXD_LAYER_FETCH_*. */
function layerTransferFrom(env: NodeJS.ProcessEnv, host: string, port: number): Config['layerTransfer'] {
  const shown = host === '0.0.0.0' || host === '::' ? hostname() : host.includes(':') ? `[${host}]` : host;
  const controlUrl = controlUrlsFrom(env)[0] ?? `http://${shown}:${port}`;
  return {
    controlUrl,
    maxBytes: int(env, 'SANDBOXD_LAYER_FETCH_MAX_GB', 32, 1, 4096) * 1024 ** 3,
    timeoutMs: int(env, 'SANDBOXD_LAYER_FETCH_TIMEOUT_SECONDS', 1800, 10, 86_400) * 1000,
  };
}
