import type { Agent, Route, RouteContext } from '../context.js';
import { deliverCallback, parseCallback, type CallbackState } from '../exec/callback.js';
import { send } from '../server.js';
import { validateEnvVars } from '../env/store.js';
import type { ExecOptions } from '../exec/executor.js';
import { toInfo } from '../exec/registry.js';
import { resolvePath } from '../files/paths.js';
import { optionalBoolean, optionalString, requiredString, stdinInput, timeoutSeconds, workingDir } from '../http/validate.js';
import { LANGUAGE_ALIASES, normalizeLanguage, ServiceError, type KillResult } from '../proto.js';

export const DEFAULT_TIMEOUT_S = 60;
export const DEFAULT_BACKGROUND_TIMEOUT_S = 3600;
export const DEFAULT_ASYNC_TIMEOUT_S = 1800;
export const MAX_TIMEOUT_S = 86_400;

/**
 * `freshUnlessContext`: background and async executions run in a fresh process unless they name a
 * context: one that runs for long (a server, say) would hold the default context, and every later
 * execution would wait behind it.
 */
export function parseExecute(
  agent: Agent,
  body: Record<string, unknown>,
  defaults: { timeoutSec: number; rich: boolean; language?: string; freshUnlessContext?: boolean },
): ExecOptions {
  const code = requiredString(body, 'code', { allowEmpty: true });
  const contextId = optionalString(body, 'context_id');
  // An execution in a context speaks the context's language unless it names one.
  const languageInput = optionalString(body, 'language') ?? defaults.language ?? (contextId ? agent.executor.contexts.get(contextId).language : undefined);
  const language = normalizeLanguage(languageInput);
  if (!language) {
    throw new ServiceError('INVALID_LANGUAGE', `unsupported language ${JSON.stringify(languageInput)}; use one of ${LANGUAGE_ALIASES.join(', ')}`, { field: 'language' });
  }
  const dir = workingDir(body);
  return {
    language,
    code,
    timeoutSec: timeoutSeconds(body, 'timeout', defaults.timeoutSec, MAX_TIMEOUT_S),
    cwd: dir === undefined ? undefined : resolvePath(dir, agent.config.workspaceDir, 'working_dir'),
    env: body.env === undefined || body.env === null ? undefined : validateEnvVars(body.env, 'env'),
    cache: optionalBoolean(body, 'cache') ?? false,
    rich: defaults.rich,
    name: optionalString(body, 'name'),
    stdin: stdinInput(body),
    contextId,
    isolated: optionalBoolean(body, 'isolated') ?? (defaults.freshUnlessContext === true && contextId === undefined),
  };
}

function kill(agent: Agent, id: string): KillResult {
  const entry = agent.executor.kill(id);
  if (!entry) throw new ServiceError('PROCESS_NOT_FOUND', `Process not found: ${id}`, { process_id: id });
  const wasRunning = entry.status === 'killed' && entry.endedAt === null;
  return {
    process_id: entry.id,
    status: entry.status,
    message: wasRunning ? 'process and its children killed' : `process already ended (${entry.status})`,
  };
}

export function executeRoutes(agent: Agent): Route[] {
  const run = (rich: boolean, language?: string) => async (ctx: RouteContext) => {
    const opts = parseExecute(agent, await ctx.body(), { timeoutSec: DEFAULT_TIMEOUT_S, rich, language });
    // A client that gives up (its connection closes before the answer) ends the execution, so that
    // a context is not kept busy for nobody.
    const gaveUp = new AbortController();
    const onClose = () => {
      if (!ctx.res.writableFinished) gaveUp.abort();
    };
    ctx.res.once('close', onClose);
    try {
      return await agent.executor.execute({ ...opts, signal: gaveUp.signal });
    } finally {
      ctx.res.off('close', onClose);
    }
  };
  return [
    { method: 'POST', path: '/execute', handler: run(false) },
    { method: 'POST', path: '/execute/rich', handler: run(true) },
    // Real clients' "IPython" call: Python whose last expression's value comes back as `result`.
    { method: 'POST', path: '/execute/ipython', handler: run(false, 'python') },
    {
      method: 'POST',
      path: '/execute/background',
      handler: async (ctx) =>
        agent.executor.startExecute(parseExecute(agent, await ctx.body(), { timeoutSec: DEFAULT_BACKGROUND_TIMEOUT_S, rich: true, freshUnlessContext: true })),
    },
    {
      // Runs in the background like /execute/background, then POSTs the result to callback_url.
      method: 'POST',
      path: '/execute/async',
      handler: async (ctx) => {
        const body = await ctx.body();
        const callback = parseCallback(body);
        const opts = parseExecute(agent, body, { timeoutSec: DEFAULT_ASYNC_TIMEOUT_S, rich: false, freshUnlessContext: true });
        const state: CallbackState = { url: callback.url, status: 'pending', attempts: 0 };
        const started = agent.executor.startExecute(opts, (entry, result, err) => {
          const payload: Record<string, unknown> = result
            ? { ...result, process_id: entry.id, status: entry.status, timestamp: new Date().toISOString() }
            : {
                execution_id: entry.id,
                process_id: entry.id,
                status: entry.status,
                success: false,
                error: err instanceof Error ? err.message : String(err),
                ...(err instanceof ServiceError ? { code: err.code } : {}),
                language: opts.language,
                timestamp: new Date().toISOString(),
              };
          void deliverCallback(callback, payload, state);
        });
        const entry = agent.executor.registry.get(started.process_id);
        if (entry) entry.callback = state;
        send(ctx.res, 202, { ...started, status: 'running', callback_url: callback.url, message: 'started; the result will be POSTed to callback_url' });
        return undefined;
      },
    },
    {
      method: 'GET',
      path: '/execute/processes',
      handler: () => {
        const processes = agent.executor.registry.list();
        return { processes, count: processes.length, timestamp: new Date().toISOString() };
      },
    },
    {
      method: 'GET',
      path: '/execute/processes/*',
      handler: (ctx) => {
        const entry = agent.executor.registry.get(ctx.rest);
        if (!entry) throw new ServiceError('PROCESS_NOT_FOUND', `Process not found: ${ctx.rest}`, { process_id: ctx.rest });
        return toInfo(entry);
      },
    },
    { method: 'POST', path: '/execute/kill/*', handler: (ctx) => kill(agent, ctx.rest) },
    {
      method: 'DELETE',
      path: '/execute/kill',
      handler: (ctx) => {
        const id = ctx.url.searchParams.get('process_id') ?? ctx.url.searchParams.get('id');
        if (!id) throw new ServiceError('VALIDATION_ERROR', 'process_id is required', { field: 'process_id' });
        return kill(agent, id);
      },
    },
    { method: 'DELETE', path: '/execute/kill/*', handler: (ctx) => kill(agent, ctx.rest) },
    {
      // The Python client's spelling: POST /processes/{id}/kill.
      method: 'POST',
      path: '/processes/*',
      handler: (ctx) => {
        const m = /^([^/]+)\/kill$/.exec(ctx.rest);
        if (!m) throw new ServiceError('ROUTE_NOT_FOUND', `no route for POST /processes/${ctx.rest}`);
        return kill(agent, m[1]!);
      },
    },
  ];
}
