import type { Agent, Route, RouteContext } from '../context.js';
import type { EnvdHandler } from './entry.js';

let envd: Promise<EnvdHandler> | null = null;

/**
 * The routes of E2B's in-sandbox daemon. Its code (Connect, protobuf) is a bundle of its own,
 * envd.cjs beside agent.cjs, loaded at the first request (build.mjs turns this import into a
 * require of that file): agent boot and an idle sandbox never pay for it.
 */
export function e2bRoutes(agent: Agent): Route[] {
  const handler = async (ctx: RouteContext): Promise<undefined> => {
    envd ??= import('./entry.js').then(
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
