import type { KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { signingKeyFromPem, verifyKeyFromPem } from '../runtime/cluster-auth.js';
import { ConfigError, int, ratio } from './parse.js';
import type { Config, NodeConfig } from './types.js';

/** SANDBOXD_NODE_*: this machine's part in a cluster. */
export function nodeFrom(env: NodeJS.ProcessEnv): NodeConfig {
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
export function layerTransferFrom(env: NodeJS.ProcessEnv, host: string, port: number): Config['layerTransfer'] {
  const shown = host === '0.0.0.0' || host === '::' ? hostname() : host.includes(':') ? `[${host}]` : host;
  const controlUrl = controlUrlsFrom(env)[0] ?? `http://${shown}:${port}`;
  return {
    controlUrl,
    maxBytes: int(env, 'SANDBOXD_LAYER_FETCH_MAX_GB', 32, 1, 4096) * 1024 ** 3,
    timeoutMs: int(env, 'SANDBOXD_LAYER_FETCH_TIMEOUT_SECONDS', 1800, 10, 86_400) * 1000,
  };
}
