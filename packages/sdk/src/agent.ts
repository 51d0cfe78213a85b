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
  ) {
    const self = this;
    this.http = new HttpClient({
      get baseUrl() {
        return self.baseUrl;
      },
      fetch: api.config.fetch,
      maxRetries: api.config.maxRetries,
      requestTimeoutMs: api.config.requestTimeoutMs,
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
