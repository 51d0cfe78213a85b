import type { IncomingMessage, ServerResponse } from 'node:http';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { ApiClient } from '@sandboxd/sdk';
import { createMcpServer } from './tools.js';

export interface McpHttpOptions {
  /** A client of the API with the caller's key: the tools act as that key. */
  client: ApiClient;
  /** The JSON body, when the caller's HTTP server parsed it already. */
  body?: unknown;
}

/**
 * One request of MCP's Streamable HTTP transport, stateless: each POST gets a server and a
 * transport of its own (the caller's key is the only state, and it comes with every request), and
 * both are closed when the answer ends. A tool's answer streams as server-sent events when the
 * client accepts them (progress notifications come first).
 */
export async function handleMcpRequest(req: IncomingMessage, res: ServerResponse, opts: McpHttpOptions): Promise<void> {
  const server = createMcpServer(opts.client);
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: false });
  res.once('close', () => {
    void transport.close().catch(() => undefined);
    void server.close().catch(() => undefined);
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, opts.body);
}
