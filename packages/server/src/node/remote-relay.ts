import { request } from 'node:http';
import { request as tlsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { describeCause, ServiceError } from '@sandboxd/protocol';
import { checkId } from '../runtime/sandbox-paths.js';
import type { NodeCaller } from './remote-call.js';

/** Default of relayProbeMs: a stopped node is told within 1.6 s; a live one answers its health in milliseconds. */
const RELAY_PROBE_MS = 800;
/** The longest a silent relayed connection of a node that answers goes between two checks of it. */
const RELAY_PROBE_MAX_MS = 30_000;

/**
 * A connection to the sandbox's agent, relayed by its node (`CONNECT <id>.agent:1`): after it
 * resolves, the stream speaks the agent's protocol as its unix socket does.
 */
export async function dialRelayed(node: NodeCaller, id: string, timeoutMs: number, relayProbeMs: number | undefined): Promise<Socket> {
  checkId(id);
  const token = await node.token();
  return new Promise((resolve, reject) => {
    // `timeout` below is the socket's idle time: a node that trickles its answer resets it, so
    // the whole handshake has a deadline of its own too.
    const deadline = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    const tls = node.tlsOptions();
    const req = (tls ? tlsRequest : request)({
      host: node.base.hostname,
      port: node.base.port || (tls ? 443 : 80),
      ...tls,
      method: 'CONNECT',
      path: `${id}.agent:1`,
      headers: { 'proxy-authorization': `Bearer ${token}`, host: `${id}.agent:1` },
      timeout: timeoutMs,
    });
    req.once('connect', (res, socket, head) => {
      clearTimeout(deadline);
      if (res.statusCode !== 200) {
        socket.destroy();
        const code = res.statusCode === 502 ? 'AGENT_UNAVAILABLE' : 'RUNTIME_ERROR';
        reject(new ServiceError(code, `node ${node.id} could not reach the agent of sandbox ${id}`).withDetail(`CONNECT answered ${res.statusCode}`));
        return;
      }
      if (head.length > 0) socket.unshift(head);
      socket.setTimeout(0);
      socket.on('error', () => undefined);
      watchRelay(node, socket as Socket, probeMs);
      // The connection CONNECT hands over is the TCP (or TLS) socket to the node.
      resolve(socket as Socket);
    });
    req.once('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    // A node may take seconds to answer (it waits up to 5 s for an agent that is slow to accept),
    // but one that stopped (a hung process, a frozen machine: the kernel still takes the TCP
    // connection) would hold the client until `timeoutMs`. A slow answer makes control ask the
    // node's health: when that is not answered either, the node has stopped.
    const probeMs = relayProbeMs ?? RELAY_PROBE_MS;
    const probe = setTimeout(() => {
      void node.answers(probeMs).then((alive) => {
        if (!alive && !req.destroyed) req.destroy(new Error(`the node answered neither the connection nor its health check within ${2 * probeMs} ms`));
      });
    }, probeMs);
    req.once('close', () => {
      clearTimeout(deadline);
      clearTimeout(probe);
    });
    req.once('error', (err) => reject(new ServiceError('NODE_UNAVAILABLE', `node ${node.id} cannot be reached; try again`, { node: node.id, retry_after: 5 }).withDetail(describeCause(err))));
    req.end();
  });
}

/**
 * A relayed connection is kept (the gateways keep them alive for the next request): a node that
 * stops later leaves it open and silent. Bytes sent on it that get no answer within `probeMs` make
 * control ask the node's health, again for as long as it stays silent (a command may run long
 * with nothing to say); a node that answers neither has stopped, and the connection ends with
 * NODE_UNAVAILABLE, which the gateway answers as it is. A socket's own counter tells whether
 * anything came back: a listener of its own would start its data flowing before its reader.
 */
function watchRelay(node: NodeCaller, socket: Socket, probeMs: number): void {
  // One timer at most. While the connection stays silent and the node keeps answering, its health
  // is asked less and less often (up to every RELAY_PROBE_MAX_MS): a command that runs for
  // minutes with nothing to say costs a few checks, not one every probeMs, each a chance that a
  // live node misses one.
  let timer: NodeJS.Timeout | undefined;
  let probing = false;
  let readWhenSent = 0;
  let wait = probeMs;
  const answered = () => socket.destroyed || socket.bytesRead > readWhenSent;
  const arm = (ms: number) => {
    clearTimeout(timer);
    timer = setTimeout(check, ms);
    timer.unref();
  };
  const check = () => {
    timer = undefined;
    if (answered()) return;
    probing = true;
    void node.answers(probeMs).then((alive) => {
      probing = false;
      if (answered()) return;
      if (!alive) {
        socket.destroy(new ServiceError('NODE_UNAVAILABLE', `node ${node.id} stopped answering; try again`, { node: node.id, retry_after: 5 }).withDetail(`a relayed connection and the node's health check went unanswered for ${probeMs + wait} ms`));
        return;
      }
      wait = Math.min(wait * 2, RELAY_PROBE_MAX_MS);
      arm(wait);
    });
  };
  const write = socket.write;
  socket.write = function (this: Socket, ...args: Parameters<Socket['write']>): boolean {
    // Watched from the first write the node has not answered yet (one it answered starts anew).
    if (!socket.destroyed && !probing && (!timer || socket.bytesRead > readWhenSent)) {
      readWhenSent = socket.bytesRead;
      wait = probeMs;
      arm(probeMs);
    }
    return write.apply(this, args);
  } as Socket['write'];
  socket.once('close', () => clearTimeout(timer));
}
