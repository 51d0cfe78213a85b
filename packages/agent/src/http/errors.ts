import { describeCause, renderError, type RenderedError } from '../proto.js';
import { logLine } from '../log.js';

/**
 * The agent's side of the one error renderer (renderError): the answer to give, with the incident
 * behind a 5xx written to the agent's log (readable in the sandbox) under the id the client gets.
 */
export function renderAgentError(err: unknown, requestId: string | undefined, where: string): RenderedError {
  const r = renderError(err, requestId);
  if (r.incident) {
    const { id, kind, cause, detail } = r.incident;
    const what = kind === 'bug' ? describeCause(cause) : (detail ?? describeCause(cause));
    logLine(`${where}: incident ${id} (${kind})${requestId ? ` request ${requestId}` : ''}: ${kind === 'bug' && detail ? `${detail}\n` : ''}${what}`);
  }
  return r;
}

/** The same for a WebSocket session: an `error` frame of the body's code and message. */
export function errorFrame(err: unknown, requestId: string | undefined, where: string): { type: 'error'; [field: string]: unknown } {
  const { body } = renderAgentError(err, requestId, where);
  const { error: _title, message, request_id: _rid, ...rest } = body;
  return { ...rest, type: 'error', error: message };
}
