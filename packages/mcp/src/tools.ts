import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult, ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { z } from 'zod';
import { Sandbox, SandboxdError, type ApiClient, type ExecutionResult, type SandboxInfo } from '@sandboxd/sdk';
import { SERVER_NAME, SERVER_VERSION } from './version.js';

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;
type Content = CallToolResult['content'];

/**
 * Handles on sandboxes (their agent address and token) kept per client for a minute: a tool call
 * then goes straight to the sandbox's agent instead of first asking the API for the sandbox and a
 * token (two round trips). A kept token that expires or is revoked is refreshed by the SDK.
 */
const HANDLE_TTL_MS = 60_000;
const HANDLES_PER_CLIENT = 256;
const handles = new WeakMap<ApiClient, Map<string, { sandbox: Sandbox; at: number }>>();

async function openSandbox(client: ApiClient, id: string): Promise<Sandbox> {
  let kept = handles.get(client);
  if (!kept) handles.set(client, (kept = new Map()));
  const hit = kept.get(id);
  if (hit && Date.now() - hit.at < HANDLE_TTL_MS) return hit.sandbox;
  const sandbox = await Sandbox.connect(id, { client });
  kept.delete(id);
  if (kept.size >= HANDLES_PER_CLIENT) kept.delete(kept.keys().next().value!);
  kept.set(id, { sandbox, at: Date.now() });
  return sandbox;
}

function forgetSandbox(client: ApiClient, id: string): void {
  handles.get(client)?.delete(id);
}

/** Text of a file read whole as a tool answer or a resource; more is cut, and the cut is said. */
const MAX_TEXT = 256 * 1024;
/** What a tool says of a run's output at most per stream. */
const MAX_OUTPUT = 64 * 1024;

const sandboxId = z.string().min(1).max(64).describe('the sandbox id, as create_sandbox or list_sandboxes gives it (sb...)');
const path = z.string().min(1).max(4096).describe('an absolute path inside the sandbox, e.g. /workspace/main.py');

function cut(text: string, max = MAX_OUTPUT): string {
  return text.length > max ? `${text.slice(0, max)}\n[... ${text.length - max} more characters cut]` : text;
}

function describeSandbox(s: SandboxInfo): string {
  return [
    `sandbox ${s.id} (${s.status})`,
    `template: ${s.templateName}`,
    `internet: ${s.network.internetAccess === false ? 'off' : s.network.allowOut?.length ? `only ${s.network.allowOut.join(', ')}` : 'on'}`,
    `expires: ${s.expiresAt ?? 'never'}`,
    `resources: ${s.resources.vcpu} vCPU, ${s.resources.memoryMb} MB, ${s.resources.diskGb} GB`,
  ].join('\n');
}

/** A failure the model can act on: the service's code and message, as an MCP tool error. */
function failed(err: unknown): CallToolResult {
  const text =
    err instanceof SandboxdError
      ? `${err.code}${err.status ? ` (HTTP ${err.status})` : ''}: ${err.message}`
      : `error: ${err instanceof Error ? err.message : String(err)}`;
  return { isError: true, content: [{ type: 'text', text }] };
}

/** Sends progress notifications when the client asked for them (a progressToken). */
function progress(extra: Extra): (done: number, total: number | undefined, message: string) => void {
  const token = extra._meta?.progressToken;
  if (token === undefined) return () => undefined;
  return (done, total, message) => {
    void extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: done, ...(total === undefined ? {} : { total }), message } }).catch(() => undefined);
  };
}

function runResult(r: ExecutionResult): CallToolResult {
  const content: Content = [];
  const parts: string[] = [];
  if (r.stdout) parts.push(`stdout:\n${cut(r.stdout)}`);
  if (r.stderr) parts.push(`stderr:\n${cut(r.stderr)}`);
  if (r.result !== undefined && r.result !== '') parts.push(`result: ${cut(r.result)}`);
  parts.push(`exit code: ${r.exitCode}${r.timedOut ? ' (timed out)' : ''}${r.kernelRestarted ? ' (the kernel restarted: earlier state is gone)' : ''}, ${r.executionTime.toFixed(2)} s`);
  if (r.contextId) parts.push(`context: ${r.contextId}`);
  content.push({ type: 'text', text: parts.join('\n\n') });
  if (r.png) content.push({ type: 'image', data: r.png, mimeType: 'image/png' });
  if (r.svg) content.push({ type: 'text', text: `SVG output:\n${cut(r.svg)}` });
  if (r.html) content.push({ type: 'text', text: `HTML output:\n${cut(r.html)}` });
  return { content, isError: !r.success };
}

