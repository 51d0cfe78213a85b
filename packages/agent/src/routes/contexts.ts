import { stat } from 'node:fs/promises';
import type { Agent, Route } from '../context.js';
import { validateEnvVars } from '../env/store.js';
import { CONTEXT_LANGUAGES, contextInfo, isContextLanguage } from '../exec/contexts.js';
import { resolvePath } from '../files/paths.js';
import { optionalString, workingDir } from '../http/validate.js';
import { normalizeLanguage, ServiceError } from '../proto.js';

/**
 * Code contexts (each a persistent interpreter whose variables live between executions) and the
 * Jupyter-style list of their kernels that real clients read.
 */
export function contextRoutes(agent: Agent): Route[] {
  const contexts = agent.executor.contexts;
  return [
    {
      method: 'POST',
      path: '/contexts',
      handler: async (ctx) => {
        const body = await ctx.body();
        const input = optionalString(body, 'language');
        const language = normalizeLanguage(input);
        if (!language || !isContextLanguage(language)) {
          throw new ServiceError('INVALID_LANGUAGE', `contexts run ${CONTEXT_LANGUAGES.join(', ')}, not ${JSON.stringify(input)}`, { field: 'language' });
        }
        const dir = workingDir(body);
        const cwd = dir === undefined ? undefined : resolvePath(dir, agent.config.workspaceDir, 'cwd');
        if (cwd !== undefined) {
          const st = await stat(cwd).catch(() => null);
          if (!st) throw new ServiceError('INVALID_PATH', `working directory does not exist: ${cwd}`, { path: cwd, field: 'cwd' });
          if (!st.isDirectory()) throw new ServiceError('NOT_A_DIRECTORY', `working directory is not a directory: ${cwd}`, { path: cwd, field: 'cwd' });
        }
        const env = body.env ?? body.env_vars;
        const created = contexts.create({
          language,
          cwd,
          env: env === undefined || env === null ? undefined : validateEnvVars(env, 'env'),
        });
        return contextInfo(created);
      },
    },
    { method: 'GET', path: '/contexts', handler: () => ({ contexts: contexts.list().map(contextInfo) }) },
    { method: 'GET', path: '/contexts/*', handler: (ctx) => contextInfo(contexts.get(ctx.rest)) },
    {
      method: 'POST',
      path: '/contexts/*',
      handler: (ctx) => {
        const m = /^([^/]+)\/restart$/.exec(ctx.rest);
        if (!m) throw new ServiceError('ROUTE_NOT_FOUND', `no route for POST /contexts/${ctx.rest}`);
        return { ...contextInfo(contexts.restart(m[1]!)), message: 'kernel restarted: the next execution starts with a fresh state' };
      },
    },
    {
      method: 'DELETE',
      path: '/contexts/*',
      handler: (ctx) => {
        contexts.delete(ctx.rest);
        return { id: ctx.rest, deleted: true };
      },
    },
    {
      method: 'GET',
      path: '/jupyter/sessions',
      handler: () => ({
        sessions: contexts.list().map((c) => ({
          kernel_id: c.kernel.id,
          context_id: c.id,
          language: c.language,
          execution_state: c.kernel.state === 'busy' ? 'busy' : c.kernel.state === 'starting' ? 'starting' : 'idle',
          // A context's kernel starts with its first execution, and again after it died.
          alive: c.kernel.state !== 'dead',
          connections: c.kernel.pending,
          last_activity: c.kernel.lastActivity.toISOString(),
        })),
      }),
    },
  ];
}
