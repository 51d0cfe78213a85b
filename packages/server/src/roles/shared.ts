import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import type { Gateway } from '../gateway/gateway.js';
import { openImageServices } from '../images/index.js';
import { createLogger, type Logger } from '../logging.js';
import type { Placement } from '../placement/placement.js';
import { ALL_SCOPES, type KeyService } from '../services/keys.js';
import type { RouteEntry } from '../services/routes.js';
import { routeOf } from '../services/sandboxes/index.js';
import { TokenService } from '../services/tokens.js';
import { describeUrl } from '../store/postgres-url.js';
import { PostgresStore } from '../store/postgres.js';
import { SqliteStore } from '../store/sqlite.js';
import type { Store } from '../store/types/index.js';

/**
 * One event of the daemon's, with its fields; `debug`, where given, for routine ones that would
 * fill the log at info (what changes every few seconds on an idle service).
 */
export type Log = ((msg: string, extra?: Record<string, unknown>) => void) & { debug?: (msg: string, extra?: Record<string, unknown>) => void };

/** The daemon's logger of the configured level and format, and `log`: info, or warn when the message says something failed; `log.debug` at debug. */
export function startLogging(config: Pick<Config, 'logLevel' | 'logFormat'>): { logger: Logger; log: Log } {
  const logger = createLogger(config.logLevel, { format: config.logFormat === 'auto' ? undefined : config.logFormat });
  const log: Log = (msg, extra) => {
    const fields = extra ?? {};
    if (/\b(failed|warning|cannot|could not)\b/i.test(msg)) logger.warn(fields, msg);
    else logger.info(fields, msg);
  };
  log.debug = (msg, extra) => logger.debug(extra ?? {}, msg);
  return { logger, log };
}

/**
 * Secrets read into the config leave the environment, so that no host tool the daemon runs (crun,
 * ip, the egress proxy) inherits them. (The cluster's signing key is only ever in a file, read
 * into the config; the verify key, SANDBOXD_CLUSTER_VERIFY_KEY, is public.)
 */
export function scrubSecrets(env: NodeJS.ProcessEnv): void {
  for (const name of ['SANDBOXD_DATABASE_URL', 'SANDBOXD_BOOTSTRAP_API_KEY', 'SANDBOXD_REGISTRY_PASSWORD', 'SANDBOXD_NODE_CREDENTIAL']) delete env[name];
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

/** The store the config names: PostgreSQL at SANDBOXD_DATABASE_URL when set, else SQLite in the data directory. */
export async function openStore(config: Config, log?: (line: string) => void): Promise<Store> {
  if (!config.databaseUrl) return SqliteStore.open(join(config.dataDir, 'sandboxd.db'));
  log?.(`store: PostgreSQL at ${describeUrl(config.databaseUrl)}`);
  return PostgresStore.open(config.databaseUrl);
}

/** Closes the store, waiting for a networked one's connections to end. */
export async function closeStore(store: Store): Promise<void> {
  if (store instanceof PostgresStore) await store.end();
  else store.close();
}

/** The signing key of sandbox, events and preview tokens, one for every replica: made by the first, kept in the store. */
export async function sharedTokens(store: Store, ttlSeconds: number): Promise<TokenService> {
  const pem = await store.kv.setIfAbsent('token-signing-key', TokenService.newKeyPem());
  return new TokenService({ pem }, ttlSeconds);
}

/** The admin key of the default organization: pinned by config, else generated once and kept 0600. */
export async function bootstrapKey(config: Config, keys: KeyService): Promise<string> {
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

/**
 * A sandbox's route as the store has it (processes that share a store: another may have made it),
 * with its previews' public or private state in host mode.
 */
export async function loadRoute(store: Store, placement: Placement, gateway: Gateway, config: Config, id: string, current: () => boolean): Promise<RouteEntry | undefined> {
  // Read at once (each a round trip to PostgreSQL, before a gateway's first request to the sandbox).
  const [row, previews] = await Promise.all([store.sandboxes.byId(id), config.gateway.mode === 'host' ? store.previews.forSandbox(id) : []]);
  if (!row || row.status === 'deleted') return undefined;
  // A preview made private while this read: this read's "public" is not applied after it.
  if (current()) for (const p of previews) await gateway.openPreview(id, p.port, p.public, null);
  return routeOf(row, placement);
}