/**
 * sandboxd as MCP tools and resources, over an API client that carries the caller's key (its
 * scopes decide what each tool may do). One server per client session; see http.ts and stdio.ts.
 */
export function createMcpServer(client: ApiClient): McpServer {
  const server = new McpServer(
    { name: SERVER_NAME, version: SERVER_VERSION },
    {
      instructions:
        'Run code and commands in isolated sandboxes (real containers). Create a sandbox with create_sandbox, then use its id with run_code, run_command and the file tools; delete it with delete_sandbox when done (it is also deleted when its timeout passes). Files are also resources at sandbox://{sandbox_id}/files/{path}.',
    },
  );
  const open = (id: string) => openSandbox(client, id);
  const tool = <S extends z.ZodRawShape>(
    name: string,
    config: { title: string; description: string; inputSchema: S; readOnly?: boolean; destructive?: boolean },
    run: (args: z.objectOutputType<S, z.ZodTypeAny>, extra: Extra) => Promise<CallToolResult>,
  ) => {
    server.registerTool(
      name,
      {
        title: config.title,
        description: config.description,
        inputSchema: config.inputSchema,
        annotations: { title: config.title, readOnlyHint: config.readOnly ?? false, destructiveHint: config.destructive ?? false, openWorldHint: true },
      },
      (async (args: z.objectOutputType<S, z.ZodTypeAny>, extra: Extra) => {
        try {
          return await run(args, extra);
        } catch (err) {
          return failed(err);
        }
      }) as never,
    );
  };

  tool(
    'create_sandbox',
    {
      title: 'Create a sandbox',
      description:
        'Creates an isolated Linux sandbox and returns its id. Templates: code-interpreter (Python with numpy, pandas, matplotlib; Node.js; the default), python, nodejs, go, base, or one of your own. The sandbox is deleted after timeout_seconds (default 3600). internet_access false cuts it off; allow_out limits it to the listed domains or addresses.',
      inputSchema: {
        template: z.string().min(1).max(128).optional().describe('template name (default code-interpreter)'),
        timeout_seconds: z.number().int().min(1).max(31 * 86400).optional().describe('delete it this many seconds after creation (default 3600)'),
        internet_access: z.boolean().optional().describe('default true'),
        allow_out: z.array(z.string().min(1).max(253)).max(1000).optional().describe('only these may be reached: domains (example.com, *.example.com), IPv4 addresses or CIDRs'),
        env_vars: z.record(z.string()).optional().describe('environment variables for everything run in it'),
        snapshot_id: z.string().min(1).max(128).optional().describe('start from this snapshot (from snapshot_sandbox) instead of a template'),
      },
    },
    async (a, extra) => {
      const say = progress(extra);
      say(0, 1, a.snapshot_id ? `creating a sandbox from snapshot ${a.snapshot_id}` : `creating a ${a.template ?? 'code-interpreter'} sandbox`);
      const s = await Sandbox.create({
        client,
        ...(a.snapshot_id ? { snapshot: a.snapshot_id } : { template: a.template ?? 'code-interpreter' }),
        timeoutSeconds: a.timeout_seconds ?? 3600,
        ...(a.internet_access === undefined ? {} : { internetAccess: a.internet_access }),
        ...(a.allow_out ? { allowOut: a.allow_out } : {}),
        ...(a.env_vars ? { envVars: a.env_vars } : {}),
        signal: extra.signal,
      });
      say(1, 1, `sandbox ${s.id} is running`);
      return { content: [{ type: 'text', text: describeSandbox(s.info) }] };
    },
  );

  tool(
    'list_sandboxes',
    { title: 'List sandboxes', description: "Lists the organization's sandboxes (newest first) with their status, template and expiry.", inputSchema: { limit: z.number().int().min(1).max(200).optional().describe('at most this many (default 50)') }, readOnly: true },
    async (a, extra) => {
      const lines: string[] = [];
      for await (const s of Sandbox.list({ client, maxItems: a.limit ?? 50, signal: extra.signal })) {
        lines.push(`${s.id}  ${s.info.status}  ${s.info.templateName}  expires ${s.info.expiresAt ?? 'never'}`);
      }
      return { content: [{ type: 'text', text: lines.length ? lines.join('\n') : 'no sandboxes' }] };
    },
  );

  tool(
    'run_code',
    {
      title: 'Run code',
      description:
        'Runs code in a sandbox and returns stdout, stderr, the value of a last expression, the exit code, and figures as images. Python and JavaScript keep their state between calls (like a notebook) in the default context or in context_id; bash and go run fresh each time.',
      inputSchema: {
        sandbox_id: sandboxId,
        code: z.string().min(1).max(1024 * 1024),
        language: z.enum(['python', 'javascript', 'js', 'bash', 'sh', 'go']).optional().describe('default python'),
        context_id: z.string().min(1).max(128).optional().describe('a code context to run in (from create_code_context)'),
        timeout_seconds: z.number().int().min(1).max(3600).optional().describe('default 60'),
      },
    },
    async (a, extra) => {
      const say = progress(extra);
      let seen = 0;
      const sandbox = await open(a.sandbox_id);
      const streaming = extra._meta?.progressToken !== undefined;
      const r = await sandbox.runCode(a.code, {
        ...(a.language ? { language: a.language } : {}),
        ...(a.context_id ? { context: a.context_id } : {}),
        timeout: a.timeout_seconds ?? 60,
        signal: extra.signal,
        // Output as it comes, as progress (only when the client asked for progress: streaming
        // costs a WebSocket).
        ...(streaming ? { onStdout: (d: string) => say(++seen, undefined, d), onStderr: (d: string) => say(++seen, undefined, d) } : {}),
      });
      return runResult(r);
    },
  );

  tool(
    'create_code_context',
    {
      title: 'Create a code context',
      description: 'Makes a separate Python interpreter (its own state, beside the default one) in a sandbox for run_code; returns its id.',
      inputSchema: { sandbox_id: sandboxId, cwd: z.string().max(4096).optional().describe('its working directory, relative to /workspace') },
    },
    async (a) => {
      const sandbox = await open(a.sandbox_id);
      const ctx = await sandbox.createCodeContext({ language: 'python', ...(a.cwd ? { cwd: a.cwd } : {}) });
      return { content: [{ type: 'text', text: `context ${ctx.id} (${ctx.language})` }] };
    },
  );

  tool(
    'run_command',
    {
      title: 'Run a command',
      description: 'Runs a shell command line (sh -c) in a sandbox and returns its stdout, stderr and exit code.',
      inputSchema: {
        sandbox_id: sandboxId,
        command: z.string().min(1).max(64 * 1024),
        cwd: z.string().max(4096).optional().describe('working directory (default /workspace)'),
        timeout_seconds: z.number().int().min(1).max(3600).optional().describe('default 60'),
      },
    },
    async (a, extra) => {
      const say = progress(extra);
      let seen = 0;
      const streaming = extra._meta?.progressToken !== undefined;
      const sandbox = await open(a.sandbox_id);
      const r = await sandbox.commands.run(a.command, {
        ...(a.cwd ? { workingDir: a.cwd } : {}),
        timeout: a.timeout_seconds ?? 60,
        signal: extra.signal,
        ...(streaming ? { onStdout: (d: string) => say(++seen, undefined, d), onStderr: (d: string) => say(++seen, undefined, d) } : {}),
      });
      return runResult({ ...r, success: r.exitCode === 0 && !r.timedOut });
    },
  );

  tool(
    'read_file',
    { title: 'Read a file', description: 'Reads a text file from a sandbox (up to 256 KiB are returned).', inputSchema: { sandbox_id: sandboxId, path }, readOnly: true },
    async (a) => {
      const text = await (await open(a.sandbox_id)).files.read(a.path);
      return { content: [{ type: 'text', text: cut(text, MAX_TEXT) }] };
    },
  );

  tool(
    'write_file',
    { title: 'Write a file', description: 'Writes text to a file in a sandbox (its parent directories are made), replacing what was there.', inputSchema: { sandbox_id: sandboxId, path, content: z.string().max(8 * 1024 * 1024) } },
    async (a) => {
      const w = await (await open(a.sandbox_id)).files.write(a.path, a.content);
      return { content: [{ type: 'text', text: `wrote ${w.size} bytes to ${w.path}` }] };
    },
  );

  tool(
    'list_files',
    { title: 'List files', description: 'Lists a directory in a sandbox: names, sizes, and which are directories.', inputSchema: { sandbox_id: sandboxId, path: path.optional().describe('a directory (default /workspace)') }, readOnly: true },
    async (a) => {
      const entries = await (await open(a.sandbox_id)).files.list(a.path ?? '/workspace');
      const text = entries.map((e) => `${e.isDir ? 'd' : '-'} ${String(e.size).padStart(10)}  ${e.name}${e.isDir ? '/' : ''}`).join('\n');
      return { content: [{ type: 'text', text: text || '(empty)' }] };
    },
  );

  tool(
    'open_preview',
    {
      title: 'Open a preview URL',
      description:
        'Makes an HTTP port of a sandbox (a web app listening on 0.0.0.0 or 127.0.0.1 there) reachable and returns its URL. Private by default: the signed link opens it in a browser for 10 minutes; public makes the URL open to anyone who has it.',
      inputSchema: { sandbox_id: sandboxId, port: z.number().int().min(1).max(65535), public: z.boolean().optional().describe('default false') },
    },
    async (a) => {
      const p = await (await open(a.sandbox_id)).getPreviewUrl(a.port, { public: a.public ?? false });
      const lines = [`port ${p.port}: ${p.url} (${p.public ? 'public' : 'private'})`];
      if (p.signedUrl) lines.push(`open in a browser: ${p.signedUrl} (until ${p.signedUrlExpiresAt ?? 'soon'})`);
      return { content: [{ type: 'text', text: lines.join('\n') }] };
    },
  );

  tool(
    'snapshot_sandbox',
    { title: 'Snapshot a sandbox', description: "Saves a sandbox's filesystem as a snapshot (the sandbox keeps running); create_sandbox with snapshot_id starts new sandboxes from it.", inputSchema: { sandbox_id: sandboxId, name: z.string().min(1).max(128).optional() } },
    async (a, extra) => {
      const say = progress(extra);
      say(0, 1, 'taking a snapshot');
      const snap = await (await open(a.sandbox_id)).snapshot({ ...(a.name ? { name: a.name } : {}) });
      say(1, 1, 'done');
      return { content: [{ type: 'text', text: `snapshot ${snap.id}${snap.name ? ` (${snap.name})` : ''} of ${a.sandbox_id}: ${snap.size} bytes` }] };
    },
  );

  tool(
    'fork_sandbox',
    { title: 'Fork a sandbox', description: 'Makes copies of a running sandbox (its files and installed packages, not its processes) and returns their ids.', inputSchema: { sandbox_id: sandboxId, count: z.number().int().min(1).max(10).optional().describe('default 1') } },
    async (a, extra) => {
      const say = progress(extra);
      say(0, 1, 'forking');
      const forks = await (await open(a.sandbox_id)).fork(a.count ?? 1);
      say(1, 1, 'done');
      return { content: [{ type: 'text', text: forks.map((f) => describeSandbox(f.info)).join('\n\n') }] };
    },
  );

  tool(
    'pause_sandbox',
    { title: 'Pause a sandbox', description: 'Freezes a sandbox (its processes stop, its memory and files are kept); resume_sandbox continues it.', inputSchema: { sandbox_id: sandboxId } },
    async (a) => {
      await (await open(a.sandbox_id)).pause();
      return { content: [{ type: 'text', text: `paused ${a.sandbox_id}` }] };
    },
  );

  tool(
    'resume_sandbox',
    { title: 'Resume a sandbox', description: 'Continues a paused sandbox.', inputSchema: { sandbox_id: sandboxId } },
    async (a) => {
      await (await open(a.sandbox_id)).resume();
      return { content: [{ type: 'text', text: `resumed ${a.sandbox_id}` }] };
    },
  );

  tool(
    'delete_sandbox',
    { title: 'Delete a sandbox', description: 'Deletes a sandbox and everything in it, at once.', inputSchema: { sandbox_id: sandboxId }, destructive: true },
    async (a) => {
      forgetSandbox(client, a.sandbox_id);
      await Sandbox.fromId(a.sandbox_id, { client }).kill();
      return { content: [{ type: 'text', text: `deleted ${a.sandbox_id}` }] };
    },
  );

  // A sandbox's files: sandbox://{sandbox_id}/files/{+path} (the path without its leading slash).
  server.registerResource(
    'sandbox-file',
    new ResourceTemplate('sandbox://{sandbox_id}/files/{+path}', { list: undefined }),
    { title: "A sandbox's file", description: 'A file inside a sandbox, read as text: sandbox://SANDBOX_ID/files/workspace/main.py', mimeType: 'text/plain' },
    async (uri, vars) => {
      const id = String(vars.sandbox_id ?? '');
      const file = `/${String(vars.path ?? '').replace(/^\/+/, '')}`;
      const text = await (await open(id)).files.read(file);
      return { contents: [{ uri: uri.href, mimeType: 'text/plain', text: cut(text, MAX_TEXT) }] };
    },
  );

  return server;
}
