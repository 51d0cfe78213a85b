import { serveMcpStdio } from '@sandboxd/mcp';
import type { Command } from '../command.js';

export const mcp: Command = {
  name: 'mcp',
  summary: 'serve sandboxd to an MCP client over stdio',
  args: '',
  details:
    "An MCP server on stdin and stdout for desktop clients and agent frameworks: tools to create\n" +
    'sandboxes, run code and commands, read, write and list files, open previews, snapshot, fork,\n' +
    "pause and delete, with the API key's scopes. Add it to the client's configuration as the command\n" +
    '`sbx mcp` with SANDBOXD_API_URL and SANDBOXD_API_KEY in its environment. Nothing else is\n' +
    'written to stdout; it ends when stdin ends.',
  options: {},
  minArgs: 0,
  maxArgs: 0,
  async run(ctx) {
    await serveMcpStdio(ctx.client);
    return 0;
  },
};
