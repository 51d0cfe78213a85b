import type { ApiClient } from './client.js';
import { HttpClient } from './http.js';
import { TokenManager } from './token.js';

/**
 * The per-sandbox agent connection: HTTP at the sandbox's `public_host` with its bearer token,
 * refreshed through the lifecycle API when close to expiry or after a 401 (retried once).
 */
export class AgentClient {
  readonly http: HttpClient;

  constructor(
    private readonly api: ApiClient,
    readonly tokens: TokenManager,
    private readonly publicHost: () => string,
    /** Makes sure `publicHost()` is known (a handle made from an id fetches the sandbox first). */
    readonly prepare: () => Promise<void> = async () => {},
  ) {
    this.http = new HttpClient({
      baseUrl: () => this.baseUrl,
      fetch: api.config.fetch,
      maxRetries: api.config.maxRetries,
      requestTimeoutMs: api.config.requestTimeoutMs,
      prepare: () => this.prepare(),
      auth: async () => ({ authorization: `Bearer ${await tokens.get()}` }),
      onUnauthorized: async () => {
        tokens.invalidate();
      },
    });
  }

  get baseUrl(): string {
    const host = this.publicHost();
    if (!host) throw new Error('this sandbox has no public_host (is it running?)');
    return host.replace(/\/+$/, '');
  }

  /** `ws://` / `wss://` URL of an agent WebSocket path. */
  wsUrl(path: string): string {
    const url = new URL(this.baseUrl + path);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    return url.toString();
  }

  async authHeaders(): Promise<Record<string, string>> {
    return { authorization: `Bearer ${await this.tokens.get()}` };
  }

  get apiClient(): ApiClient {
    return this.api;
  }
}
