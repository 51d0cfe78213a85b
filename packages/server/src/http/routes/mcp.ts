import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { createHash } from 'node:crypto';
import { ApiClient } from '@sandboxd/sdk';
import { handleMcpRequest } from '@sandboxd/mcp';
import type { Services } from '../services.js';
import { authenticated, presentedKey } from '../auth.js';

/**
 * The MCP server (packages/mcp) over Streamable HTTP at /mcp, stateless: every request carries the
 * caller's API key (X-API-Key or Authorization: Bearer), and the tools call this replica's own API
 * with it, so the key's scopes, quotas and rates hold as for any other call.
 */
export function mcpRoutes(app: FastifyInstance, s: Services): void {
  // One API client per key (authenticated by this request's preHandler first), so that the tools'
  // handles on sandboxes outlive a request (packages/mcp keeps them per client for a minute).
  const clients = new Map<string, ApiClient>();
  const clientFor = (baseUrl: string, key: string): ApiClient => {
    const id = `${baseUrl} ${createHash('sha256').update(key).digest('hex')}`;
    let c = clients.get(id);
    if (!c) {
      if (clients.size >= 1024) clients.delete(clients.keys().next().value!);
      c = new ApiClient({ baseUrl, apiKey: key, maxRetries: 0 });
      clients.set(id, c);
    }
    return c;
  };
  const serve = async (req: FastifyRequest, reply: FastifyReply) => {
    // This replica's API, at the address the request came in on (the daemon may listen on any).
    const local = (req.raw.socket.localAddress ?? '127.0.0.1').replace(/^::ffff:/, '');
    const baseUrl = `http://${local.includes(':') ? `[${local}]` : local}:${req.raw.socket.localPort ?? s.config.port}`;
    const client = clientFor(baseUrl, presentedKey(req) ?? '');
    reply.hijack();
    await handleMcpRequest(req.raw, reply.raw, { client, body: req.body });
  };
  for (const method of ['POST', 'GET', 'DELETE'] as const) {
    app.route({ method, url: '/mcp', preHandler: authenticated(s.keys), handler: serve });
  }
}
