/**
 * Typed errors. The class is chosen by the response's `code` first (the service's closed registry),
 * then by HTTP status, so that a new code the SDK does not know still lands in the right family.
 */

export interface SandboxdErrorOptions {
  code: string;
  status?: number;
  requestId?: string;
  body?: unknown;
  cause?: unknown;
}

export class SandboxdError extends Error {
  /** The service's error code (e.g. `NOT_FOUND`), or a client-side one (`TIMEOUT`, `CONNECTION_ERROR`, `ABORTED`). */
  readonly code: string;
  /** HTTP status, when the error came from a response. */
  readonly status: number | undefined;
  /** The `X-Request-ID` / `request_id` of the failed request, for support and logs. */
  readonly requestId: string | undefined;
  /** The parsed error body, as the service sent it. */
  readonly body: unknown;

  constructor(message: string, options: SandboxdErrorOptions) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code;
    this.status = options.status;
    this.requestId = options.requestId;
    this.body = options.body;
  }

  /** On a 5xx: the id of the service's log line about this failure (quote it when reporting one). */
  get incidentId(): string | undefined {
    const v = (this.body as { incident_id?: unknown } | undefined)?.incident_id;
    return typeof v === 'string' ? v : undefined;
  }

  toJSON(): Record<string, unknown> {
    const out: Record<string, unknown> = { name: this.name, code: this.code, status: this.status, message: this.message, request_id: this.requestId };
    if (this.incidentId) out.incident_id = this.incidentId;
    return out;
  }
}

/** 400: the request was malformed or a value was out of range. */
export class ValidationError extends SandboxdError {}
/** 401: missing, wrong, revoked or expired credentials. */
export class AuthenticationError extends SandboxdError {}
/** 403: the key lacks a scope, or the resource belongs to another organization. */
export class PermissionDeniedError extends SandboxdError {}
/** 404: sandbox, template, build, snapshot, file or process does not exist. */
export class NotFoundError extends SandboxdError {
  /** The path, for file errors. */
  get path(): string | undefined {
    const p = (this.body as { path?: unknown } | undefined)?.path;
    return typeof p === 'string' ? p : undefined;
  }
}
/** 409: conflicts with existing state (e.g. a template alias that already exists). */
export class ConflictError extends SandboxdError {}
/** 409: the action is not valid in the sandbox's (or template's) current state, e.g. pausing a stopped sandbox. */
export class InvalidStateError extends ConflictError {}
/** 410: the sandbox reached its timeout and was deleted. */
export class SandboxExpiredError extends SandboxdError {
  get expiresAt(): string | undefined {
    const v = (this.body as { expires_at?: unknown } | undefined)?.expires_at;
    return typeof v === 'string' ? v : undefined;
  }
}
/** 413: body, file or disk too large. */
export class PayloadTooLargeError extends SandboxdError {}
/** 429: rate limit or quota exceeded. `retryAfter` is in seconds when the service said. */
export class RateLimitError extends SandboxdError {
  readonly retryAfter: number | undefined;
  constructor(message: string, options: SandboxdErrorOptions & { retryAfter?: number }) {
    super(message, options);
    this.retryAfter = options.retryAfter;
  }
  override toJSON(): Record<string, unknown> {
    return { ...super.toJSON(), retry_after: this.retryAfter };
  }
}
/** 5xx: the service itself failed. */
export class ServerError extends SandboxdError {}
/** The call did not finish within its client-side timeout (or an `AbortSignal.timeout()` fired). */
export class TimeoutError extends SandboxdError {}
/** The caller aborted the call through its `AbortSignal`. */
export class AbortError extends SandboxdError {}
/** The service could not be reached (connection refused, DNS failure, connection reset). */
export class ConnectionError extends SandboxdError {}
/** A template build ended in `failed`. */
export class TemplateBuildError extends SandboxdError {
  readonly buildId: string;
  readonly logs: string[];
  constructor(message: string, options: SandboxdErrorOptions & { buildId: string; logs?: string[] }) {
    super(message, options);
    this.buildId = options.buildId;
    this.logs = options.logs ?? [];
  }
}

export type ErrorClass = new (message: string, options: SandboxdErrorOptions) => SandboxdError;

/**
 * The service's error codes and their statuses (packages/protocol/src/errors.ts, copied so that the
 * published SDK needs no server package; a unit test keeps the two equal). Used to type errors that
 * arrive without an HTTP status, e.g. in WebSocket frames.
 */
