import type { Agent, Route } from '../context.js';
import { validateEnvVars } from '../env/store.js';
import { ServiceError } from '../proto.js';

function envBody(vars: Record<string, string>) {
  return { env_vars: vars, count: Object.keys(vars).length, timestamp: new Date().toISOString() };
}

/** {env_vars: {...}}; a bare object of strings is accepted too. */
function varsFrom(body: Record<string, unknown>): Record<string, string> {
  if (body.env_vars !== undefined) return validateEnvVars(body.env_vars, 'env_vars');
  const bare = Object.fromEntries(Object.entries(body).filter(([k]) => k !== 'merge' && k !== 'timestamp'));
  if (Object.keys(bare).length === 0) throw new ServiceError('VALIDATION_ERROR', 'env_vars is required', { field: 'env_vars' });
  return validateEnvVars(bare, 'env_vars');
}

export function envRoutes(agent: Agent): Route[] {
  const store = agent.envStore;
  return [
    { method: 'GET', path: '/env', handler: () => envBody(store.all()) },
    {
      method: 'PUT',
      path: '/env',
      handler: async (ctx) => {
        const body = await ctx.body();
        const vars = varsFrom(body);
        return envBody(body.merge === true ? await store.merge(vars) : await store.replace(vars));
      },
    },
    { method: 'PATCH', path: '/env', handler: async (ctx) => envBody(await store.merge(varsFrom(await ctx.body()))) },
    {
      method: 'POST',
      path: '/env',
      handler: async (ctx) => envBody(await store.merge(varsFrom(await ctx.body()))),
    },
    {
      method: 'DELETE',
      path: '/env/*',
      // Idempotent: deleting a variable that is not set answers the set as it is.
      handler: async (ctx) => {
        await store.delete(ctx.rest);
        return envBody(store.all());
      },
    },
    {
      method: 'DELETE',
      path: '/env',
      handler: async () => envBody(await store.replace({})),
    },
  ];
}
