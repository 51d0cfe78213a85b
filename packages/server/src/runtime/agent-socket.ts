import { dirname, join } from 'node:path';
import { connect, type Socket } from 'node:net';
import { rm } from 'node:fs/promises';
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
 * The spawner process makes the socket and runs crun with it (spawner-child.ts): it never accepts
 * a connection meant for the agent; the socket is bound under a temporary name and renamed into
 * place because closing its copy unlinks the bound path.
 */
export async function runWithAgentSocket(crun: Crun, id: string, bundleDir: string, socketPath: string, logFile: string): Promise<void> {
  // Short: a unix socket's path is at most 107 bytes, and the data directory's length is the operator's.
  const tmp = join(dirname(socketPath), `.a${process.pid}`);
  await rm(socketPath, { force: true });
  await rm(tmp, { force: true });
  await crun.runDetached(id, bundleDir, logFile, { tmp, path: socketPath });
}

/**
 * A connection to an agent's unix socket, once it is accepted. Rejects with the socket's own error
 * (ECONNREFUSED, ENOENT: the agent may be gone, see the gateway's mayBeAgentGone), or ETIMEDOUT.
 */
export function dialUnix(socketPath: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const sock = connect(socketPath);
    const timer = setTimeout(() => sock.destroy(Object.assign(new Error(`the agent's socket did not accept within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })), timeoutMs);
    sock.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    sock.once('connect', () => {
      clearTimeout(timer);
      sock.removeAllListeners('error');
      // The caller adds its own; an error before it does must not be an uncaught one.
      sock.on('error', () => undefined);
      resolve(sock);
    });
  });
}
