import type { Agent, Route, RouteContext } from '../context.js';
import type { EnvdHandler } from './entry.js';
import { logLine } from '../log.js';
import { compileEnvd } from './code-cache.js';

let envd: Promise<EnvdHandler> | null = null;

/**
 * envd's module. In the bundle (CommonJS): envd.cjs compiled with its V8 code cache and run as
 * Node's CommonJS loader would (code-cache.ts); an import() would also start Node's ESM loader and
 * have it parse the 450 KB for export names, a third of the first call's CPU. The agent's compiled
 * sources (ESM, run by the unit tests) import entry.js.
 */
function loadEntry(): Promise<typeof import('./entry.js')> {
  if (typeof require !== 'function') return import('./entry.js');
  return new Promise((resolve) => {
    const t0 = performance.now();
    const compiled = compileEnvd(__dirname, require);
    resolve(compiled.run());
    logLine(`envd loaded in ${Math.round(performance.now() - t0)} ms (code cache ${compiled.cache})`);
  });
}

/**
 * The routes of E2B's in-sandbox daemon. Its code (Connect, protobuf) is a bundle of its own,
 * envd.cjs beside agent.cjs, loaded at the first request: agent boot and an idle sandbox never pay
 * for it.
 */
export function e2bRoutes(agent: Agent): Route[] {
  const handler = async (ctx: RouteContext): Promise<undefined> => {
    envd ??= loadEntry().then(
      (m) => m.createEnvd(agent),
      (err: unknown) => {
        envd = null;
        throw err;
      },
    );
    (await envd)(ctx.req, ctx.res);
    return undefined;
  };
  return ['GET', 'HEAD', 'POST', 'PUT', 'DELETE'].map((method) => ({ method, path: '/e2b/envd/*', handler }));
}
