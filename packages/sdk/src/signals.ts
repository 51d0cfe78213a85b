import { AbortError, SandboxdError, TimeoutError } from './errors.js';

/** The reason we put on our own client-side timeout, so it can be told apart from a caller's abort. */
export class DeadlineReached extends Error {
  constructor(readonly timeoutMs: number) {
    super(`timed out after ${timeoutMs} ms`);
    this.name = 'DeadlineReached';
  }
}

export interface Scope {
  signal: AbortSignal;
  /** Stops the deadline but keeps following the caller's signal (for bodies read after the headers came). */
  clearTimer(): void;
  /** Removes listeners and timers; call when the operation is over. */
  dispose(): void;
}

/**
 * A signal that aborts when the caller's signal does or when `timeoutMs` passes (AbortSignal.any is
 * Node 20+, and we support 18).
 */
export function scope(signal: AbortSignal | undefined, timeoutMs: number | undefined): Scope {
  const controller = new AbortController();
  const cleanups: Array<() => void> = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  if (signal) {
    if (signal.aborted) controller.abort(signal.reason);
    else {
      const onAbort = (): void => controller.abort(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      cleanups.push(() => signal.removeEventListener('abort', onAbort));
    }
  }
  if (timeoutMs !== undefined && timeoutMs > 0 && Number.isFinite(timeoutMs) && !controller.signal.aborted) {
    timer = setTimeout(() => controller.abort(new DeadlineReached(timeoutMs)), timeoutMs);
    timer.unref?.();
  }
  return {
    signal: controller.signal,
    clearTimer: () => clearTimeout(timer),
    dispose: () => {
      clearTimeout(timer);
      for (const c of cleanups.splice(0)) c();
    },
  };
}

/** Turns an abort reason into the SDK's error: TimeoutError for deadlines (ours or AbortSignal.timeout()), AbortError otherwise. */
export function abortError(reason: unknown, what = 'request'): SandboxdError {
  if (reason instanceof SandboxdError) return reason;
  if (reason instanceof DeadlineReached) {
    return new TimeoutError(`${what} timed out after ${reason.timeoutMs} ms`, { code: 'TIMEOUT', cause: reason });
  }
  if (reason instanceof Error && reason.name === 'TimeoutError') {
    return new TimeoutError(`${what} timed out (${reason.message})`, { code: 'TIMEOUT', cause: reason });
  }
  return new AbortError(`${what} was aborted`, { code: 'ABORTED', cause: reason });
}

export function throwIfAborted(signal: AbortSignal | undefined, what?: string): void {
  if (signal?.aborted) throw abortError(signal.reason, what);
}

/** Waits `ms`, or rejects with the abort error when the signal fires first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal.reason));
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(abortError(signal?.reason));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
