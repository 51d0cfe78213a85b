import type { AgentClient } from './agent.js';
import type { CallOptions } from './client.js';
import type { CacheStats } from './types.js';
import { toCacheStats } from './wire.js';

/** The agent's cache of compiled programs and (opt-in) execution results. */
export class Cache {
  constructor(private readonly agent: AgentClient) {}

  async stats(options: CallOptions = {}): Promise<CacheStats> {
    const body = await this.agent.http.json({ method: 'GET', path: '/cache/stats', signal: options.signal, timeoutMs: options.requestTimeoutMs, what: 'cache stats' });
    return toCacheStats(body);
  }

  /** Empties the cache; resolves with the number of entries removed. */
  async clear(options: CallOptions = {}): Promise<number> {
    const body = await this.agent.http.json<{ entries_removed?: unknown }>({
      method: 'POST',
      path: '/cache/clear',
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: 'clear cache',
    });
    return typeof body.entries_removed === 'number' ? body.entries_removed : 0;
  }
}
