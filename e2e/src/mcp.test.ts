// The MCP server (packages/mcp) through the official MCP SDK's own client, over both transports:
// Streamable HTTP at the daemon's /mcp and `sbx mcp` over stdio, on a real daemon and real sandboxes.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { REPO_ROOT, api, startServer, type TestServer } from './harness.js';

type ToolResult = { isError?: boolean; content: Array<{ type: string; text?: string; data?: string; mimeType?: string }> };

const TOOLS = [
  'create_sandbox', 'list_sandboxes', 'run_code', 'create_code_context', 'run_command', 'read_file', 'write_file', 'list_files',
  'open_preview', 'snapshot_sandbox', 'fork_sandbox', 'pause_sandbox', 'resume_sandbox', 'delete_sandbox',
];

let server: TestServer;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

async function httpClient(key: string): Promise<Client> {
  const client = new Client({ name: 'e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${server.baseUrl}/mcp`), { requestInit: { headers: { 'x-api-key': key } } }));
  return client;
}

const text = (r: ToolResult) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const call = async (c: Client, name: string, args: Record<string, unknown>) => (await c.callTool({ name, arguments: args })) as ToolResult;
const idOf = (r: ToolResult) => /sandbox (sb[a-z0-9]+)/.exec(text(r))?.[1];

describe('MCP over Streamable HTTP (/mcp)', () => {
  let client: Client;
  let sandboxId: string | undefined;
  before(async () => {
    client = await httpClient(server.apiKey);
  });
  after(async () => {
    if (sandboxId) await api(server, 'DELETE', `/v1/sandboxes/${sandboxId}`);
    await client?.close();
  });

  test('lists every tool with a description and a JSON schema, and the file resource template', async () => {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), [...TOOLS].sort());
    for (const t of tools) {
      assert.ok((t.description ?? '').length > 20, `${t.name} has a description a model can act on`);
      assert.equal(t.inputSchema.type, 'object');
    }
    const run = tools.find((t) => t.name === 'run_code')!;
    assert.deepEqual([...(run.inputSchema.required ?? [])].sort(), ['code', 'sandbox_id']);
    const { resourceTemplates } = await client.listResourceTemplates();
    assert.deepEqual(resourceTemplates.map((r) => r.uriTemplate), ['sandbox://{sandbox_id}/files/{+path}']);
  });

  test('create (with progress), run code with state, figures as images, errors as tool errors, commands, files, resources, preview, snapshot, pause, delete', async () => {
    const progress: string[] = [];
    const created = (await client.callTool({ name: 'create_sandbox', arguments: { template: 'code-interpreter', timeout_seconds: 600 } }, undefined, {
      onprogress: (p) => progress.push(String(p.message ?? p.progress)),
    })) as ToolResult;
    assert.ok(!created.isError, text(created));
    sandboxId = idOf(created);
    assert.ok(sandboxId, text(created));
    assert.ok(progress.length >= 1, 'progress notifications on the create');

    assert.ok(!(await call(client, 'run_code', { sandbox_id: sandboxId, code: 'x = 41' })).isError);
    const state = await call(client, 'run_code', { sandbox_id: sandboxId, code: 'print("hello")\nx + 1' });
    assert.ok(!state.isError, text(state));
    assert.match(text(state), /stdout:\nhello/);
    assert.match(text(state), /result: 42/);

    const fig = await call(client, 'run_code', { sandbox_id: sandboxId, code: 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()' });
    assert.ok(!fig.isError, text(fig));
    const image = fig.content.find((c) => c.type === 'image');
    assert.ok(image, `an image: ${JSON.stringify(fig.content.map((c) => c.type))}`);
    assert.equal(image.mimeType, 'image/png');
    assert.equal(Buffer.from(image.data!, 'base64').subarray(1, 4).toString(), 'PNG');

    const boom = await call(client, 'run_code', { sandbox_id: sandboxId, code: 'raise ValueError("nope")' });
    assert.equal(boom.isError, true);
    assert.match(text(boom), /ValueError: nope/);

    const streamed: string[] = [];
    const cmd = (await client.callTool({ name: 'run_command', arguments: { sandbox_id: sandboxId, command: 'echo one; sleep 0.3; echo two; exit 3' } }, undefined, {
      onprogress: (p) => streamed.push(String(p.message)),
    })) as ToolResult;
    assert.equal(cmd.isError, true, 'a non-zero exit is a tool error');
    assert.match(text(cmd), /one\ntwo/);
    assert.match(text(cmd), /exit code: 3/);
    assert.ok(streamed.join('').includes('one'), `output streamed as progress: ${JSON.stringify(streamed)}`);

    assert.ok(!(await call(client, 'write_file', { sandbox_id: sandboxId, path: '/workspace/notes/a.txt', content: 'from mcp\n' })).isError);
    assert.equal(text(await call(client, 'read_file', { sandbox_id: sandboxId, path: '/workspace/notes/a.txt' })), 'from mcp\n');
    assert.match(text(await call(client, 'list_files', { sandbox_id: sandboxId, path: '/workspace/notes' })), /a\.txt/);
    const res = await client.readResource({ uri: `sandbox://${sandboxId}/files/workspace/notes/a.txt` });
    assert.equal((res.contents[0] as { text: string }).text, 'from mcp\n');
    const missing = await call(client, 'read_file', { sandbox_id: sandboxId, path: '/workspace/none.txt' });
    assert.equal(missing.isError, true);
    assert.match(text(missing), /NOT_FOUND/);

    const preview = await call(client, 'open_preview', { sandbox_id: sandboxId, port: 8000 });
    assert.ok(!preview.isError, text(preview));
    assert.match(text(preview), /port 8000: http:\/\/\S+ \(private\)\nopen in a browser: http/);

    const snap = await call(client, 'snapshot_sandbox', { sandbox_id: sandboxId, name: 'mcp' });
    assert.ok(!snap.isError, text(snap));
    assert.match(text(snap), /snapshot \S+ \(mcp\)/);

    assert.match(text(await call(client, 'list_sandboxes', {})), new RegExp(sandboxId));
    assert.ok(!(await call(client, 'pause_sandbox', { sandbox_id: sandboxId })).isError);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sandboxId}`)).body.status, 'paused');
    assert.ok(!(await call(client, 'resume_sandbox', { sandbox_id: sandboxId })).isError);
    assert.ok(!(await call(client, 'delete_sandbox', { sandbox_id: sandboxId })).isError);
    assert.equal((await api(server, 'GET', `/v1/sandboxes/${sandboxId}`)).status, 404);
    sandboxId = undefined;
  });

  test('bad input: an unknown sandbox and an invalid argument are tool errors; the session goes on', async () => {
    const unknown = await call(client, 'run_command', { sandbox_id: 'sbnosuchsandbox0000000', command: 'true' });
    assert.equal(unknown.isError, true);
    assert.match(text(unknown), /NOT_FOUND/);
    const bad = await call(client, 'run_code', { sandbox_id: 'sbx', code: '' });
    assert.equal(bad.isError, true, 'an empty code is refused by the schema');
    assert.ok((await client.listTools()).tools.length > 0);
  });
});

describe('MCP: authentication and scopes', () => {
  test('no key or a wrong key: 401 before any MCP work; a read-only key lists but cannot create', async () => {
    const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } };
    for (const headers of [{}, { 'x-api-key': 'sbd_wrong' }] as Array<Record<string, string>>) {
      const r = await fetch(`${server.baseUrl}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: JSON.stringify(init) });
      assert.equal(r.status, 401);
      assert.equal(((await r.json()) as { code: string }).code, 'AUTHENTICATION_ERROR');
    }
    const created = await api(server, 'POST', '/v1/admin/keys', { org: 'default', name: 'mcp-ro', scopes: ['sandboxes:read'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const ro = await httpClient(created.body.secret);
    try {
      assert.ok(!(await call(ro, 'list_sandboxes', {})).isError);
      const denied = await call(ro, 'create_sandbox', { template: 'base' });
      assert.equal(denied.isError, true);
      assert.match(text(denied), /PERMISSION_DENIED/);
    } finally {
      await ro.close();
    }
  });
});

describe('MCP over stdio (sbx mcp)', () => {
  test("the CLI serves the same tools on stdin and stdout with the environment's key", async () => {
    const client = new Client({ name: 'e2e-stdio', version: '1.0.0' });
    const stderr: string[] = [];
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [join(REPO_ROOT, 'packages/cli/dist/main.js'), 'mcp'],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', SANDBOXD_API_URL: server.baseUrl, SANDBOXD_API_KEY: server.apiKey },
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (d: Buffer) => stderr.push(d.toString()));
    await client.connect(transport);
    let id: string | undefined;
    try {
      assert.deepEqual((await client.listTools()).tools.map((t) => t.name).sort(), [...TOOLS].sort());
      const created = await call(client, 'create_sandbox', { template: 'base', timeout_seconds: 300 });
      id = idOf(created);
      assert.ok(id, text(created) + stderr.join(''));
      const r = await call(client, 'run_command', { sandbox_id: id, command: 'echo $((6 * 7))' });
      assert.ok(!r.isError, text(r));
      assert.match(text(r), /stdout:\n42/);
      assert.ok(!(await call(client, 'delete_sandbox', { sandbox_id: id })).isError);
      id = undefined;
    } finally {
      if (id) await api(server, 'DELETE', `/v1/sandboxes/${id}`);
      await client.close();
    }
  });
});
