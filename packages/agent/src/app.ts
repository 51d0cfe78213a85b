import { accessSync, constants, mkdirSync } from 'node:fs';
import type { Server } from 'node:http';
import { join } from 'node:path';
import type { AgentConfig } from './config.js';
import type { Agent, UpgradeRoute } from './context.js';
import { EnvStore } from './env/store.js';
import { logLine, setLogFile } from './log.js';
import { Executor } from './exec/executor.js';
import { agentNodeCommand } from './exec/languages.js';
import { PythonZygotes } from './exec/zygote.js';
import { AgentStats } from './metrics/stats.js';
import { cacheRoutes } from './routes/cache.js';
import { commandRoutes } from './routes/commands.js';
import { envRoutes } from './routes/env.js';
import { contextRoutes } from './routes/contexts.js';
import { ciRoutes } from './e2b/ci.js';
import { desktopRoutes } from './desktop/routes.js';
import { executeRoutes } from './routes/execute.js';
import { fileRoutes } from './routes/files.js';
import { healthRoutes } from './routes/health.js';
import { metricsRoutes } from './routes/metrics.js';
import { processRoutes } from './routes/processes.js';
import { e2bRoutes } from './e2b/routes.js';
import { createAgentServer } from './server.js';
import { portTunnelRoute } from './ws/port-tunnel.js';
import { streamRoute } from './ws/stream.js';
import { terminalRoute } from './ws/terminal.js';
import { watchRoute } from './ws/watch.js';

export const AGENT_VERSION = '0.1.0';

function findHelper(agentDir: string): string | null {
  const path = join(agentDir, 'sbx-helper');
  try {
    accessSync(path, constants.X_OK);
    return path;
  } catch {
    logLine(`${path} missing; timeouts kill the process group only, no terminal, no file watching`);
    return null;
  }
}

/** Builds the agent (state, executor, routes) and its HTTP server, not yet listening. */
export function createAgent(config: AgentConfig): { agent: Agent; server: Server } {
  for (const dir of [config.stateDir, join(config.stateDir, 'tmp'), config.workspaceDir]) {
    try {
      mkdirSync(dir, { recursive: true });
    } catch (err) {
      logLine(`cannot create ${dir}: ${(err as Error).message}`);
    }
  }
  setLogFile(join(config.stateDir, 'agent.log'));
  logLine(`agent ${AGENT_VERSION} starting (pid ${process.pid}, sandbox ${config.sandboxId})`);
  const stats = new AgentStats();
  const envStore = new EnvStore(join(config.stateDir, 'env.json'), config.createEnv, config.sandboxId === 'unknown' ? undefined : config.sandboxId);
  const helperPath = findHelper(config.agentDir);
  const zygotes = helperPath && config.pythonZygote ? new PythonZygotes(join(config.stateDir, 'run'), config.agentDir, config.workspaceDir) : null;
  const executor = new Executor({ config, envStore, stats, helperPath, nodeFallback: agentNodeCommand(), zygotes });
  const agent: Agent = { version: AGENT_VERSION, config, stats, envStore, executor, helperPath };
  const routes = [
    ...healthRoutes(agent),
    ...executeRoutes(agent),
    ...contextRoutes(agent),
    ...ciRoutes(agent),
    ...commandRoutes(agent),
    ...processRoutes(agent),
    ...fileRoutes(agent),
    ...envRoutes(agent),
    ...metricsRoutes(agent),
    ...cacheRoutes(agent),
    ...e2bRoutes(agent),
    ...desktopRoutes(agent),
  ];
  const upgrades: UpgradeRoute[] = [streamRoute(agent), portTunnelRoute(agent)];
  if (helperPath) upgrades.push(terminalRoute(agent, helperPath), watchRoute(agent, helperPath));
  return { agent, server: createAgentServer(stats, routes, upgrades) };
}
