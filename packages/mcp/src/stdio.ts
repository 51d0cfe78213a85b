import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { ApiClient } from '@sandboxd/sdk';
import { createMcpServer } from './tools.js';

/** Serves the tools on this process's stdin and stdout (`sbx mcp`) until stdin ends. */
export async function serveMcpStdio(client: ApiClient): Promise<void> {
  const server = createMcpServer(client);
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
    process.stdin.once('end', () => resolve());
  });
  await server.connect(transport);
  await closed;
  await server.close();
}
