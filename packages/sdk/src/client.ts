import { resolveConfig, type ClientOptions, type ResolvedConfig } from './config.js';
import { HttpClient } from './http.js';

/** A configured connection to the lifecycle API (`{baseUrl}/v1/...`). Shared by the sandboxes and templates it creates. */
export class ApiClient {
  readonly config: ResolvedConfig;
  readonly http: HttpClient;

  constructor(options: ClientOptions = {}) {
    this.config = resolveConfig(options);
    const apiKey = this.config.apiKey;
    this.http = new HttpClient({
      baseUrl: this.config.baseUrl,
      fetch: this.config.fetch,
      maxRetries: this.config.maxRetries,
      requestTimeoutMs: this.config.requestTimeoutMs,
      auth: (): Record<string, string> => (apiKey ? { 'x-api-key': apiKey } : {}),
    });
  }

  static from(options: ClientOptions | ApiClient | undefined): ApiClient {
    return options instanceof ApiClient ? options : new ApiClient(options);
  }
}

export interface CallOptions {
  signal?: AbortSignal;
  /** Client-side timeout of this call, in ms. */
  requestTimeoutMs?: number;
}

export const enc = encodeURIComponent;
