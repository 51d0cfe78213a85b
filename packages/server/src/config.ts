import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { normalizeCidr } from './runtime/net.js';

/** Every setting of the daemon. Only this file reads process.env. */
export interface Config {
  host: string;
  port: number;
  dataDir: string;
  /** Where image layers live (shareable between data dirs, e.g. by tests). */
  layersDir: string;
  bootstrapApiKey: string | undefined;
  /** The URL clients use to reach the API (printed, used for presigned upload URLs). */
  publicUrl: string;
  gateway: {
    /** 'port': one loopback port per sandbox (default). 'host': routing by Host `<id>.<domain>`. */
    mode: 'port' | 'host';
    bindHost: string;
    /** Hostname put in public_host URLs. */
    publicHostname: string;
    portMin: number;
    portMax: number;
    /** Host mode: the wildcard domain and the one port the gateway listens on. */
    domain: string;
    hostModePort: number;
  };
  tokenTtlSeconds: number;
  rateLimit: { sandboxCreatesPerMinute: number };
  /** Sandboxes kept booted per template and network setting once asked for (0: none). */
  warmPoolSize: number;
  sweepIntervalMs: number;
  tombstoneSeconds: number;
  agentReadyTimeoutMs: number;
  /** Built-in templates to build and serve (default: all). */
  builtinTemplates: string[] | undefined;
  agentBundlePath: string;
  /**
   * Node-local runtime names: several daemons on one host (tests) need distinct ones. egressAllow:
   * IPv4 CIDRs sandboxes may reach although they lie in a blocked (private, reserved...) range.
   */
  runtime: { cgroupParent: string; bridge: string; subnet: string; egressAllow: string[] };
  /** OCI registry for `from` images Debian's packages cannot provide (null: none). */
  registry: { url: string | null; username: string | undefined; password: string | undefined };
  buildLimits: { perHour: number; perDay: number };
  buildStepTimeoutMs: number;
  version: string;
  logLevel: string;
}

export class ConfigError extends Error {}

function int(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min || v > max) throw new ConfigError(`${name} must be an integer in [${min}, ${max}], got "${raw}"`);
  return v;
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

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const host = env.SANDBOXD_HOST || '127.0.0.1';
  const port = int(env, 'SANDBOXD_PORT', 8080, 0, 65535);
  const dataDir = resolve(env.SANDBOXD_DATA_DIR || '/var/lib/sandboxd');
  const gatewayHostname = env.SANDBOXD_GATEWAY_HOSTNAME || (host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host);
  const [portMin, portMax] = (env.SANDBOXD_GATEWAY_PORTS || '40000-44999').split('-').map((s) => Number(s));
  if (!Number.isInteger(portMin) || !Number.isInteger(portMax) || portMin! < 1 || portMax! > 65535 || portMin! > portMax!) {
    throw new ConfigError(`SANDBOXD_GATEWAY_PORTS must look like 40000-44999, got "${env.SANDBOXD_GATEWAY_PORTS}"`);
  }
  const domain = env.SANDBOXD_GATEWAY_DOMAIN || '';
  const publicUrl = (env.SANDBOXD_PUBLIC_URL || `http://${gatewayHostname}:${port}`).replace(/\/+$/, '');
  const templates = env.SANDBOXD_TEMPLATES?.split(',').map((s) => s.trim()).filter(Boolean);
  return {
    host,
    port,
    dataDir,
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
    },
    tokenTtlSeconds: int(env, 'SANDBOXD_TOKEN_TTL_SECONDS', 24 * 3600, 1),
    rateLimit: { sandboxCreatesPerMinute: int(env, 'SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE', 120, 1) },
    warmPoolSize: int(env, 'SANDBOXD_WARM_POOL_SIZE', 2, 0, 50),
    sweepIntervalMs: int(env, 'SANDBOXD_SWEEP_INTERVAL_MS', 1000, 50),
    tombstoneSeconds: int(env, 'SANDBOXD_TOMBSTONE_SECONDS', 24 * 3600, 0),
    agentReadyTimeoutMs: int(env, 'SANDBOXD_AGENT_READY_TIMEOUT_MS', 15000, 100),
    builtinTemplates: templates && templates.length ? templates : undefined,
    agentBundlePath: resolve(env.SANDBOXD_AGENT_BUNDLE || join(REPO_ROOT, 'packages/agent/bundle/agent.cjs')),
    runtime: {
      cgroupParent: env.SANDBOXD_CGROUP_PARENT || 'sandboxd',
      bridge: env.SANDBOXD_BRIDGE || 'sbbr0',
      subnet: env.SANDBOXD_SUBNET || '10.88.0.0/16',
      egressAllow: cidrList(env, 'SANDBOXD_EGRESS_ALLOW'),
    },
    registry: {
      url: env.SANDBOXD_REGISTRY_URL === 'none' ? null : env.SANDBOXD_REGISTRY_URL || 'https://registry-1.docker.io',
      username: env.SANDBOXD_REGISTRY_USERNAME || undefined,
      password: env.SANDBOXD_REGISTRY_PASSWORD || undefined,
    },
    buildLimits: { perHour: int(env, 'SANDBOXD_BUILDS_PER_HOUR', 10, 1), perDay: int(env, 'SANDBOXD_BUILDS_PER_DAY', 50, 1) },
    buildStepTimeoutMs: int(env, 'SANDBOXD_BUILD_STEP_TIMEOUT_SECONDS', 1800, 1) * 1000,
    version: '0.1.0',
    logLevel: env.SANDBOXD_LOG_LEVEL || 'info',
  };
}
