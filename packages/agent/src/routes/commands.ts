import type { Agent, Route } from '../context.js';
import { validateEnvVars } from '../env/store.js';
import type { CommandOptions } from '../exec/executor.js';
import { resolvePath } from '../files/paths.js';
import { optionalString, optionalStringArray, requiredString, stdinInput, timeoutSeconds, workingDir } from '../http/validate.js';
import { DEFAULT_BACKGROUND_TIMEOUT_S, DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S } from './execute.js';

function parseCommand(agent: Agent, body: Record<string, unknown>, defaultTimeoutSec: number): CommandOptions {
  const dir = workingDir(body);
  return {
    command: requiredString(body, 'command'),
    args: optionalStringArray(body, 'args'),
    timeoutSec: timeoutSeconds(body, 'timeout', defaultTimeoutSec, MAX_TIMEOUT_S),
    cwd: dir === undefined ? undefined : resolvePath(dir, agent.config.workspaceDir, 'working_dir'),
    env: body.env === undefined || body.env === null ? undefined : validateEnvVars(body.env, 'env'),
    name: optionalString(body, 'name'),
    stdin: stdinInput(body),
  };
}

export function commandRoutes(agent: Agent): Route[] {
  return [
    {
      method: 'POST',
      path: '/commands/run',
      handler: async (ctx) => agent.executor.command(parseCommand(agent, await ctx.body(), DEFAULT_TIMEOUT_S)),
    },
    {
      method: 'POST',
      path: '/commands/background',
      handler: async (ctx) => agent.executor.startCommand(parseCommand(agent, await ctx.body(), DEFAULT_BACKGROUND_TIMEOUT_S)),
    },
  ];
}
