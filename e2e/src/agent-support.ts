import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import WebSocket from 'ws';
import { agent, api, createSandbox, startServer, type CreatedSandbox, type StartOptions, type TestServer } from './harness.js';

/** Helpers of the agent end-to-end tests (agent-*.test.ts): a real server, real sandboxes, HTTP only. */

export { agent, api, createSandbox };
export type { CreatedSandbox, TestServer };

/** A server of our own (the harness gives each live daemon its own cgroup parent, bridge and ports). */
export async function startAgentServer(opts: StartOptions = {}): Promise<TestServer> {
  return startServer(opts);
}

/**
 * Stops the server. Whatever its shutdown leaves mounted is a leak for the suite's leak check to
 * report, not something to sweep away here.
 */
export async function stopServer(server: TestServer | undefined): Promise<void> {
  if (!server) return;
  if (process.env.AGENT_TEST_LOGS) dumpAgentLogs(server);
  await server.stop();
}

/** Prints every sandbox agent's own log (kept in the sandbox's disk), for debugging a failed run. */
export function dumpAgentLogs(server: TestServer): void {
  const dir = `${server.dataDir}/sandboxes`;
  for (const id of readdirSync(dir, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name)) {
    try {
      // A running sandbox's disk is in its own mount namespace only: read through its init's root.
      const state = JSON.parse(execFileSync('crun', ['--root', `${server.dataDir}/crun`, 'state', id], { encoding: 'utf8' })) as { pid: number };
      console.log(`# agent log of ${id}:\n${readFileSync(`/proc/${state.pid}/root/.sb/state/agent.log`, 'utf8').replace(/^/gm, '#   ')}`);
    } catch {
      // no log (sandbox already gone)
    }
  }
}

export function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** POST /execute and return the body (asserting nothing: tests check what they need). */
export async function exec(sb: CreatedSandbox, code: string, extra: Record<string, unknown> = {}): Promise<any> {
  const r = await agent(sb, 'POST', '/execute', { code, ...extra });
  if (r.status !== 200) throw new Error(`execute answered ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body;
}

export async function run(sb: CreatedSandbox, command: string, args?: string[], extra: Record<string, unknown> = {}): Promise<any> {
  const r = await agent(sb, 'POST', '/commands/run', { command, ...(args ? { args } : {}), ...extra });
  if (r.status !== 200) throw new Error(`commands/run answered ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body;
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined | null | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export interface Frame {
  type: string;
  [k: string]: any;
  /** ms since the socket opened, when the frame arrived. */
  at: number;
}

/** A WebSocket to a sandbox's agent through the gateway, collecting frames. */
export class AgentSocket {
  readonly frames: Frame[] = [];
  closed = false;
  readonly opened: Promise<void>;
  private waiters: Array<() => void> = [];
  private readonly t0 = performance.now();

  constructor(readonly ws: WebSocket) {
    this.opened = new Promise((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    ws.on('message', (data) => {
      try {
        this.frames.push({ ...JSON.parse(String(data)), at: performance.now() - this.t0 });
      } catch {
        this.frames.push({ type: '(not json)', data: String(data), at: performance.now() - this.t0 });
      }
      for (const w of this.waiters.splice(0)) w();
    });
    ws.on('close', () => {
      this.closed = true;
      for (const w of this.waiters.splice(0)) w();
    });
  }

  static async open(sb: CreatedSandbox, path: string): Promise<AgentSocket> {
    const url = new URL(path, sb.publicHost.replace(/^http/, 'ws'));
    const s = new AgentSocket(new WebSocket(url, { headers: { authorization: `Bearer ${sb.authToken}` } }));
    await s.opened;
    return s;
  }

  send(frame: Record<string, unknown>): void {
    this.ws.send(JSON.stringify(frame));
  }

  /** Resolves with the first frame of `type` (counting from index `from`). */
  async next(type: string, timeoutMs = 30_000, from = 0): Promise<Frame> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const f = this.frames.slice(from).find((x) => x.type === type);
      if (f) return f;
      if (this.closed) throw new Error(`socket closed before a ${type} frame; got ${JSON.stringify(this.frames)}`);
      if (Date.now() > deadline) throw new Error(`no ${type} frame within ${timeoutMs} ms; got ${JSON.stringify(this.frames).slice(0, 2000)}`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 200);
      });
    }
  }

  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      this.ws.once('close', () => resolve());
      this.ws.close();
    });
  }
}
