/** Connection settings. The only place the SDK reads `process.env`. */

export const DEFAULT_API_URL = 'http://127.0.0.1:8080';

export interface ClientOptions {
  /** API key. Default: `SANDBOXD_API_KEY`. */
  apiKey?: string;
  /** Base URL of the lifecycle API, without `/v1`. Default: `SANDBOXD_API_URL`, else `http://127.0.0.1:8080`. */
  baseUrl?: string;
  /** Client-side timeout of one HTTP call, in ms, where the call has no better-suited default. Default 60 000. */
  requestTimeoutMs?: number;
  /** Extra attempts for calls that are safe to repeat (GETs, and connections that never reached the server). Default 2. */
  maxRetries?: number;
  /** Custom fetch (e.g. to add a proxy). Default: the global fetch. */
  fetch?: typeof fetch;
}

export interface ResolvedConfig {
  apiKey: string | undefined;
  baseUrl: string;
  requestTimeoutMs: number;
  maxRetries: number;
  fetch: typeof fetch;
}

function env(name: string): string | undefined {
  const v = typeof process !== 'undefined' ? process.env[name] : undefined;
  return v && v.trim() ? v.trim() : undefined;
}

export function resolveConfig(options: ClientOptions = {}): ResolvedConfig {
  const baseUrl = (options.baseUrl ?? env('SANDBOXD_API_URL') ?? DEFAULT_API_URL).replace(/\/+$/, '').replace(/\/v1$/, '');
  const fetchImpl = options.fetch ?? globalThis.fetch;
  if (typeof fetchImpl !== 'function') {
    throw new Error('@sandboxd/sdk needs a global fetch (Node 18+) or the `fetch` option');
  }
  return {
    apiKey: options.apiKey ?? env('SANDBOXD_API_KEY'),
    baseUrl,
    requestTimeoutMs: options.requestTimeoutMs ?? 60_000,
    maxRetries: options.maxRetries ?? 2,
    fetch: fetchImpl,
  };
}
