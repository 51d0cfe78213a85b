import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { ServiceError } from '@sandboxd/protocol';
import type { RouteEntry } from '../services/routes.js';
import type { PreviewClaims, TokenService } from '../services/tokens.js';
import type { RouteTable } from './routes.js';
import { PREVIEW_COOKIE_PREFIX, PREVIEW_TOKEN_HEADER } from './proxy.js';
import { PortTunnelAgent } from './port-tunnel.js';

/** Where a signed preview link lands (reserved on every preview host). */
export const PREVIEW_LINK_PATH = '/_sandboxd/auth';

export function isPreviewLink(url: string | undefined): boolean {
  return url !== undefined && url.startsWith(PREVIEW_LINK_PATH) && (url.length === PREVIEW_LINK_PATH.length || url[PREVIEW_LINK_PATH.length] === '?');
}
/** How long the browser session a signed link opens lasts. */
const PREVIEW_SESSION_SECONDS = 24 * 3600;

/** A preview's session cookie: its own name per sandbox and port (in port mode all previews share one host). */
export function previewCookieName(sandboxId: string, port: number): string {
  return `${PREVIEW_COOKIE_PREFIX}${sandboxId}_${port}`;
}

/** How many cookies of one name a request's session is looked for in (each is a signature check). */
const MAX_SESSION_COOKIES = 8;

/**
 * The values of the cookies named `name` to try: the last one sent first (the link's own, Path=/,
 * comes after any of a longer path another page set, and replaced any of the same path), then the
 * others in the order sent; at most MAX_SESSION_COOKIES.
 */
function cookieValues(header: string | undefined, name: string): string[] {
  const all: string[] = [];
  if (!header) return all;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) all.push(part.slice(eq + 1).trim());
  }
  return all.length ? [all[all.length - 1]!, ...all.slice(0, -1)].slice(0, MAX_SESSION_COOKIES) : all;
}

/** A preview: which sandbox, which port inside it. */
export interface PreviewTarget {
  sandboxId: string;
  port: number;
}

export interface PreviewState {
  public: boolean;
  /** Port mode: its own listener. */
  server: Server | undefined;
  /** Pooled tunnels to the port, made on first use. */
  agent: PortTunnelAgent | undefined;
  /** Port mode: the listen in progress, which concurrent asks for the same port share. */
  opening?: Promise<number>;
}

/** What previews need of the gateway. */
export interface PreviewCore {
  config: { mode: 'port' | 'host'; domain: string; publicHostname: string };
  routes: Pick<RouteTable, 'get' | 'ensure'>;
  tokens: Pick<TokenService, 'verify' | 'verifyPreview' | 'issuePreview'>;
  /** Lets a request whose credentials passed through to the sandbox (its state checked, a use begun). */
  admit(sandboxId: string, mayWake: boolean): Promise<RouteEntry>;
}

/** The previews opened, by sandbox and port inside it: who may use them, and how a browser gets in. */
export class Previews {
  private bySandbox = new Map<string, Map<number, PreviewState>>();

  constructor(private core: PreviewCore) {}

  /** The port's preview, made if new, with its visibility set. */
  want(sandboxId: string, port: number, isPublic: boolean): PreviewState {
    let ports = this.bySandbox.get(sandboxId);
    if (!ports) this.bySandbox.set(sandboxId, (ports = new Map()));
    let state = ports.get(port);
    if (!state) {
      state = { public: isPublic, server: undefined, agent: undefined };
      ports.set(port, state);
    }
    state.public = isPublic;
    return state;
  }

  get(sandboxId: string, port: number): PreviewState | undefined {
    return this.bySandbox.get(sandboxId)?.get(port);
  }

  sandboxIds(): Iterable<string> {
    return this.bySandbox.keys();
  }

  /** Forgets the sandbox's previews, and hands them over to be closed. */
  take(sandboxId: string): PreviewState[] {
    const ports = this.bySandbox.get(sandboxId);
    this.bySandbox.delete(sandboxId);
    return [...(ports?.values() ?? [])];
  }

  /** The HTTP agent whose connections are tunnels to the sandbox's port (kept while the preview is). */
  agent(entry: RouteEntry, port: number): PortTunnelAgent {
    const dial = () => this.core.routes.get(entry.sandboxId)?.dial ?? entry.dial;
    const state = this.get(entry.sandboxId, port);
    // Host mode serves every port's preview (a private one takes the token either way), but pools
    // tunnels only for the ports someone opened a preview of (at most MAX_PREVIEWS_PER_SANDBOX):
    // kept-alive tunnels to each of 65 535 ports would be the daemon's descriptors.
    if (!state) return new PortTunnelAgent(dial, entry.sandboxId, port, { keepAlive: false });
    state.agent ??= new PortTunnelAgent(dial, entry.sandboxId, port);
    return state.agent;
  }

