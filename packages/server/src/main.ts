import { loadConfig } from './config/index.js';
import { runAllInOne } from './roles/all-in-one.js';
import { runControl } from './roles/control.js';
import { runEdge } from './roles/edge.js';
import { runNode } from './roles/node.js';
import { scrubSecrets, startLogging } from './roles/shared.js';

/** What sandboxd runs as (roles/ wires each). */
export type Role = 'serve' | 'control' | 'edge' | 'node';

/**
 * Starts `role` with the configuration of `env` (whose secrets then leave it). `serve` and
 * `control` serve until SIGTERM or SIGINT ends the process; `edge` and `node` give back how to stop
 * them.
 */
export async function start(role: Role, env: NodeJS.ProcessEnv = process.env): Promise<{ close: () => Promise<void> } | undefined> {
  const config = loadConfig(env);
  scrubSecrets(env);
  const { logger, log } = startLogging(config);
  switch (role) {
    case 'serve':
      await runAllInOne(config, log, logger);
      return undefined;
    case 'control':
      await runControl(config, log, logger);
      return undefined;
    case 'edge':
      return runEdge(config, log, logger);
    case 'node':
      return runNode(config, log);
  }
}
