import { readdir, readFile } from 'node:fs/promises';
import type { Agent, Route } from '../context.js';
import { SystemStats } from '../metrics/system.js';

/** GET /processes: every process in the sandbox (its pid namespace), like a small `ps`. */
async function systemProcesses() {
  const names = (await readdir('/proc').catch(() => [] as string[])).filter((n) => /^\d+$/.test(n));
  const rows = await Promise.all(
    names.map(async (pid) => {
      try {
        const [stat, cmdline] = await Promise.all([readFile(`/proc/${pid}/stat`, 'utf8'), readFile(`/proc/${pid}/cmdline`, 'utf8')]);
        const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
        const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        return { pid: Number(pid), ppid: Number(f[1]), name, status: f[0], command: cmdline.split('\0').filter(Boolean).join(' ') || `[${name}]` };
      } catch {
        return null;
      }
    }),
  );
  const processes = rows.filter((r) => r !== null);
  return { processes, count: processes.length, timestamp: new Date().toISOString() };
}

function agentMemory() {
  const m = process.memoryUsage();
  return { pid: process.pid, rss_bytes: m.rss, heap_used_bytes: m.heapUsed, heap_total_bytes: m.heapTotal, external_bytes: m.external, array_buffers_bytes: m.arrayBuffers };
}

export function metricsRoutes(agent: Agent): Route[] {
  const system = new SystemStats(agent.config.limits);
  const stats = agent.stats;
  const snapshot = async () => {
    const ex = agent.executor;
    const [sys, processCount, cacheSize] = await Promise.all([system.snapshot(), system.processCount(), ex.programs.size()]);
    const hits = ex.programs.hits + ex.results.hits;
    const misses = ex.programs.misses + ex.results.misses;
    return {
      timestamp: new Date().toISOString(),
      uptime_seconds: Math.round((Date.now() - stats.startedAt.getTime()) / 10) / 100,
      total_requests: stats.totalRequests,
      total_errors: stats.totalErrors,
      error_count: stats.totalErrors,
      requests_total: Object.fromEntries(stats.requestsByPath),
      total_executions: stats.totalExecutions,
      failed_executions: stats.failedExecutions,
      active_executions: ex.registry.activeCount,
      ...stats.durationSummary(),
      system: sys,
      process: { count: processCount, running: ex.registry.activeCount },
      cache: { size: cacheSize + ex.results.size, hits, misses, hit_rate: hits + misses > 0 ? Math.round((hits / (hits + misses)) * 1000) / 1000 : 0 },
      agent: agentMemory(),
    };
  };
  return [
    { method: 'GET', path: '/metrics/snapshot', handler: snapshot },
    { method: 'GET', path: '/metrics', handler: snapshot },
    { method: 'GET', path: '/system', handler: async () => system.snapshot() },
    { method: 'GET', path: '/processes', handler: systemProcesses },
  ];
}
