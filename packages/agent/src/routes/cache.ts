import type { Agent, Route } from '../context.js';
import type { CacheStats } from '../proto.js';

export function cacheRoutes(agent: Agent): Route[] {
  const ex = agent.executor;
  return [
    {
      method: 'GET',
      path: '/cache/stats',
      handler: async (): Promise<CacheStats & Record<string, unknown>> => {
        const programs = await ex.programs.size();
        const hits = ex.programs.hits + ex.results.hits;
        return {
          cache: {
            size: programs + ex.results.size,
            hits,
            misses: ex.programs.misses + ex.results.misses,
            max_size: ex.results.maxEntries,
            total_hits: hits,
            ttl: Math.round(ex.results.ttlMs / 1000),
          },
          programs: { size: programs, hits: ex.programs.hits, misses: ex.programs.misses },
          results: { size: ex.results.size, hits: ex.results.hits, misses: ex.results.misses },
          timestamp: new Date().toISOString(),
        };
      },
    },
    {
      method: 'POST',
      path: '/cache/clear',
      handler: async () => {
        const removed = (await ex.programs.clear()) + ex.results.clear();
        return { success: true, message: 'cache cleared', entries_removed: removed, timestamp: new Date().toISOString() };
      },
    },
  ];
}
