import type { AgentState, Route } from '../context.js';
import { LANGUAGES } from '@sandboxd/protocol';

export function healthRoutes(state: AgentState): Route[] {
  return [
    {
      method: 'GET',
      path: '/health',
      handler: () => ({
        status: 'healthy',
        version: state.version,
        uptime_seconds: (Date.now() - state.startedAt.getTime()) / 1000,
        features: ['code_execution', 'file_operations', 'commands', 'environment', 'metrics'],
        languages: [...LANGUAGES],
      }),
    },
    {
      method: 'GET',
      path: '/info',
      handler: () => ({
        agent: 'sandboxd-agent',
        version: state.version,
        sandbox_id: state.sandboxId,
        started_at: state.startedAt.toISOString(),
      }),
    },
  ];
}
