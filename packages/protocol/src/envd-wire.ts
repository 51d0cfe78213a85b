/**
 * The wire between the daemon's gateway, which speaks E2B's in-sandbox protocol (Connect) to E2B's
 * clients, and a sandbox's agent, which runs the processes and touches the files: its plain
 * `/e2b/rt/` routes (JSON) and their frame streams (`[kind: u8][length: u32 BE][payload]`).
 */

/** Where the agent serves it. */
export const ENVD_WIRE_PREFIX = '/e2b/rt';

/** The kinds of frame in a stream: a JSON event, output of a stream, a keepalive, an error `{code, message}`. */
export const ENVD_FRAME = { json: 0, stdout: 1, stderr: 2, pty: 3, keepalive: 4, error: 5 } as const;
export type EnvdFrameKind = (typeof ENVD_FRAME)[keyof typeof ENVD_FRAME];

/** A file, as the agent describes it. */
export interface EnvdEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink';
  path: string;
  size: number;
  /** Permission bits (& 0o7777). */
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  /** Modification time, whole milliseconds since the epoch. */
  mtime_ms: number;
  symlink_target?: string;
}

/** A change below a watched directory (`name` relative to it). */
export interface EnvdEvent {
  name: string;
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
  entry?: EnvdEntry;
}

/** How a process ended (the `end` JSON frame). */
export interface EnvdEnd {
  exit_code: number;
  exited: boolean;
  status: string;
  error?: string;
}

/** A running process (`GET /e2b/rt/process/list`). */
export interface EnvdProcessInfo {
  pid: number;
  tag?: string;
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}
