import { isErrorCode, isProgrammingError, ServiceError, type ErrorCode } from '@sandboxd/protocol';

/**
 * How an error thrown on a node crosses the node API to control, and comes out there as what was
 * thrown: a ServiceError as itself (code, message, extra, and its detail for control's log), a bug
 * of ours (protocol's isProgrammingError) as a bug (500 on control, never a "try again"), and
 * anything else the node met (a file it could not write, a tool that failed) as the outage it is:
 * RUNTIME_ERROR, 503, as the runtime itself reports what fails under it. The clients of the public
 * API never see this shape: control renders what comes out (protocol/render-error.ts).
 */
export interface NodeErrorBody {
  code: ErrorCode;
  message: string;
  /** For control's log (the node's own detail of a ServiceError, or what else was thrown). */
  detail?: string;
  extra?: Record<string, unknown>;
  /** A bug of ours on the node: thrown again on control as one. */
  thrown?: 'programming';
}

/** The node's answer to an error: its status and body. */
export function nodeErrorAnswer(err: unknown): { status: number; body: NodeErrorBody } {
  if (err instanceof ServiceError) {
    return { status: err.status, body: { code: err.code, message: err.message, ...(err.detail ? { detail: err.detail } : {}), ...(Object.keys(err.extra).length ? { extra: err.extra } : {}) } };
  }
  const message = err instanceof Error ? err.message : String(err);
  const detail = err instanceof Error ? (err.stack ?? message) : message;
  if (isProgrammingError(err)) return { status: 500, body: { code: 'INTERNAL_ERROR', message, detail, thrown: 'programming' } };
  return { status: 503, body: { code: 'RUNTIME_ERROR', message: 'the node failed on this sandbox; try again', detail } };
}

/** The error a node's answer of `status` and `text` carries, as control throws it again. */
export function errorFromNode(nodeId: string, status: number, text: string): Error {
  let e: { code?: unknown; message?: unknown; detail?: unknown; extra?: unknown; thrown?: unknown } = {};
  try {
    e = JSON.parse(text) as typeof e;
  } catch {
    /* not a node's answer */
  }
  const message = typeof e.message === 'string' ? e.message.slice(0, 4096) : `node ${nodeId} answered ${status}`;
  if (e.thrown === 'programming') return new TypeError(`node ${nodeId}: ${message}`);
  // A status with no registry code of ours is the node's outage (a proxy in front of it, say).
  const code = isErrorCode(e.code) && e.code !== 'INTERNAL_ERROR' ? e.code : 'RUNTIME_ERROR';
  const extra = e.extra && typeof e.extra === 'object' && !Array.isArray(e.extra) ? (e.extra as Record<string, unknown>) : {};
  const err = new ServiceError(code, message, extra);
  if (typeof e.detail === 'string') err.withDetail(`node ${nodeId}: ${e.detail.slice(0, 16_384)}`);
  return err;
}

/** An answer of a node that is not what the node API answers: the node's fault (it may be compromised). */
export function badNodeAnswer(nodeId: string, what: string): ServiceError {
  return new ServiceError('RUNTIME_ERROR', `node ${nodeId} answered something that is not an answer of a node`).withDetail(what);
}
