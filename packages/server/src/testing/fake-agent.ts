import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { rm } from 'node:fs/promises';
import { renderError, ServiceError, type AgentHealth, type CommandResult, type EnvResult } from '@sandboxd/protocol';

/**
 * TEST DOUBLE. A stand-in for the in-sandbox agent, served by FakeRuntime on a sandbox's agent
 * socket: the agent's wire shapes for the few routes the services call (`/health`, `/env`,
 * `POST /commands/run`), and nothing behind them. It runs nothing: a command's answer is what the
 * test programmed (`FakeCommandHandler`), by default an echo of the command line.
 */

/** What a fake command answers: the test decides. */
export type FakeCommandHandler = (sandboxId: string, command: string, args: string[]) => { stdout?: string; stderr?: string; exitCode?: number };

export const echoCommand: FakeCommandHandler = (_id, command, args) => ({ stdout: `${[command, ...args].join(' ')}\n` });

/** As the real agent: 10 MiB of JSON. */
const BODY_MAX_BYTES = 10 * 1024 * 1024;

export class FakeAgent {
  private readonly server: Server;
  private readonly startedAt = Date.now();
  private env: Record<string, string> = {};
  /** While paused, requests wait here (a frozen agent answers nothing); resume lets them through. */
  private frozen: { promise: Promise<void>; thaw: () => void } | undefined;

  private constructor(
    readonly sandboxId: string,
    readonly socketPath: string,
    private readonly onCommand: () => FakeCommandHandler,
  ) {
    this.server = createServer((req, res) => void this.serve(req, res));
    // A test that forgets a sandbox fails on its own assertions, not by never exiting.
    this.server.unref();
  }

  /** Listens on `socketPath` (a socket file left there is replaced). */
  static async listen(sandboxId: string, socketPath: string, onCommand: () => FakeCommandHandler): Promise<FakeAgent> {
    const agent = new FakeAgent(sandboxId, socketPath, onCommand);
    await rm(socketPath, { force: true });
    await new Promise<void>((resolve, reject) => {
      agent.server.once('error', reject);
      agent.server.listen(socketPath, () => {
        agent.server.off('error', reject);
        resolve();
      });
    });
    return agent;
  }

  freeze(): void {
    if (this.frozen) return;
    let thaw = () => undefined as void;
    const promise = new Promise<void>((r) => (thaw = r));
    this.frozen = { promise, thaw };
  }

  thaw(): void {
    this.frozen?.thaw();
    this.frozen = undefined;
  }

  /** As a killed container's agent: open connections are cut, the socket file goes. */
  async close(): Promise<void> {
    this.server.closeAllConnections();
    // What waited for a thaw ends now (on connections already cut).
    this.thaw();
    await new Promise<void>((r) => this.server.close(() => r()));
    await rm(this.socketPath, { force: true });
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const body = await readJson(req);
      if (this.frozen) await this.frozen.promise;
      const path = (req.url ?? '/').split('?')[0];
      send(res, 200, this.answer(req.method ?? 'GET', path ?? '/', body));
    } catch (err) {
      const r = renderError(err);
      send(res, r.status, r.body, r.headers);
    }
  }

  private answer(method: string, path: string, body: Record<string, unknown>): unknown {
    if (method === 'GET' && path === '/health') {
      const health: AgentHealth & { active_executions: number } = { status: 'healthy', version: 'fake', uptime_seconds: (Date.now() - this.startedAt) / 1000, features: ['commands', 'environment'], languages: [], active_executions: 0 };
      return health;
    }
    if (path === '/env' && method === 'GET') return this.envBody();
    if (path === '/env' && method === 'PUT') {
      const vars = stringMap(body.env_vars, 'env_vars');
      this.env = body.merge === true ? { ...this.env, ...vars } : vars;
      return this.envBody();
    }
    if (path === '/commands/run' && method === 'POST') return this.command(body);
    throw new ServiceError('ROUTE_NOT_FOUND', `no route for ${method} ${path}`);
  }

  private envBody(): EnvResult & { timestamp: string } {
    return { env_vars: { ...this.env }, count: Object.keys(this.env).length, timestamp: new Date().toISOString() };
  }

  private command(body: Record<string, unknown>): CommandResult {
    const command = body.command;
    if (typeof command !== 'string' || command === '') throw new ServiceError('VALIDATION_ERROR', 'command is required', { field: 'command' });
    const args = body.args === undefined ? [] : body.args;
    if (!Array.isArray(args) || !args.every((a): a is string => typeof a === 'string')) throw new ServiceError('VALIDATION_ERROR', 'args must be an array of strings', { field: 'args' });
    const r = this.onCommand()(this.sandboxId, command, args);
    const exitCode = r.exitCode ?? 0;
    return {
      success: exitCode === 0,
      pid: null,
      stdout: r.stdout ?? '',
      stderr: r.stderr ?? '',
      exit_code: exitCode,
      execution_time: 0,
      timed_out: false,
      command: [command, ...args].join(' '),
      timestamp: new Date().toISOString(),
    };
  }
}

function stringMap(v: unknown, field: string): Record<string, string> {
  if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.values(v).every((x) => typeof x === 'string')) {
    throw new ServiceError('VALIDATION_ERROR', `${field} must be an object of strings`, { field });
  }
  return { ...(v as Record<string, string>) };
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > BODY_MAX_BYTES) throw new ServiceError('VALIDATION_ERROR', `the body is larger than ${BODY_MAX_BYTES} bytes`);
    chunks.push(c);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ServiceError('VALIDATION_ERROR', 'request body is not valid JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new ServiceError('VALIDATION_ERROR', 'the body must be a JSON object');
  return parsed as Record<string, unknown>;
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
