import type { Store } from '../store/types/index.js';
import type { TokenService } from './tokens.js';

/** How often a process that checks tokens reads the keys revoked since it last looked. */
export const REVOCATIONS_EVERY_MS = 2000;
/** Read back this far behind the newest revocation seen: another process's clock may lag this one's. */
const SKEW_MS = 5 * 60_000;

/**
 * Keeps a process's list of revoked API keys (TokenService.keysRevoked) in step with the store:
 * all of them at start, then every REVOCATIONS_EVERY_MS those revoked since (a revocation made by
 * another replica, an edge's peer, or `sandboxd keys revoke` on the host). A revocation made in
 * this process is told at once (`now`). The tokens a revoked key made (sandbox access tokens,
 * preview links and sessions) then fail here within that interval, cached or not.
 */
export class Revocations {
  private since = '';
  private timer: NodeJS.Timeout | undefined;
  private reading: Promise<void> | undefined;

  constructor(
    private readonly store: Store,
    private readonly tokens: TokenService,
    private readonly log: (msg: string, extra?: Record<string, unknown>) => void,
  ) {}

  /** Reads every revoked key, then keeps reading; resolves once the first read is in. */
  async start(everyMs = REVOCATIONS_EVERY_MS): Promise<void> {
    await this.read();
    this.timer = setInterval(() => {
      this.reading ??= this.read()
        .catch((err: unknown) => this.log('reading revoked API keys failed; tried again', { error: String(err) }))
        .finally(() => (this.reading = undefined));
    }, everyMs);
    this.timer.unref();
  }

  /** A key this process revoked. */
  now(keyId: string): void {
    this.tokens.keysRevoked([keyId]);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async read(): Promise<void> {
    const rows = await this.store.keys.revokedSince(this.since);
    if (rows.length === 0) return;
    this.tokens.keysRevoked(rows.map((r) => r.id));
    const newest = Date.parse(rows[rows.length - 1]!.revokedAt);
    if (Number.isFinite(newest)) this.since = new Date(newest - SKEW_MS).toISOString();
  }
}
