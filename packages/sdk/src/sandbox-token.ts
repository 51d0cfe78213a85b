import { enc, type ApiClient, type CallOptions } from './client.js';
import type { Token } from './token.js';

/** An agent token as the service hands it over, its expiry (ISO 8601) as given. */
export interface GivenToken {
  token: string;
  expiresAt: string | undefined;
}

/** The agent token a create or fork answer carries. */
export function tokenOf(item: unknown): GivenToken | undefined {
  const o = (item && typeof item === 'object' ? item : {}) as Record<string, unknown>;
  if (typeof o.auth_token !== 'string') return undefined;
  return { token: o.auth_token, expiresAt: typeof o.token_expires_at === 'string' ? o.token_expires_at : undefined };
}

/** A fresh agent token for sandbox `id`, from the lifecycle API with the API key. */
export async function fetchSandboxToken(client: ApiClient, id: string, options: CallOptions = {}): Promise<Token> {
  const body = await client.http.json<Record<string, unknown>>({
    method: 'POST',
    path: `/v1/sandboxes/${enc(id)}/token/refresh`,
    signal: options.signal,
    timeoutMs: options.requestTimeoutMs,
    what: `refresh token of ${id}`,
  });
  if (typeof body.auth_token !== 'string') throw new TypeError('token refresh answered without auth_token');
  return { token: body.auth_token, expiresAt: typeof body.token_expires_at === 'string' ? Date.parse(body.token_expires_at) : NaN };
}