export const KNOWN_ERROR_CODES: Readonly<Record<string, number>> = {
  VALIDATION_ERROR: 400,
  INVALID_TEMPLATE_DEFINITION: 400,
  INVALID_FILE_METADATA: 400,
  INVALID_LANGUAGE: 400,
  INVALID_PATH: 400,
  NOT_A_FILE: 400,
  NOT_A_DIRECTORY: 400,
  BINARY_FILE: 400,
  LIMIT_EXCEEDED: 400,
  AUTHENTICATION_ERROR: 401,
  TOKEN_EXPIRED: 401,
  PERMISSION_DENIED: 403,
  NOT_FOUND: 404,
  TEMPLATE_NOT_FOUND: 404,
  BUILD_NOT_FOUND: 404,
  SNAPSHOT_NOT_FOUND: 404,
  VOLUME_NOT_FOUND: 404,
  KEY_NOT_FOUND: 404,
  ORG_NOT_FOUND: 404,
  ROUTE_NOT_FOUND: 404,
  FILE_NOT_FOUND: 404,
  PROCESS_NOT_FOUND: 404,
  CONTEXT_NOT_FOUND: 404,
  RECORDING_NOT_FOUND: 404,
  WINDOW_NOT_FOUND: 404,
  ELEMENT_NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  INVALID_STATE: 409,
  SANDBOX_PAUSED: 409,
  SANDBOX_STOPPED: 409,
  TEMPLATE_EXISTS: 409,
  TEMPLATE_IN_USE: 409,
  VOLUME_IN_USE: 409,
  TEMPLATE_NOT_READY: 409,
  ALREADY_EXISTS: 409,
  CONTEXT_LIMIT: 409,
  ORG_QUOTA_EXCEEDED: 409,
  SANDBOX_EXPIRED: 410,
  PAYLOAD_TOO_LARGE: 413,
  FILE_TOO_LARGE: 413,
  DISK_FULL: 413,
  UNSUPPORTED_MEDIA_TYPE: 415,
  RATE_LIMIT_EXCEEDED: 429,
  QUOTA_EXCEEDED: 429,
  INTERNAL_ERROR: 500,
  DESKTOP_NOT_AVAILABLE: 501,
  AGENT_UNAVAILABLE: 502,
  PORT_NOT_LISTENING: 502,
  RUNTIME_ERROR: 503,
  STORE_UNAVAILABLE: 503,
  TEMPLATE_BUILDING: 503,
  NO_CAPACITY: 503,
  NODE_UNAVAILABLE: 503,
  INSUFFICIENT_STORAGE: 507,
};

/** 409 codes that mean "not in this state" rather than "already exists". */
const INVALID_STATE_CODES = new Set(['INVALID_STATE', 'SANDBOX_PAUSED', 'SANDBOX_STOPPED', 'TEMPLATE_NOT_READY']);

function classForStatus(status: number): ErrorClass {
  if (status === 400 || status === 422) return ValidationError;
  if (status === 401) return AuthenticationError;
  if (status === 403) return PermissionDeniedError;
  if (status === 404) return NotFoundError;
  if (status === 409) return ConflictError;
  if (status === 410) return SandboxExpiredError;
  if (status === 413) return PayloadTooLargeError;
  if (status === 429) return RateLimitError;
  if (status >= 500) return ServerError;
  return SandboxdError;
}

/** The error class for a code (if known) else for the status. */
export function errorClassFor(code: string | undefined, status: number): ErrorClass {
  if (code) {
    if (INVALID_STATE_CODES.has(code)) return InvalidStateError;
    const known = KNOWN_ERROR_CODES[code];
    if (known !== undefined) return classForStatus(known);
    if (code.endsWith('_NOT_FOUND')) return NotFoundError;
  }
  return classForStatus(status);
}

function str(v: unknown): string | undefined {
  return typeof v === 'string' && v.length > 0 ? v : undefined;
}

/** Seconds from a `retry_after` body field or a `Retry-After` header (delta-seconds or HTTP date). */
export function parseRetryAfter(bodyValue: unknown, header: string | null | undefined, now = Date.now()): number | undefined {
  if (typeof bodyValue === 'number' && Number.isFinite(bodyValue) && bodyValue >= 0) return bodyValue;
  if (typeof bodyValue === 'string' && /^\d+(\.\d+)?$/.test(bodyValue.trim())) return Number(bodyValue);
  if (!header) return undefined;
  const h = header.trim();
  if (/^\d+(\.\d+)?$/.test(h)) return Number(h);
  const date = Date.parse(h);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, Math.ceil((date - now) / 1000));
}

export interface ErrorResponseInput {
  status: number;
  /** Parsed JSON body, raw text, or undefined. */
  body: unknown;
  headers?: { get(name: string): string | null };
}

/** Builds the typed error for a non-2xx response. Accepts the flat body of api-decisions §1 and nested `{error:{code,message}}`. */
export function errorFromResponse({ status, body, headers }: ErrorResponseInput): SandboxdError {
  const obj = body && typeof body === 'object' ? (body as Record<string, unknown>) : undefined;
  const nested = obj?.error && typeof obj.error === 'object' ? (obj.error as Record<string, unknown>) : undefined;
  const code = str(obj?.code) ?? str(nested?.code);
  const message =
    str(obj?.message) ??
    str(nested?.message) ??
    str(obj?.error) ??
    (typeof body === 'string' && body.trim() ? body.trim().slice(0, 500) : undefined) ??
    (status ? `Request failed with status ${status}` : 'Request failed');
  const requestId = str(obj?.request_id) ?? str(nested?.request_id) ?? headers?.get('x-request-id') ?? undefined;
  const Cls = errorClassFor(code, status);
  const options: SandboxdErrorOptions = { code: code ?? (status ? `HTTP_${status}` : 'UNKNOWN'), status: status || undefined, requestId, body };
  if (Cls === RateLimitError) {
    const retryAfter = parseRetryAfter(obj?.retry_after ?? nested?.retry_after, headers?.get('retry-after'));
    return new RateLimitError(message, { ...options, retryAfter });
  }
  return new Cls(message, options);
}
