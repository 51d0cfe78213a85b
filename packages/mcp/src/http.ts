import type { IncomingMessage, ServerResponse } from 'node:http';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { ApiClient } from '@sandboxd/sdk';
import { createMcpServer } from './tools.js';

export interface McpHttpOptions {
  /** A client of the API with the caller's key: the tools act as that key. */
  client: ApiClient;
  /** The JSON body, when the caller's HTTP server parsed it already. */
  body?: unknown;
}

/** Servers not serving a request, per client: making one (its tools and schemas) costs ~2 ms. */
const idle = new WeakMap<ApiClient, McpServer[]>();
const IDLE_PER_CLIENT = 8;

/**
 * One request of MCP's Streamable HTTP transport, stateless: each POST gets a transport of its own
 * and a server no other request is using (one of the client's idle ones, or a new one; the
 * caller's key is the only state, and it comes with every request); when the answer ends the
 * transport is closed and the server goes back to the idle ones. A tool's answer streams as
 * server-sent events when the client accepts them (progress notifications come first).
 */
export async function handleMcpRequest(req: IncomingMessage, res: ServerResponse, opts: McpHttpOptions): Promise<void> {
  let spare = idle.get(opts.client);
  if (!spare) idle.set(opts.client, (spare = []));
  const server = spare.pop() ?? createMcpServer(opts.client);
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: false });
  res.once('close', () => {
    void server.close().then(
      () => {
        if (spare.length < IDLE_PER_CLIENT) spare.push(server);
      },
      () => undefined,
    );
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, opts.body);
}
