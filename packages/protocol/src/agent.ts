/** Shapes of the per-sandbox agent interface (api-decisions.md §4) shared by the agent, the SDK and tests. */

export interface ExecuteRequest {
  code: string;
  language?: string;
  timeout?: number;
  working_dir?: string;
  workdir?: string;
  env?: Record<string, string>;
  cache?: boolean;
  /** Background executions only: a label shown in /execute/processes. */
  name?: string;
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
  /** Ended by a kill request. */
  killed?: boolean;
  png?: string;
  svg?: string;
  html?: string;
  json?: unknown;
  markdown?: string;
  /** repr() of a last-line expression's value (Python). */
  result?: string;
  rich_outputs?: RichOutput[];
  /** Set when the result came from the opt-in result cache. */
  cached?: boolean;
  execution_id?: string;
  /** The code context the execution ran in (absent: a fresh process, e.g. `isolated`). */
  context_id?: string;
  /** The context's kernel died during or before this execution: earlier state is gone. */
  kernel_restarted?: boolean;
}

export interface CommandRequest {
  command: string;
  args?: string[];
  timeout?: number;
  working_dir?: string;
  workdir?: string;
  env?: Record<string, string>;
}

export interface BackgroundStarted {
  process_id: string;
  execution_id: string;
  name: string;
  status: 'running';
  started_at: string;
  start_time: string;
  pid: number | null;
  message: string;
}

export type ProcessStatus = 'running' | 'completed' | 'failed' | 'killed' | 'timeout';

/** One entry of GET /execute/processes: an execution of this sandbox, running or recently finished. */
export interface ProcessInfo {
  process_id: string;
  execution_id: string;
  name: string;
  kind: 'execute' | 'command';
  background: boolean;
  status: ProcessStatus;
  language: string;
  started_at: string;
  start_time: string;
  end_time: string | null;
  exit_code: number | null;
  duration: number | null;
  pid: number | null;
  /** Only for finished background processes (their output has nowhere else to go). */
  stdout?: string;
  stderr?: string;
  truncated?: boolean;
  /** For /execute/async: the delivery of the result to its callback URL. */
  callback?: CallbackDelivery;
}

/** How the delivery of an /execute/async result to its callback URL went (so far). */
export interface CallbackDelivery {
  url: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  last_status_code?: number;
  error?: string;
  delivered_at?: string;
}

export interface KillResult {
  process_id: string;
  status: ProcessStatus;
  message: string;
}

/** One entry of GET /files/list; both spellings of api-decisions.md §4 (real clients read either). */
export interface FileEntry {
  name: string;
  path: string;
  size: number;
  is_dir: boolean;
  is_directory: boolean;
  is_file: boolean;
  is_symlink: boolean;
  /** `ls -l` style, e.g. "-rw-r--r--". */
  permissions: string;
  /** Octal, e.g. "0644". */
  mode: string;
  modified: string;
  modified_time: string;
}

export interface FileListResult {
  files: FileEntry[];
  path: string;
  count: number;
}

export interface FileWriteResult {
  success: true;
  path: string;
  size: number;
}

export interface EnvResult {
  env_vars: Record<string, string>;
  count: number;
}

export interface CacheStats {
  cache: { size: number; hits: number; misses: number; max_size: number; total_hits: number; ttl: number };
  timestamp: string;
}

export interface CommandResult {
  success: boolean;
  pid?: number | null;
  stdout: string;
  stderr: string;
  exit_code: number;
  execution_time: number;
  timed_out: boolean;
  command: string;
  timestamp: string;
  truncated?: boolean;
  killed?: boolean;
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
/** The agent's own persistent state (env set, compile cache): in the sandbox's overlay upper dir. */
export const AGENT_STATE_DIR = '/.sb/state';
