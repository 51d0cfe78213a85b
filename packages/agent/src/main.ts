import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { AGENT_RUN_DIR, AGENT_SOCKET_NAME } from '@sandboxd/protocol';
import type { AgentState } from './context.js';
import { createAgentServer } from './server.js';
import { healthRoutes } from './routes/health.js';

export const AGENT_VERSION = '0.1.0';

function main(): void {
  const socketPath = process.env.SANDBOXD_AGENT_SOCKET ?? `${AGENT_RUN_DIR}/${AGENT_SOCKET_NAME}`;
  const state: AgentState = {
    sandboxId: process.env.SANDBOX_ID ?? 'unknown',
    startedAt: new Date(),
    version: AGENT_VERSION,
    totalRequests: 0,
    totalErrors: 0,
    requestsByPath: new Map(),
  };
  const server = createAgentServer(state, [...healthRoutes(state)]);
  // The runtime creates the listening socket on the host (at a path the sandbox never sees) and
  // passes it as this fd; the variable is removed so that processes started here do not see it.
  const listenFd = process.env.SANDBOXD_AGENT_LISTEN_FD;
  delete process.env.SANDBOXD_AGENT_LISTEN_FD;
  if (listenFd !== undefined && /^\d+$/.test(listenFd)) {
    server.listen({ fd: Number(listenFd) });
  } else {
    mkdirSync(dirname(socketPath), { recursive: true });
    rmSync(socketPath, { force: true });
    server.listen(socketPath, () => {
      // The host side connects as root of the host, which maps to nobody here; let it in.
      chmodSync(socketPath, 0o666);
    });
  }
  const shutdown = () => server.close(() => process.exit(0));
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
}

main();
