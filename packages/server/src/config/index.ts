import { join, resolve } from 'node:path';
import { layerTransferFrom, nodeFrom } from './cluster.js';
import { diskFrom, hostFacts, limitsFrom, nodeLayerCacheFrom, warmPoolFrom, type HostFacts } from './limits.js';
import { logFormatFrom, logLevelFrom, metricsFrom } from './observability.js';
import { bool, cidrList, ConfigError, int } from './parse.js';
import { databaseUrlFrom, DEFAULT_DATA_DIR, REPO_ROOT } from './state.js';
import type { Config } from './types.js';

export type { Config, NodeConfig } from './types.js';
export { ConfigError, hostFacts, type HostFacts };
export { DEFAULT_DATA_DIR, REPO_ROOT, serviceLayersDir } from './state.js';

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
