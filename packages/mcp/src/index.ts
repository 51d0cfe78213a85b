export { createMcpServer } from './tools.js';
export { handleMcpRequest, type McpHttpOptions } from './http.js';
export { serveMcpStdio } from './stdio.js';
