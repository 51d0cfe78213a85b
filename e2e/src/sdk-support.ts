import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ApiClient, Sandbox, type CreateOptions } from '@sandboxd/sdk';
import { REPO_ROOT, type TestServer } from './harness.js';

/** Helpers shared by the SDK, CLI and docs-example tests (all against a real server). */

export const CLI_MAIN = join(REPO_ROOT, 'packages/cli/dist/main.js');

export function clientFor(server: Pick<TestServer, 'baseUrl' | 'apiKey'>): ApiClient {
  return new ApiClient({ baseUrl: server.baseUrl, apiKey: server.apiKey });
}

/** Creates sandboxes and deletes them all at the end (even when a test failed half-way). */
export class SandboxPool {
  private readonly made: Sandbox[] = [];
  constructor(private readonly client: ApiClient) {}

  async create(options: CreateOptions = {}): Promise<Sandbox> {
    const sb = await Sandbox.create({ client: this.client, template: 'base', timeoutSeconds: 1800, ...options });
    this.made.push(sb);
    return sb;
  }

  track(sb: Sandbox): Sandbox {
    this.made.push(sb);
    return sb;
  }

  async cleanup(): Promise<void> {
    for (const sb of this.made.splice(0)) await sb.kill().catch(() => undefined);
  }
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** ms from start to the first stdout byte, when there was one. */
  firstStdoutMs?: number;
  durationMs: number;
}

/** Runs the real `sbx` binary as a child process. */
export function sbx(
  server: Pick<TestServer, 'baseUrl' | 'apiKey'> | undefined,
  args: string[],
  options: { input?: string | Buffer; env?: Record<string, string | undefined>; timeoutMs?: number } = {},
): Promise<CliResult> {
  const env: Record<string, string | undefined> = { ...process.env, NO_PROXY: '127.0.0.1,localhost' };
  delete env.SANDBOXD_API_URL;
  delete env.SANDBOXD_API_KEY;
  if (server) {
    env.SANDBOXD_API_URL = server.baseUrl;
    env.SANDBOXD_API_KEY = server.apiKey;
  }
  Object.assign(env, options.env);
  for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const child = spawn(process.execPath, [CLI_MAIN, ...args], { env: env as NodeJS.ProcessEnv, stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let firstStdoutMs: number | undefined;
    child.stdout.on('data', (c: Buffer) => {
      firstStdoutMs ??= Date.now() - started;
      out.push(c);
    });
    child.stderr.on('data', (c: Buffer) => err.push(c));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 180_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({
        code,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        firstStdoutMs,
        durationMs: Date.now() - started,
      });
    });
    child.stdin.on('error', () => undefined);
    if (options.input !== undefined) child.stdin.end(options.input);
    else child.stdin.end();
  });
}

export function describeResult(r: CliResult): string {
  return `exit ${r.code}\nstdout: ${r.stdout.slice(0, 2000)}\nstderr: ${r.stderr.slice(0, 2000)}`;
}
