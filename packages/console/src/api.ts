// Calls to the service from the console: the lifecycle API of the origin the console is served
// from, and a sandbox's agent API at its public_host (through the gateway, with the API key).

export const KEY = 'sandboxd.apiKey';

export interface SandboxRow {
  id: string;
  status: string;
  template_name: string;
  created_at: string;
  expires_at: string | null;
  public_host?: string;
  on_timeout?: 'delete' | 'pause';
  idle_timeout_seconds?: number | null;
  auto_resume?: boolean;
  resources?: { vcpu?: number; memory_mb?: number; disk_gb?: number };
  /** A cluster's: false while its node is away. */
  available?: boolean;
  /** The node that holds it: in answers to the operator's keys only. */
  node?: string;
}

export interface Template {
  name: string;
  id: string;
  status?: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function apiKey(): string {
  return sessionStorage.getItem(KEY) ?? '';
}

async function answer<T>(res: Response): Promise<T> {
  const text = await res.text();
  let data: unknown;
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = { message: text };
  }
  if (!res.ok) {
    const e = data as { code?: string; message?: string };
    throw new ApiError(res.status, e.code ?? `HTTP_${res.status}`, e.message ?? `HTTP ${res.status}`);
  }
  return data as T;
}

/** A call to the lifecycle API; JSON in and out, errors as ApiError. */
export async function call<T>(method: string, path: string, body?: unknown, key = apiKey()): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return answer<T>(res);
}

/** The agent's base URL of a sandbox, checked to be http(s) (it came from the service). */
export function agentBase(publicHost: string): string {
  const u = new URL(publicHost);
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`unexpected public_host ${publicHost}`);
  return u.origin;
}

/**
 * A sandbox's agent API, called with a token of that sandbox (POST .../token/refresh), so that the
 * organization's API key never goes to a sandbox's gateway; a key that may not mint one
 * (sandboxes:read only) is sent itself, for what it may read. Redirects are not followed: an
 * answer comes from the sandbox, and a redirect would carry the credential elsewhere.
 */
export class AgentClient {
  private token: { value: string; until: number } | null = null;
  private keyOnly = false;
  /** The token fetch under way: the calls that need one at once (terminal, files, processes) share it. */
  private fetching: Promise<void> | null = null;

  constructor(
    readonly sandboxId: string,
    readonly publicHost: string,
  ) {}

  /** The credential's header, fetching a token when there is none or it is about to expire. */
  async credential(): Promise<{ header: 'authorization' | 'x-api-key'; value: string; token?: string }> {
    if (!this.keyOnly && (!this.token || this.token.until - Date.now() < 60_000)) {
      this.fetching ??= (async () => {
        try {
          const t = await call<{ auth_token: string; token_expires_at: string }>('POST', `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/token/refresh`);
          this.token = { value: t.auth_token, until: Date.parse(t.token_expires_at) };
        } catch (err) {
          if (!(err instanceof ApiError && err.status === 403)) throw err;
          this.keyOnly = true;
        }
      })().finally(() => (this.fetching = null));
      await this.fetching;
    }
    return this.token && !this.keyOnly ? { header: 'authorization', value: `Bearer ${this.token.value}`, token: this.token.value } : { header: 'x-api-key', value: apiKey() };
  }

  async fetch(method: string, path: string, body?: unknown): Promise<Response> {
    const raw = body instanceof Blob;
    const c = await this.credential();
    return fetch(`${agentBase(this.publicHost)}${path}`, {
      method,
      redirect: 'error',
      headers: { [c.header]: c.value, ...(body === undefined ? {} : { 'content-type': raw ? 'application/octet-stream' : 'application/json' }) },
      body: body === undefined ? undefined : raw ? body : JSON.stringify(body),
    });
  }

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    return answer<T>(await this.fetch(method, path, body));
  }
}

/** A short-lived token for EventSource's ?token= (an API key never goes into a URL). */
export function eventsToken(sandboxId?: string): Promise<{ token: string; expires_at: string }> {
  return call('POST', '/v1/events/token', sandboxId ? { sandbox_id: sandboxId } : {});
}

/** Every page of a list endpoint that answers { data, next_cursor }. */
export async function listAll<T>(path: string): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | null = null;
  do {
    const sep = path.includes('?') ? '&' : '?';
    const page: { data: T[]; next_cursor?: string | null } = await call('GET', `${path}${sep}limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    out.push(...page.data);
    cursor = page.next_cursor ?? null;
  } while (cursor);
  return out;
}
