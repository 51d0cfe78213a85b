/** Refresh a sandbox token when it has less than this left (or half its lifetime, for short-lived tokens). */
export const REFRESH_MARGIN_MS = 60_000;

export interface Token {
  token: string;
  /** Epoch ms; NaN when the service gave no parsable expiry (then it is refreshed only on a 401). */
  expiresAt: number;
}

interface Held extends Token {
  receivedAt: number;
}

export type TokenFetcher = (options?: { signal?: AbortSignal; requestTimeoutMs?: number }) => Promise<Token>;

/**
 * Holds one sandbox's agent token. `get()` refreshes when the token is missing or close to expiry;
 * `invalidate()` (after an agent 401) forces the next `get()` to refresh. Concurrent callers share a
 * single refresh request.
 */
export class TokenManager {
  private current: Held | undefined;
  private inflight: Promise<Token> | undefined;

  constructor(
    private readonly fetchToken: TokenFetcher,
    private readonly now: () => number = Date.now,
  ) {}

  set(token: string, expiresAt: string | number | undefined): void {
    const at = typeof expiresAt === 'number' ? expiresAt : expiresAt ? Date.parse(expiresAt) : NaN;
    this.current = { token, expiresAt: at, receivedAt: this.now() };
  }

  /** The cached token, if any, without refreshing. */
  peek(): Token | undefined {
    return this.current;
  }

  needsRefresh(): boolean {
    if (!this.current) return true;
    const { expiresAt, receivedAt } = this.current;
    if (Number.isNaN(expiresAt)) return false;
    // A token that lives less than two minutes would otherwise be refreshed before every call.
    const margin = Math.min(REFRESH_MARGIN_MS, Math.max(0, (expiresAt - receivedAt) / 2));
    return expiresAt - this.now() < margin;
  }

  async get(): Promise<string> {
    if (!this.needsRefresh()) return this.current!.token;
    return (await this.refresh()).token;
  }

  invalidate(): void {
    this.current = undefined;
  }

  /** Fetches a new token (shared by concurrent callers; the first caller's signal governs the request). */
  refresh(options?: { signal?: AbortSignal; requestTimeoutMs?: number }): Promise<Token> {
    if (!this.inflight) {
      this.inflight = this.fetchToken(options)
        .then((t) => {
          this.current = { ...t, receivedAt: this.now() };
          return t;
        })
        .finally(() => {
          this.inflight = undefined;
        });
    }
    return this.inflight;
  }
}