  /**
   * A preview's request: a public port lets anyone in; a private one takes the sandbox's token
   * (X-Sandboxd-Token) or the session cookie a signed link set.
   */
  async authorize(req: IncomingMessage, target: PreviewTarget): Promise<RouteEntry> {
    const entry = await this.core.routes.ensure(target.sandboxId);
    if (!entry) throw new ServiceError('NOT_FOUND', `sandbox ${target.sandboxId} not found`, { id: target.sandboxId });
    const state = this.get(target.sandboxId, target.port);
    let mayWake = true;
    if (!state?.public) {
      const token = req.headers[PREVIEW_TOKEN_HEADER];
      // Every cookie of this name: another preview's page (same host in port mode, a sibling host
      // in host mode) may set one with a longer path, which the browser sends first.
      const sessions = cookieValues(req.headers.cookie, previewCookieName(target.sandboxId, target.port));
      if (typeof token === 'string' && token !== '') {
        await this.core.tokens.verify(token, target.sandboxId);
      } else if (sessions.length) {
        // The cookie is ambient, and every preview (other organizations' too) is the same site: a
        // page of another preview could use it (a WebSocket, which no CORS guards; a form post).
        if (!this.mayUseSession(req, target.sandboxId)) {
          throw new ServiceError('PERMISSION_DENIED', `a page of another origin may not use the session of port ${target.port} of sandbox ${target.sandboxId}`, {
            id: target.sandboxId,
          });
        }
        mayWake = (await this.firstValidSession(sessions, target)).wake;
      } else {
        throw new ServiceError(
          'AUTHENTICATION_ERROR',
          `port ${target.port} of sandbox ${target.sandboxId} is private: send the sandbox's auth_token in the X-Sandboxd-Token header, or open the signed link (signed_url) that GET /v1/sandboxes/${target.sandboxId}/ports/${target.port} gives`,
          { id: target.sandboxId },
        );
      }
    }
    return this.core.admit(target.sandboxId, mayWake);
  }

  /** A request may use a preview's session cookie: no Origin, its own, or another preview's of the same sandbox. */
  private mayUseSession(req: IncomingMessage, sandboxId: string): boolean {
    const origin = req.headers.origin;
    if (origin === undefined) return true;
    let u: URL;
    try {
      u = new URL(origin);
    } catch {
      return false;
    }
    if (u.host === (req.headers.host ?? '').toLowerCase()) return true;
    const c = this.core.config;
    if (c.mode === 'host') {
      const m = /^(\d{1,5})-([a-z0-9]{1,64})\.(.+)$/.exec(u.hostname);
      return m !== null && m[2] === sandboxId && m[3] === c.domain.toLowerCase();
    }
    const host = c.publicHostname.includes(':') ? `[${c.publicHostname.toLowerCase()}]` : c.publicHostname.toLowerCase();
    if (u.hostname !== host) return false;
    for (const state of this.bySandbox.get(sandboxId)?.values() ?? []) {
      const addr = state.server?.address();
      if (addr && typeof addr === 'object' && String(addr.port) === u.port) return true;
    }
    return false;
  }

  /** The first of the session cookies that verifies; else the first one's error. */
  private async firstValidSession(sessions: string[], target: PreviewTarget): Promise<PreviewClaims> {
    let first: unknown;
    for (const s of sessions) {
      try {
        return await this.core.tokens.verifyPreview(s, 'session', target.sandboxId, target.port);
      } catch (err) {
        first ??= err;
      }
    }
    throw first;
  }

  /**
   * A signed link (`/_sandboxd/auth?token=...`) opens a private preview in a browser: it sets the
   * preview's session cookie (HttpOnly, this host only, SameSite=Strict: no other site's page can
   * make a browser send it) and sends the browser on to the app. A link followed from another site
   * (Sec-Fetch-Site: cross-site) lands on a page that moves on by itself: a redirect would carry
   * the other site's context, and the browser would hold the Strict cookie back once.
   */
  async link(req: IncomingMessage, res: ServerResponse, target: PreviewTarget, requestId: string): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://preview');
    const token = url.searchParams.get('token') ?? '';
    if (!(await this.core.routes.ensure(target.sandboxId))) throw new ServiceError('NOT_FOUND', `sandbox ${target.sandboxId} not found`, { id: target.sandboxId });
    const link = await this.core.tokens.verifyPreview(token, 'link', target.sandboxId, target.port);
    const ttl = PREVIEW_SESSION_SECONDS;
    const session = await this.core.tokens.issuePreview('session', target.sandboxId, target.port, link.wake, ttl, link.keyId);
    const next = url.searchParams.get('next') ?? '/';
    // Only a path of this host: never a way to send a browser elsewhere.
    const location = /^\/(?![/\\])[\x21-\x7e]*$/.test(next) ? next : '/';
    const headers = {
      'set-cookie': `${previewCookieName(target.sandboxId, target.port)}=${session.token}; Path=/; Max-Age=${ttl}; HttpOnly; SameSite=Strict`,
      'cache-control': 'no-store',
      'referrer-policy': 'no-referrer',
      'x-request-id': requestId,
    };
    if (req.headers['sec-fetch-site'] === 'cross-site') {
      // `location` is a path of printable ASCII without quotes' meaning in HTML once escaped.
      const href = location.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
      const page = `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=${href}"><title>Opening the preview</title><a href="${href}">Open the preview</a>\n`;
      res.writeHead(200, { ...headers, 'content-type': 'text/html; charset=utf-8', 'content-security-policy': "default-src 'none'", 'content-length': String(Buffer.byteLength(page)) });
      res.end(page);
      return;
    }
    res.writeHead(302, { ...headers, location, 'content-length': '0' });
    res.end();
  }
}
