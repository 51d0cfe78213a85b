import { ServiceError } from '@sandboxd/protocol';

/**
 * The store could not be reached (a networked store's server is down, restarting, or refusing
 * connections): nothing about the request was wrong, and the same call may succeed in a moment.
 * The HTTP layer answers it with 503 and Retry-After; every other store error stays a bug.
 */
export class StoreUnavailableError extends Error {
  override readonly name = 'StoreUnavailableError';
  readonly code = 'STORE_UNAVAILABLE';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** A store outage as the API's error (503 STORE_UNAVAILABLE, Retry-After); anything else as it is. */
export function outageAsServiceError(err: unknown): unknown {
  if (err instanceof StoreUnavailableError) return new ServiceError('STORE_UNAVAILABLE', 'the service cannot reach its database now; retry shortly', { retry_after: 2 }).withDetail(err.message);
  return err;
}
