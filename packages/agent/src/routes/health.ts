import type { Agent, Route } from '../context.js';
import { LANGUAGES } from '../proto.js';

export function healthRoutes(agent: Agent): Route[] {
  const features = ['code_execution', 'file_operations', 'commands', 'environment', 'metrics', 'processes', 'cache', 'rich_outputs', 'streaming', 'contexts', 'python_kernel', 'javascript_kernel'];
  if (agent.helperPath) features.push('terminal');
  // A template with a display (SANDBOXD_DESKTOP): the console shows its Desktop panel on this.
  if (agent.config.desktop) features.push('desktop');
  return [
    {
      method: 'GET',
      path: '/health',
      handler: () => ({
        status: 'healthy',
        version: agent.version,
        uptime_seconds: Math.round((Date.now() - agent.stats.startedAt.getTime()) / 10) / 100,
        features,
        languages: [...LANGUAGES],
        active_executions: agent.executor.registry.activeCount,
      }),
    },
    { method: 'GET', path: '/ping', handler: () => ({ status: 'ok', message: 'pong' }) },
    {
      method: 'GET',
      path: '/info',
      handler: () => ({
        agent: 'sandboxd-agent',
        version: agent.version,
        sandbox_id: agent.config.sandboxId,
        vm_id: agent.config.sandboxId,
        started_at: agent.stats.startedAt.toISOString(),
        start_time: agent.stats.startedAt.toISOString(),
        platform: `${process.platform}/${process.arch}`,
        node_version: process.version,
        workspace: agent.config.workspaceDir,
        languages: [...LANGUAGES],
      }),
    },
  ];
}
