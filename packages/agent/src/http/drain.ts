import type { IncomingMessage } from 'node:http';

/** Bodies larger than this are not drained: the connection is dropped instead. */
const MAX_DRAIN_BYTES = 4 * 1024 * 1024 * 1024;

/**
 * Reads and drops the rest of a request body. An error answered while the client (or the gateway
 * proxying it) is still sending is often lost on its side, so errors found early are answered only
 * once the body is in.
 */
export function drainRequest(req: IncomingMessage): Promise<void> {
  return new Promise((resolve) => {
    if (req.readableEnded || req.destroyed) return resolve();
    let seen = 0;
    req.removeAllListeners('data');
    req.on('data', (c: Buffer) => {
      seen += c.length;
      if (seen > MAX_DRAIN_BYTES) req.destroy();
    });
    req.once('end', () => resolve());
    req.once('close', () => resolve());
    req.once('error', () => resolve());
    req.resume();
  });
}
