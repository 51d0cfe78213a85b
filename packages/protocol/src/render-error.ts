import { randomBytes } from 'node:crypto';
import { isErrorCode, ServiceError, type ErrorBody, type ErrorCode } from './errors.js';

/**
 * The one error renderer of the three servers (control plane, gateway, agent). What was thrown while
 * serving a request becomes one of three answers:
 * - a user's mistake (a ServiceError of status < 500), or a refusal that waiting does not lift (507
 *   INSUFFICIENT_STORAGE: the host has no room; something must be freed): its code, status and
 *   message, as thrown;
 * - an outage (a ServiceError of status 502 or 503: the runtime, the host or the agent could not do it
 *   now, or an error that names one of NAMED_OUTAGES in its `code`): its code and public message,
 *   `retry_after` in the body and `Retry-After`, and an incident id;
 * - a bug (anything else, INTERNAL_ERROR included): 500 INTERNAL_ERROR with an incident id and
 *   nothing of what was thrown.
 * For the last two the server logs `incident` (id, kind, cause and the thrower's `detail`), so the
 * id a client reports finds the log line; a ServiceError's `detail` never reaches the body.
 */
export interface RenderedError {
  status: number;
  headers: Record<string, string>;
  body: ErrorBody;
  incident?: Incident;
}

export interface Incident {
  id: string;
  kind: 'bug' | 'outage';
  /** What was thrown (logged with its stack). */
  cause: unknown;
  /** The thrower's text for the operator (a ServiceError's message and detail). */
  detail?: string;
}

/** Seconds an outage asks a client to wait when the thrower did not say. */
export const OUTAGE_RETRY_AFTER_SECONDS = 1;

/**
 * Outages thrown by layers that do not speak the API (the server's store), as errors of their own
 * that their callers test for, carrying a code of the registry: what each is rendered with. Every
 * server renders them alike, none has to import the thrower to know one, and what the thrower said
 * (a database's host, its user) goes to the log only.
 */
const NAMED_OUTAGES: Partial<Record<ErrorCode, { message: string; retryAfterSeconds: number }>> = {
  STORE_UNAVAILABLE: { message: 'the service cannot reach its database now; retry shortly', retryAfterSeconds: 2 },
};

function namedOutage(err: unknown): unknown {
  if (!(err instanceof Error) || err instanceof ServiceError) return err;
  const code = (err as { code?: unknown }).code;
  const outage = isErrorCode(code) ? NAMED_OUTAGES[code] : undefined;
  if (!outage) return err;
  return new ServiceError(code as ErrorCode, outage.message, { retry_after: outage.retryAfterSeconds }).withDetail(err.message);
}

/** `inc_` and 16 hex digits: unique enough to grep one log for. */
export function newIncidentId(): string {
  return `inc_${randomBytes(8).toString('hex')}`;
}

/**
 * Errors that mean our code is wrong, not that the world failed: what the language throws for a
 * broken contract, and failed assertions. A service that wraps what it calls into an outage
 * (RUNTIME_ERROR: "try again") lets these through, so they are rendered as the bugs they are.
 */
export function isProgrammingError(err: unknown): boolean {
  return (
    err instanceof TypeError ||
    err instanceof ReferenceError ||
    err instanceof RangeError ||
    err instanceof SyntaxError ||
    (err instanceof Error && (err as { code?: unknown }).code === 'ERR_ASSERTION')
  );
}

/**
 * Text for the log about anything thrown: a stack when there is one (what a wrapper's `detail`
 * keeps of its cause), never itself a throw (a null-prototype object, a throwing toString).
 */
export function describeCause(err: unknown): string {
  try {
    if (err instanceof Error) return err.stack ?? `${err.name}: ${err.message}`;
    return typeof err === 'string' ? err : JSON.stringify(err) ?? String(err);
  } catch {
    return Object.prototype.toString.call(err);
  }
}

export function renderError(err: unknown, requestId?: string): RenderedError {
  try {
    const r = render(err, requestId);
    JSON.stringify(r.body); // an `extra` that cannot be sent (a cycle, a BigInt) must fail here, not in a listener
    return r;
  } catch {
    // What was thrown carries something no body can hold: it is rendered as the bug it is.
    return bug(err, requestId);
  }
}

function render(thrown: unknown, requestId?: string): RenderedError {
  const err = namedOutage(thrown);
  if (err instanceof ServiceError && (err.status < 500 || err.code === 'INSUFFICIENT_STORAGE')) {
    return { status: err.status, headers: stringHeaders(err.headers), body: err.toBody(requestId) };
  }
  const id = newIncidentId();
  if (err instanceof ServiceError && err.code !== 'INTERNAL_ERROR') {
    const given = err.extra.retry_after;
    const retryAfter = typeof given === 'number' && Number.isFinite(given) && given > 0 ? Math.ceil(given) : OUTAGE_RETRY_AFTER_SECONDS;
    const body: ErrorBody = { ...err.toBody(requestId), retry_after: retryAfter, incident_id: id };
    return {
      status: err.status,
      headers: { ...stringHeaders(err.headers), 'retry-after': String(retryAfter) },
      body,
      // What was thrown, not what it was rendered as: a named outage's stack and cause are the log's.
      incident: { id, kind: 'outage', cause: thrown, detail: err.detail ? `${err.message}: ${err.detail}` : err.message },
    };
  }
  return bug(err, requestId, id);
}

/** 500 INTERNAL_ERROR: the body holds nothing of `err` (and so cannot fail to serialize). */
function bug(err: unknown, requestId: string | undefined, id = newIncidentId()): RenderedError {
  const body: ErrorBody = {
    error: 'Internal server error',
    message: `internal error; the operator can find it in the log as incident ${id}`,
    code: 'INTERNAL_ERROR',
    incident_id: id,
  };
  if (typeof requestId === 'string' && requestId) body.request_id = requestId;
  const detail = err instanceof ServiceError ? (err.detail ? `${err.message}: ${err.detail}` : err.message) : undefined;
  return { status: 500, headers: {}, body, incident: { id, kind: 'bug', cause: err, ...(detail ? { detail } : {}) } };
}

/** Header values a response can carry: strings without CR/LF (anything else is dropped). */
function stringHeaders(h: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (typeof v === 'string' && !/[\r\n\0]/.test(v) && /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(k)) out[k] = v;
  return out;
}
