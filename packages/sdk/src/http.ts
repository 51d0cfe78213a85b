import { ConnectionError, errorFromResponse, SandboxdError } from './errors.js';
import { abortError, scope, sleep } from './signals.js';
import { SDK_VERSION } from './version.js';

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
type BodyData = NonNullable<RequestInit['body']>;

export interface RequestSpec {
  method: HttpMethod;
  /** Path below the client's base URL, starting with `/`; or an absolute URL. */
  path: string;
  query?: Record<string, string | number | boolean | undefined | null>;
  /** JSON body. */
  json?: unknown;
  /**
   * Raw body. A function is called once per attempt, so the request can be repeated (after a refused
   * connection or a token refresh); a bare stream can be sent only once.
   */
  body?: (() => BodyData) | BodyData;
  contentType?: string;
  headers?: Record<string, string>;
  accept?: string;
  signal?: AbortSignal;
  /** Client-side deadline until the response headers (for `stream`) or the whole body (otherwise) arrive. */
  timeoutMs?: number;
  /** Skip the auth headers (e.g. a presigned upload URL). */
  noAuth?: boolean;
  /** What this call is, for error messages ("execute", "upload /workspace/a"). */
  what?: string;
}

export interface HttpClientOptions {
  /** A function when the address can change (a sandbox's agent after a restart). */
  baseUrl: string | (() => string);
  fetch: typeof fetch;
  maxRetries: number;
  requestTimeoutMs: number;
  /** Auth headers for each attempt. */
  auth?: () => Promise<Record<string, string>> | Record<string, string>;
  /** Runs before each request (e.g. to learn the sandbox's address first). */
  prepare?: () => Promise<void>;
  /** Called once on a 401; when it resolves, the request is sent again with fresh auth (agent token refresh). */
  onUnauthorized?: () => Promise<void>;
}

/** Error codes of failures that happen before the request could have reached the server. */
const NEVER_SENT = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
]);

function causeCodes(err: unknown, depth = 0): string[] {
  if (!err || typeof err !== 'object' || depth > 4) return [];
  const e = err as { code?: unknown; cause?: unknown; errors?: unknown };
  const out: string[] = typeof e.code === 'string' ? [e.code] : [];
  out.push(...causeCodes(e.cause, depth + 1));
  if (Array.isArray(e.errors)) for (const x of e.errors) out.push(...causeCodes(x, depth + 1));
  return out;
}

/** True when a fetch failure means the connection was never made, so no byte of the request reached the server. */
export function failedBeforeSend(err: unknown): boolean {
  const codes = causeCodes(err);
  return codes.length > 0 && codes.every((c) => NEVER_SENT.has(c));
}

export function isIdempotent(method: HttpMethod): boolean {
  return method === 'GET';
}

/**
 * Whether to try again. Never for responses to non-GETs: a 5xx after a POST may mean the work was
 * done (code ran, a sandbox was created), and we must not do it twice.
 */
export function shouldRetry(
  method: HttpMethod,
  outcome: { status: number } | { error: unknown },
  bodyReplayable: boolean,
): boolean {
  if (!bodyReplayable) return false;
  if ('status' in outcome) return isIdempotent(method) && outcome.status >= 500 && outcome.status !== 501 && outcome.status !== 507;
  if (failedBeforeSend(outcome.error)) return true;
  return isIdempotent(method);
}

/** Exponential backoff with jitter: ~250 ms, 500 ms, 1 s ... capped at 4 s. */
export function retryDelayMs(attempt: number, random = Math.random): number {
  const base = Math.min(4000, 250 * 2 ** attempt);
  return Math.round(base * (0.5 + random() / 2));
}

