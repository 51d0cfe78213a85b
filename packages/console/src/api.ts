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
  resources?: { vcpu?: number; memory_mb?: number; disk_gb?: number };
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

/** A call to a sandbox's agent API; `body` is JSON, or sent as it is when a Blob. */
export async function agentCall<T>(publicHost: string, method: string, path: string, body?: unknown): Promise<T> {
  return answer<T>(await agentFetch(publicHost, method, path, body));
}

export function agentFetch(publicHost: string, method: string, path: string, body?: unknown): Promise<Response> {
  const raw = body instanceof Blob;
  return fetch(`${agentBase(publicHost)}${path}`, {
    method,
    headers: { 'x-api-key': apiKey(), ...(body === undefined ? {} : { 'content-type': raw ? 'application/octet-stream' : 'application/json' }) },
    body: body === undefined ? undefined : raw ? body : JSON.stringify(body),
  });
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
