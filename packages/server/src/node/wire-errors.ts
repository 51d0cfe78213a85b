import { isErrorCode, isProgrammingError, ServiceError, type ErrorCode } from '@sandboxd/protocol';

/**
 * How an error thrown on a node crosses the node API to control, and comes out there as what was
 * thrown: a ServiceError as itself (code, message, extra, and its detail for control's log), and
 * anything else (a tool that failed, a bug) as a plain error, so that control renders it exactly
 * as the all-in-one daemon renders the same error thrown in process. The clients of the public
 * API never see this shape: control renders what comes out (protocol/render-error.ts).
 */
export interface NodeErrorBody {
  code: ErrorCode;
  message: string;
  /** For control's log (the node's own detail of a ServiceError, or what else was thrown). */
  detail?: string;
  extra?: Record<string, unknown>;
  /** Not a ServiceError: thrown again on control as a plain error (`programming`: a bug of ours). */
  thrown?: 'error' | 'programming';
}

/** The node's answer to an error: its status and body. */
export function nodeErrorAnswer(err: unknown): { status: number; body: NodeErrorBody } {
  if (err instanceof ServiceError) {
    return { status: err.status, body: { code: err.code, message: err.message, ...(err.detail ? { detail: err.detail } : {}), ...(Object.keys(err.extra).length ? { extra: err.extra } : {}) } };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { status: 500, body: { code: 'INTERNAL_ERROR', message, detail: err instanceof Error ? (err.stack ?? message) : message, thrown: isProgrammingError(err) ? 'programming' : 'error' } };
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
  if (e.thrown === 'error') return new Error(`node ${nodeId}: ${message}`);
  // A status with no registry code of ours is the node's outage (a proxy in front of it, say).
  const code = isErrorCode(e.code) && e.code !== 'INTERNAL_ERROR' ? e.code : 'RUNTIME_ERROR';
  const extra = e.extra && typeof e.extra === 'object' && !Array.isArray(e.extra) ? (e.extra as Record<string, unknown>) : {};
  const err = new ServiceError(code, message, extra);
  if (typeof e.detail === 'string') err.withDetail(`node ${nodeId}: ${e.detail.slice(0, 16_384)}`);
  return err;
}
