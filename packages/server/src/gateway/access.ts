import type { IncomingMessage } from 'node:http';
import { ServiceError, type ApiScope } from '@sandboxd/protocol';
import type { RouteEntry } from '../services/routes.js';
import { requireScope, type KeyService } from '../services/keys.js';
import type { TokenService } from '../services/tokens.js';
import type { RouteTable } from './routes.js';
import { subprotocolCredential } from './tunnel.js';

/** What the credentials and state checks need of the gateway. */
export interface AccessCore {
  routes: Pick<RouteTable, 'ensure'>;
  tokens: Pick<TokenService, 'verify'>;
  keys: Pick<KeyService, 'authenticate'>;
  /** A paused sandbox with auto_resume got a request: resolves once it runs again. */
  wake?: (sandboxId: string) => Promise<void>;
  /** The sandbox's node is away: its kept-alive connections lead nowhere. */
  dropAgent(sandboxId: string): void;
  /** A request to the sandbox is in flight from here (the gateway ends it once answered). */
  begin(sandboxId: string): void;
}

/** Who may reach a sandbox through the gateway, and whether the sandbox can be reached now. */
export class Access {
  constructor(private core: AccessCore) {}

  /**
   * Checks the credentials and the sandbox's state. A sandbox token is good for its own sandbox; an
   * API key needs the owning organization and `sandboxes:read` (plain GET/HEAD) or
   * `sandboxes:write` (anything else, WebSocket upgrades included: they run code).
   */
  async authorize(req: IncomingMessage, known: RouteEntry | undefined, upgrade: boolean, asked: string | undefined): Promise<RouteEntry> {
    // The id comes from the client: echoed (and looked up) only when it looks like one.
    const id = asked !== undefined && /^[a-z0-9_-]{1,64}$/i.test(asked) ? asked : undefined;
    // What the store says of it now, in a cluster (another replica may have made or changed it).
    const entry = known ? await this.core.routes.ensure(known.sandboxId) : id ? await this.core.routes.ensure(id.toLowerCase()) : undefined;
    if (!entry) {
      throw new ServiceError('NOT_FOUND', id ? `sandbox ${id} not found` : `no sandbox found at host ${JSON.stringify((req.headers.host ?? '').slice(0, 100))}`, id ? { id } : {});
    }
    const auth = req.headers.authorization;
    // A browser's WebSocket cannot send headers: it offers the credential as a subprotocol instead.
    const offered = upgrade && !auth && req.headers['x-api-key'] === undefined ? subprotocolCredential(req) : undefined;
    const bearer = auth?.toLowerCase().startsWith('bearer ') ? auth.slice(7).trim() : offered;
    const apiKey = (req.headers['x-api-key'] as string | undefined) ?? (bearer && bearer.split('.').length !== 3 ? bearer : undefined);
    // Waking a sandbox is a resume: a sandbox token, or a key that may change sandboxes.
    let mayWake = true;
    if (bearer && bearer.split('.').length === 3) {
      await this.core.tokens.verify(bearer, entry.sandboxId);
    } else if (apiKey) {
      const p = await this.core.keys.authenticate(apiKey);
      if (p.orgId !== entry.orgId) throw new ServiceError('PERMISSION_DENIED', undefined, { id: entry.sandboxId });
      const scope: ApiScope = !upgrade && (req.method === 'GET' || req.method === 'HEAD') ? 'sandboxes:read' : 'sandboxes:write';
      requireScope(p, scope);
      mayWake = p.scopes.has('sandboxes:write') || p.scopes.has('admin');
    } else {
      throw new ServiceError('AUTHENTICATION_ERROR', 'missing credentials: send Authorization: Bearer <auth_token>');
    }
    return this.admit(entry.sandboxId, mayWake);
  }

  /** Lets a request through to a sandbox whose credentials passed: wakes it if it may, refuses it if it sleeps or is stopped. */
  async admit(sandboxId: string, mayWake: boolean): Promise<RouteEntry> {
    // The credentials took time to check: what is true of the sandbox now.
    let entry = await this.core.routes.ensure(sandboxId);
    if (!entry) throw new ServiceError('NOT_FOUND', `sandbox ${sandboxId} not found`, { id: sandboxId });
    if (entry.status === 'paused' && entry.autoResume && this.core.wake && mayWake) {
      // It sleeps until someone uses it: this request wakes it, then is served.
      await this.core.wake(entry.sandboxId);
      const now = await this.core.routes.ensure(entry.sandboxId);
      if (!now) throw new ServiceError('NOT_FOUND', `sandbox ${entry.sandboxId} not found`, { id: entry.sandboxId });
      entry = now;
    }
    if (entry.status === 'paused') {
      throw new ServiceError('SANDBOX_PAUSED', `sandbox ${entry.sandboxId} is paused; resume it first`, { id: entry.sandboxId });
    }
    if (entry.status === 'stopped') {
      throw new ServiceError('SANDBOX_STOPPED', `sandbox ${entry.sandboxId} is stopped; start it first`, { id: entry.sandboxId });
    }
    try {
      entry.reachable?.();
    } catch (err) {
      // Kept-alive connections to it lead nowhere now: new ones are made once its node is back.
      this.core.dropAgent(entry.sandboxId);
      throw err;
    }
    this.core.begin(entry.sandboxId);
    return entry;
  }
}
