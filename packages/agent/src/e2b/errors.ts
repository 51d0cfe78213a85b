import { Code, ConnectError } from '@connectrpc/connect';
import { describeCause, isProgrammingError, ServiceError } from '../proto.js';
import { logLine } from '../log.js';

/** The Connect code of one of our errors: what E2B's clients turn into their typed errors. */
export function connectCode(err: ServiceError): Code {
  if (err.code === 'ALREADY_EXISTS') return Code.AlreadyExists;
  if (err.code === 'DISK_FULL' || err.code === 'INSUFFICIENT_STORAGE') return Code.ResourceExhausted;
  switch (err.status) {
    case 400:
      return Code.InvalidArgument;
    case 401:
      return Code.Unauthenticated;
    case 403:
      return Code.PermissionDenied;
    case 404:
      return Code.NotFound;
    case 409:
      return Code.FailedPrecondition;
    case 413:
    case 429:
      return Code.ResourceExhausted;
    default:
      return Code.Internal;
  }
}

/** Any error of a handler as a ConnectError; our own bugs are logged and answered without detail. */
export function toConnectError(err: unknown, what: string): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof ServiceError) {
    if (err.status >= 500) logLine(`e2b ${what}: ${err.message}${err.detail ? ` (${err.detail})` : ''}`);
    return new ConnectError(err.message, connectCode(err));
  }
  logLine(`e2b ${what} failed: ${isProgrammingError(err) ? (err as Error).stack : describeCause(err)}`);
  return new ConnectError(`${what} failed`, Code.Internal);
}
