/**
 * The one closed registry of error codes. Every error the service (control plane, gateway or agent)
 * answers with is one of these; `status` is its HTTP status. `title` is set where the spec fixes the
 * `error` text of a code (e.g. 404 "Sandbox not found"); the detailed text then goes to `message`.
 */
export const ERROR_CODES = {
  VALIDATION_ERROR: { status: 400 },
  INVALID_TEMPLATE_DEFINITION: { status: 400, title: 'Invalid template definition' },
  INVALID_FILE_METADATA: { status: 400, title: 'Invalid file metadata' },
  INVALID_LANGUAGE: { status: 400 },
  INVALID_PATH: { status: 400 },
  NOT_A_FILE: { status: 400 },
  NOT_A_DIRECTORY: { status: 400 },
  BINARY_FILE: { status: 400 },
  /** A value asked for (template resources, a timeout) is above a per-sandbox maximum of the organization. */
  LIMIT_EXCEEDED: { status: 400 },
  AUTHENTICATION_ERROR: { status: 401, title: 'Unauthorized' },
  TOKEN_EXPIRED: { status: 401, title: 'Unauthorized' },
  PERMISSION_DENIED: { status: 403, title: 'Forbidden' },
  NOT_FOUND: { status: 404, title: 'Sandbox not found' },
  TEMPLATE_NOT_FOUND: { status: 404, title: 'Template not found' },
  BUILD_NOT_FOUND: { status: 404, title: 'Build not found' },
  SNAPSHOT_NOT_FOUND: { status: 404, title: 'Snapshot not found' },
  VOLUME_NOT_FOUND: { status: 404, title: 'Volume not found' },
  KEY_NOT_FOUND: { status: 404, title: 'API key not found' },
  ORG_NOT_FOUND: { status: 404, title: 'Organization not found' },
  ROUTE_NOT_FOUND: { status: 404, title: 'Route not found' },
  FILE_NOT_FOUND: { status: 404, title: 'File not found' },
  PROCESS_NOT_FOUND: { status: 404, title: 'Process not found' },
  CONTEXT_NOT_FOUND: { status: 404, title: 'Context not found' },
  RECORDING_NOT_FOUND: { status: 404, title: 'Recording not found' },
  WINDOW_NOT_FOUND: { status: 404, title: 'Window not found' },
  /** Text looked for on a desktop's screen (OCR) is not there. */
  ELEMENT_NOT_FOUND: { status: 404, title: 'Element not found' },
  METHOD_NOT_ALLOWED: { status: 405 },
  INVALID_STATE: { status: 409 },
  SANDBOX_PAUSED: { status: 409 },
  SANDBOX_STOPPED: { status: 409 },
  TEMPLATE_EXISTS: { status: 409, title: 'Template alias already exists' },
  TEMPLATE_IN_USE: { status: 409 },
  /** A volume a sandbox mounts: deleted only with `?force=true` (volumes.md). */
  VOLUME_IN_USE: { status: 409 },
  TEMPLATE_NOT_READY: { status: 409 },
  ALREADY_EXISTS: { status: 409 },
  /** A sandbox already holds as many code contexts as it may. */
  CONTEXT_LIMIT: { status: 409 },
  /** The organization's sandboxes (and builds) already hold a quota (concurrent sandboxes, memory, disk); freeing some lets it pass. */
  ORG_QUOTA_EXCEEDED: { status: 409 },
  SANDBOX_EXPIRED: { status: 410, title: 'Sandbox expired' },
  PAYLOAD_TOO_LARGE: { status: 413 },
  FILE_TOO_LARGE: { status: 413 },
  DISK_FULL: { status: 413 },
  UNSUPPORTED_MEDIA_TYPE: { status: 415 },
  RATE_LIMIT_EXCEEDED: { status: 429, title: 'Rate limit exceeded' },
  QUOTA_EXCEEDED: { status: 429 },
  INTERNAL_ERROR: { status: 500, title: 'Internal server error' },
  /** A /desktop/* call in a sandbox whose template has no desktop (the official client's DesktopNotAvailableError). */
  DESKTOP_NOT_AVAILABLE: { status: 501 },
  AGENT_UNAVAILABLE: { status: 502 },
  /** A preview URL's port: nothing inside the sandbox accepts connections on it. */
  PORT_NOT_LISTENING: { status: 502 },
  RUNTIME_ERROR: { status: 503 },
  /** No node of the cluster has room for the sandbox now (or none is up): retry later. */
  NO_CAPACITY: { status: 503 },
  /** The node that holds the sandbox is not answering (its lease ran out): its sandboxes come back with it. */
  NODE_UNAVAILABLE: { status: 503 },
  /** The service's database cannot be reached now (a restart of PostgreSQL): retry shortly. */
  STORE_UNAVAILABLE: { status: 503 },
  /** A built-in template is still being built (first start): retry after `retry_after` seconds. */
  TEMPLATE_BUILDING: { status: 503 },
  /**
   * The host's data filesystem has no room for this write beyond the operator's reserve and what
   * is promised to sandbox disks already admitted: refused before anything is written.
   */
  INSUFFICIENT_STORAGE: { status: 507 },
} as const satisfies Record<string, { status: number; title?: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.prototype.hasOwnProperty.call(ERROR_CODES, code);
}

export function statusOf(code: ErrorCode): number {
  return ERROR_CODES[code].status;
}

/** The flat error body of api-decisions.md §1. */
export interface ErrorBody {
  error: string;
  message: string;
  code: ErrorCode;
  request_id?: string;
  [extra: string]: unknown;
}

/** Thrown by services (server or agent); rendered by one error handler. */
export class ServiceError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly extra: Record<string, unknown>;
  readonly headers: Record<string, string>;
  /** What the operator needs and a client must not see (a tool's output, host paths): logged only. */
  detail?: string;

  constructor(code: ErrorCode, message?: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) {
    const def: { status: number; title?: string } = ERROR_CODES[code];
    super(message ?? def.title ?? code);
    this.name = 'ServiceError';
    this.code = code;
    this.status = def.status;
    this.extra = extra;
    this.headers = headers;
  }

  /** Sets `detail`; for chaining at the throw. */
  withDetail(detail: string): this {
    this.detail = detail;
    return this;
  }

  toBody(requestId?: string): ErrorBody {
    const def: { status: number; title?: string } = ERROR_CODES[this.code];
    const body: ErrorBody = {
      ...this.extra,
      error: def.title ?? this.message,
      message: this.message,
      code: this.code,
    };
    if (requestId) body.request_id = requestId;
    return body;
  }
}

export function errorBody(code: ErrorCode, message?: string, extra: Record<string, unknown> = {}, requestId?: string): ErrorBody {
  return new ServiceError(code, message, extra).toBody(requestId);
}
