/** Refresh a sandbox token when it has less than this left. */
export const REFRESH_MARGIN_MS = 60_000;

export interface Token {
  token: string;
  /** Epoch ms; NaN when the service gave no parsable expiry (then it is refreshed only on a 401). */
  expiresAt: number;
}

export type TokenFetcher = () => Promise<Token>;

/**
 * Holds one sandbox's agent token. `get()` refreshes when the token is missing or close to expiry;
 * `invalidate()` (after an agent 401) forces the next `get()` to refresh. Concurrent callers share a
 * single refresh request.
 */
export class TokenManager {
  private current: Token | undefined;
  private inflight: Promise<Token> | undefined;

  constructor(
    private readonly fetchToken: TokenFetcher,
    private readonly now: () => number = Date.now,
  ) {}

  set(token: string, expiresAt: string | number | undefined): void {
    const at = typeof expiresAt === 'number' ? expiresAt : expiresAt ? Date.parse(expiresAt) : NaN;
    this.current = { token, expiresAt: at };
  }

  /** The cached token, if any, without refreshing. */
  peek(): Token | undefined {
    return this.current;
  }

  needsRefresh(): boolean {
    if (!this.current) return true;
    if (Number.isNaN(this.current.expiresAt)) return false;
    return this.current.expiresAt - this.now() < REFRESH_MARGIN_MS;
  }

  async get(): Promise<string> {
    if (!this.needsRefresh()) return this.current!.token;
    return (await this.refresh()).token;
  }

  invalidate(): void {
    this.current = undefined;
  }

  refresh(): Promise<Token> {
    if (!this.inflight) {
      this.inflight = this.fetchToken()
        .then((t) => {
          this.current = t;
          return t;
        })
        .finally(() => {
          this.inflight = undefined;
        });
    }
    return this.inflight;
  }
}
