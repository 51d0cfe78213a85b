/** Shapes of the per-sandbox agent interface (api-decisions.md §4) shared by the agent, the SDK and tests. */

export interface ExecuteRequest {
  code: string;
  language?: string;
  timeout?: number;
  working_dir?: string;
  workdir?: string;
  env?: Record<string, string>;
  cache?: boolean;
}

export interface RichOutput {
  type: string;
  path: string;
  mime: string;
}

export interface ExecuteResult {
  success: boolean;
  stdout: string;
  stderr: string;
  exit_code: number;
  execution_time: number;
  timed_out: boolean;
  language: string;
  timestamp: string;
  truncated?: boolean;
  png?: string;
  svg?: string;
  html?: string;
  json?: unknown;
  rich_outputs?: RichOutput[];
}

export interface CommandRequest {
  command: string;
  args?: string[];
  timeout?: number;
  working_dir?: string;
  workdir?: string;
  env?: Record<string, string>;
}

export interface CommandResult {
  success: boolean;
  stdout: string;
  stderr: string;
  exit_code: number;
  execution_time: number;
  timed_out: boolean;
  command: string;
  timestamp: string;
  truncated?: boolean;
}

export interface AgentHealth {
  status: 'healthy';
  version: string;
  uptime_seconds: number;
  features: string[];
  languages: string[];
}

export interface AgentInfo {
  agent: string;
  version: string;
  sandbox_id: string;
  started_at: string;
}

/** Where the agent listens and finds its state, inside the sandbox. */
export const AGENT_RUN_DIR = '/.sb/run';
export const AGENT_SOCKET_NAME = 'agent.sock';
