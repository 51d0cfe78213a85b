import type { AgentClient } from './agent.js';
import type { CallOptions } from './client.js';
import type { BackgroundProcess, CommandResult } from './types.js';
import { stdinFields, toBackgroundProcess, toCommandResult } from './wire.js';
import { shellJoin } from './shell.js';
import { streamExecute } from './ws.js';

/** What running code and running a command both take. */
export interface RunOptions extends CallOptions {
  /** Service-side limit, seconds (default 60). */
  timeout?: number;
  env?: Record<string, string>;
  /** Default `/workspace`. */
  workingDir?: string;
  /** Input for the program's stdin, which is then closed (default: empty). Text, or bytes (sent as base64). */
  stdin?: string | Uint8Array;
  /** Given either callback, it runs over a WebSocket and output arrives as it is produced. */
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

export interface CommandOptions extends RunOptions {
  /** Run `command` directly with these arguments; without them, `command` is a `/bin/sh -c` line. */
  args?: string[];
}

/** Client-side deadline: the service's limit plus a margin for the round trip. */
export function deadlineFor(timeoutSeconds: number | undefined, fallbackSeconds: number): number {
  return ((timeoutSeconds ?? fallbackSeconds) + 30) * 1000;
}

/** Shell commands in the sandbox. A non-zero exit is a result (`exitCode`), not an error. */
export class Commands {
  constructor(private readonly agent: AgentClient) {}

  /** Runs a command and waits for it. Never repeated automatically: a failed call may still have run. */
  async run(command: string, options: CommandOptions = {}): Promise<CommandResult> {
    if (options.onStdout || options.onStderr) {
      const r = await streamExecute(this.agent, {
        code: options.args ? shellJoin([command, ...options.args]) : command,
        language: 'bash',
        timeout: options.timeout,
        workingDir: options.workingDir,
        env: options.env,
        stdin: options.stdin,
        onStdout: options.onStdout,
        onStderr: options.onStderr,
        signal: options.signal,
        timeoutMs: options.requestTimeoutMs ?? deadlineFor(options.timeout, 60),
      });
      const { language: _l, ...rest } = r;
      return rest;
    }
    const body = await this.agent.http.json({
      method: 'POST',
      path: '/commands/run',
      json: commandBody(command, options),
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs ?? deadlineFor(options.timeout, 60),
      what: 'run command',
    });
    return toCommandResult(body);
  }

  /** Starts a command and returns at once; follow it with `sandbox.processes`. */
  async background(command: string, options: Omit<CommandOptions, 'onStdout' | 'onStderr'> & { name?: string } = {}): Promise<BackgroundProcess> {
    const json = commandBody(command, options);
    if (options.name) json.name = options.name;
    const body = await this.agent.http.json({
      method: 'POST',
      path: '/commands/background',
      json,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs ?? 30_000,
      what: 'start background command',
    });
    return toBackgroundProcess(body);
  }
}

function commandBody(command: string, o: CommandOptions): Record<string, unknown> {
  const json: Record<string, unknown> = { command };
  if (o.args) json.args = o.args;
  if (o.timeout !== undefined) json.timeout = o.timeout;
  if (o.workingDir !== undefined) json.working_dir = o.workingDir;
  if (o.env !== undefined) json.env = o.env;
  Object.assign(json, stdinFields(o.stdin));
  return json;
}
