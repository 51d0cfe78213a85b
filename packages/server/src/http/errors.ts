import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { renderError, ServiceError } from '@sandboxd/protocol';

/**
 * Fastify's own errors about the request (validation, body parsing) as the registry's codes;
 * anything else is returned as it is, for renderError to tell outages from bugs.
 */
export function toServiceError(err: unknown): unknown {
  if (err instanceof ServiceError) return err;
  const fe = err as FastifyError & { validationContext?: string };
  if (fe && Array.isArray(fe.validation)) {
    // Ajv's message omits which property was not allowed; name it.
    const extra = (fe.validation[0] as { params?: { additionalProperty?: unknown } } | undefined)?.params?.additionalProperty;
    const which = typeof extra === 'string' ? `: ${JSON.stringify(extra)}` : '';
    return new ServiceError('VALIDATION_ERROR', fe.message.replace(/^(body|querystring|params)\//, '$1.') + which);
  }
  switch (fe?.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ServiceError('PAYLOAD_TOO_LARGE', 'request body is too large');
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ServiceError('UNSUPPORTED_MEDIA_TYPE', `unsupported content type; send application/json`);
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new ServiceError('VALIDATION_ERROR', fe.message);
  }
  // Only Fastify's own 4xx are about the request; a 4xx status on anything else (a library's
  // error object) says nothing about what the client did.
  if (fe && typeof fe.code === 'string' && fe.code.startsWith('FST_') && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new ServiceError('VALIDATION_ERROR', fe.message);
  }
  return err;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The error code this request was answered with (for the metrics). */
    errorCode?: string;
  }
}

export function errorHandler(err: unknown, req: FastifyRequest, reply: FastifyReply): void {
  const r = renderLogged(err, req);
  void reply.code(r.status).headers(r.headers).send(r.body);
}

/** The error as the registry renders it, recorded on the request and logged when it is an incident (for handlers that send it in another shape: routes/e2b.ts). */
export function renderLogged(err: unknown, req: FastifyRequest): ReturnType<typeof renderError> {
  const r = renderError(toServiceError(err), String(req.id));
  req.errorCode = r.body.code;
  if (r.incident) {
    const { id, kind, cause, detail } = r.incident;
    const line = { err: cause, incident_id: id, code: r.body.code, ...(detail ? { detail } : {}) };
    if (kind === 'bug') req.log.error(line, 'request failed: a bug (500)');
    else req.log.warn(line, `request failed: ${r.body.code} (${r.status})`);
  }
  return r;
}
