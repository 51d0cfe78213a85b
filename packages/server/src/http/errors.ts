import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';

/** Maps anything thrown in a route to the one error shape of api-decisions.md §1. */
export function toServiceError(err: unknown): ServiceError {
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
  if (fe && typeof fe.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new ServiceError('VALIDATION_ERROR', fe.message);
  }
  return new ServiceError('INTERNAL_ERROR', 'internal error');
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The error code this request was answered with (for the metrics). */
    errorCode?: string;
  }
}

export function errorHandler(err: unknown, req: FastifyRequest, reply: FastifyReply): void {
  const se = toServiceError(err);
  req.errorCode = se.code;
  if (se.status >= 500) req.log.error({ err }, 'request failed');
  void reply.code(se.status).headers(se.headers).send(se.toBody(String(req.id)));
}
