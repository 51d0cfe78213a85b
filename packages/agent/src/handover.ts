import { closeSync, writeSync } from 'node:fs';
import type { Server } from 'node:http';
import { Socket } from 'node:net';

/**
 * The hand-over from the first responder (native/sbx-first.c), which accepts on the listening
 * socket while Node starts. Each of its relays (one end of a socketpair) may carry one connection
 * it accepted early: served here like any connection. An unused one just closes when the responder
 * exits.
 */
export function serveRelays(server: Server, relayFds: number[]): void {
  for (const fd of relayFds) {
    let sock: Socket;
    try {
      sock = new Socket({ fd, readable: true, writable: true });
    } catch {
      continue; // not a socket we were given (run by hand): nothing to serve
    }
    sock.on('error', () => undefined);
    server.emit('connection', sock);
  }
}

/** Tells the first responder that the agent listens: it stops accepting; the backlog is ours. */
export function sayListening(readyFd: number | null): void {
  if (readyFd === null) return;
  try {
    writeSync(readyFd, '1');
  } catch {
    // The responder is gone; there is no one to tell.
  }
  try {
    closeSync(readyFd);
  } catch {
    // already closed
  }
}