export function buildUrl(baseUrl: string, path: string, query?: RequestSpec['query']): string {
  const url = new URL(/^https?:\/\//.test(path) ? path : baseUrl.replace(/\/+$/, '') + path);
  for (const [k, v] of Object.entries(query ?? {})) {
    if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
  }
  return url.toString();
}

async function readErrorBody(res: Response): Promise<unknown> {
  const text = await res.text().catch(() => '');
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const USER_AGENT = `sandboxd-sdk/${SDK_VERSION} node/${typeof process !== 'undefined' ? process.versions.node : 'unknown'}`;

export class HttpClient {
  constructor(readonly options: HttpClientOptions) {}

  get baseUrl(): string {
    const b = this.options.baseUrl;
    return typeof b === 'function' ? b() : b;
  }

  /** Sends the request and returns the response once it is 2xx; any other status throws its typed error. */
  async send(spec: RequestSpec, mode: 'buffer' | 'stream' = 'buffer'): Promise<Sent> {
    await this.options.prepare?.();
    const url = buildUrl(this.baseUrl, spec.path, spec.query);
    const what = spec.what ?? `${spec.method} ${new URL(url).pathname}`;
    const replayable = spec.body === undefined || typeof spec.body === 'function';
    const s = scope(spec.signal, spec.timeoutMs ?? this.options.requestTimeoutMs);
    let refreshed = false;
    try {
      for (let attempt = 0; ; attempt++) {
        const headers: Record<string, string> = { 'user-agent': USER_AGENT, accept: spec.accept ?? 'application/json' };
        if (!spec.noAuth && this.options.auth) Object.assign(headers, await this.options.auth());
        let body: BodyData | undefined;
        if (spec.json !== undefined) {
          headers['content-type'] = 'application/json';
          body = JSON.stringify(spec.json);
        } else if (spec.body !== undefined) {
          body = typeof spec.body === 'function' ? spec.body() : spec.body;
          if (spec.contentType) headers['content-type'] = spec.contentType;
        }
        Object.assign(headers, spec.headers);
        const init: RequestInit & { duplex?: 'half' } = { method: spec.method, headers, body, signal: s.signal };
        if (body && typeof (body as ReadableStream).getReader === 'function') init.duplex = 'half';
        else if (body && typeof (body as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function') init.duplex = 'half';

        let res: Response;
        try {
          res = await this.options.fetch(url, init);
        } catch (err) {
          if (s.signal.aborted) throw abortError(s.signal.reason, what);
          if (attempt < this.options.maxRetries && shouldRetry(spec.method, { error: err }, replayable)) {
            await sleep(retryDelayMs(attempt), s.signal);
            continue;
          }
          throw new ConnectionError(`${what}: cannot reach ${new URL(url).origin} (${describe(err)})`, {
            code: 'CONNECTION_ERROR',
            cause: err,
          });
        }

        if (res.ok) {
          // For streams the deadline covered waiting for the response; a long body is bounded only by the caller.
          if (mode === 'stream') s.clearTimer();
          return { res, signal: s.signal, what, done: s.dispose };
        }

        const errBody = await readErrorBody(res).catch((e: unknown) => {
          if (s.signal.aborted) throw abortError(s.signal.reason, what);
          throw e;
        });
        if (res.status === 401 && this.options.onUnauthorized && !refreshed && replayable) {
          refreshed = true;
          await this.options.onUnauthorized();
          continue;
        }
        if (attempt < this.options.maxRetries && shouldRetry(spec.method, { status: res.status }, replayable)) {
          await sleep(retryDelayMs(attempt), s.signal);
          continue;
        }
        throw errorFromResponse({ status: res.status, body: errBody, headers: res.headers });
      }
    } catch (err) {
      s.dispose();
      if (err instanceof SandboxdError) throw err;
      if (s.signal.aborted) throw abortError(s.signal.reason, what);
      throw err;
    }
  }

  /** Sends and parses a JSON response. */
  async json<T>(spec: RequestSpec): Promise<T> {
    const sent = await this.send(spec);
    try {
      const text = await sent.res.text();
      return (text ? JSON.parse(text) : {}) as T;
    } catch (err) {
      if (err instanceof SyntaxError) {
        throw new SandboxdError(`${sent.what}: the service answered with invalid JSON`, {
          code: 'INVALID_RESPONSE',
          status: sent.res.status,
          requestId: sent.res.headers.get('x-request-id') ?? undefined,
          cause: err,
        });
      }
      throw bodyError(err, sent);
    } finally {
      sent.done();
    }
  }
}

export interface Sent {
  res: Response;
  /** Aborts on the caller's signal (and, unless streamed, the deadline): watch it while reading the body. */
  signal: AbortSignal;
  what: string;
  /** Releases timers and listeners. */
  done: () => void;
}

/** Maps an error thrown while reading a response body to the SDK's errors. */
export function bodyError(err: unknown, sent: Pick<Sent, 'signal' | 'what'>): unknown {
  if (sent.signal.aborted) return abortError(sent.signal.reason, sent.what);
  if (err instanceof SandboxdError) return err;
  return new ConnectionError(`${sent.what}: connection lost while reading the response (${describe(err)})`, {
    code: 'CONNECTION_ERROR',
    cause: err,
  });
}

function describe(err: unknown): string {
  const codes = causeCodes(err);
  if (codes.length) return [...new Set(codes)].join(', ');
  return err instanceof Error ? err.message : String(err);
}
