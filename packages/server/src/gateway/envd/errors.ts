import { Code, ConnectError } from '@connectrpc/connect';
import { ServiceError } from '@sandboxd/protocol';

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
    case 502:
    case 503:
      return Code.Unavailable;
    default:
      return Code.Internal;
  }
}

/** Logs an error that is ours (a bug, an agent that failed), not the client's. */
export type OnEnvdFault = (what: string, err: unknown) => void;

/** Any error of a handler as a ConnectError; ours are logged and answered without detail. */
export function toConnectError(err: unknown, what: string, onFault: OnEnvdFault): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof ServiceError) {
    if (err.status >= 500) onFault(what, err);
    return new ConnectError(err.message, connectCode(err));
  }
  onFault(what, err);
  return new ConnectError(`${what} failed`, Code.Internal);
}

/** A handler whose errors reach the client as ConnectErrors. */
export function guarded(onFault: OnEnvdFault) {
  return <A extends unknown[], R>(what: string, fn: (...a: A) => Promise<R> | R) =>
    async (...a: A): Promise<R> => {
      try {
        return await fn(...a);
      } catch (err) {
        throw toConnectError(err, what, onFault);
      }
    };
}

/** The keepalive interval a client asks for (Keepalive-Ping-Interval, seconds), in ms; the agent bounds it. */
export function keepaliveHeader(header: string | null): number | undefined {
  const n = header === null ? NaN : Number(header);
  return Number.isFinite(n) && n >= 1 ? Math.min(n, 300) * 1000 : undefined;
}
