import { chmodSync, renameSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { ServiceError } from '@sandboxd/protocol';
import type { Crun } from './crun.js';

/** Inside the sandbox: the fd of the listening socket the host made for the agent. */
export const AGENT_LISTEN_FD = 3;

/**
 * Starts the container with the agent's listening socket made by the host.
 *
 * The host creates the listening unix socket itself, at `socketPath` in the sandbox's host
 * directory (never mounted into the sandbox), and hands the listening fd to the container as fd 3
 * (`crun run --preserve-fds 1`; catatonit passes it on). The agent listens on that fd
 * (SANDBOXD_AGENT_LISTEN_FD=3). So the sandbox cannot decide which host path the gateway (host
 * root) connects to: a socket in a sandbox-writable, bind-mounted directory could be replaced by a
 * symlink to any host socket. Also, connects succeed (and queue) before the agent has started, the
 * socket outlives daemon restarts (the agent holds it), and only root may connect (mode 0600).
 *
 * Node has no public API for a server's fd, hence `_handle.fd`. From listen to close no event-loop
 * turn runs, so this process never accepts a connection meant for the agent; the socket is bound
 * under a temporary name and renamed into place because closing our copy unlinks the bound path.
 */
export async function runWithAgentSocket(crun: Crun, id: string, bundleDir: string, socketPath: string, logFile: string): Promise<void> {
  const tmp = `${socketPath}.${process.pid}.tmp`;
  await rm(socketPath, { force: true });
  await rm(tmp, { force: true });
  const server = createServer();
  server.on('error', () => undefined);
  server.listen(tmp);
  const fd = (server as unknown as { _handle?: { fd?: number } })._handle?.fd;
  let running: Promise<void>;
  try {
    if (typeof fd !== 'number' || fd < 0) throw new ServiceError('RUNTIME_ERROR', `cannot create the agent socket ${tmp}`);
    // Only root may connect, whatever the daemon's umask (the directory is o+x for crun).
    chmodSync(tmp, 0o600);
    running = crun.runDetached(id, bundleDir, logFile, fd);
    renameSync(tmp, socketPath);
  } finally {
    server.close();
  }
  await running;
}
