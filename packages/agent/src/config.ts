import { AGENT_RUN_DIR, AGENT_SOCKET_NAME, AGENT_STATE_DIR } from './proto.js';

/** Everything the agent takes from outside; main.ts builds it from the process env. */
export interface AgentConfig {
  sandboxId: string;
  /** Unix socket path to listen on (unless listenFd is set). */
  socketPath: string;
  /** An inherited, already listening socket fd (SANDBOXD_AGENT_LISTEN_FD). */
  listenFd: number | null;
  /** Connections the first responder accepted before the agent listened (SANDBOXD_AGENT_RELAY_FDS). */
  relayFds: number[];
  /** Where to say the agent listens, to the first responder (SANDBOXD_AGENT_READY_FD). */
  readyFd: number | null;
  /** Persistent state: env set, compile cache, rich outputs. */
  stateDir: string;
  /** Default working directory of executions and relative file paths. */
  workspaceDir: string;
  /** Directory holding agent.cjs and what ships beside it (sbx-helper, sbx_run.py). */
  agentDir: string;
  /** Env of user processes before the env set and per-request env: the agent's own minus SANDBOXD_*. */
  baseEnv: Record<string, string>;
  /** env_vars given at sandbox create; seeds the env set the first time the agent starts. */
  createEnv: Record<string, string>;
  /** Optional limits the host may pass (SANDBOXD_LIMITS JSON), for metrics percentages. */
  limits: { vcpu?: number; memoryMb?: number; diskMb?: number };
  /** Per-stream capture cap of executions and commands. */
  outputCapBytes: number;
  /** Per-stream size of a background process's output log (SANDBOXD_PROCESS_OUTPUT_RING_KB, default 1024). */
  processOutputRingBytes: number;
  /** Largest file /files/read returns as JSON. */
  maxReadBytes: number;
  /** Warm Pythons for /execute (SANDBOXD_AGENT_PY_ZYGOTE=0 turns them off). */
  pythonZygote: boolean;
  /** The display to start with the agent (SANDBOXD_DESKTOP, `WxH[xDEPTH]`, set by the desktop template). */
  desktop?: string | null;
}

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

function parseJsonObject(text: string | undefined, what: string): Record<string, unknown> {
  if (!text) return {};
  try {
    const v: unknown = JSON.parse(text);
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // fall through
  }
  process.stderr.write(`sandboxd-agent: ignoring malformed ${what}\n`); // before the log file is known
  return {};
}

function stringValues(obj: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(obj)) if (typeof v === 'string') out[k] = v;
  return out;
}

/**
 * The env user code starts from: ours minus the agent's private variables, plus the variables the
 * dynamic loader acts on (LD_PRELOAD, ...), which the runtime passes aside in SANDBOXD_LOADER_ENV
 * so that they reach the sandbox's programs and never load anything into the agent itself.
 */
export function userBaseEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined || k.startsWith('SANDBOXD_')) continue;
    out[k] = v;
  }
  Object.assign(out, stringValues(parseJsonObject(env.SANDBOXD_LOADER_ENV, 'SANDBOXD_LOADER_ENV')));
  out.PATH ??= DEFAULT_PATH;
  out.HOME ??= '/root';
  return out;
}

/** 1 KiB to 1 GiB; anything else is the default, 1 MiB. */
function ringKb(v: string | undefined): number {
  const n = v !== undefined && /^\d+$/.test(v) ? Number(v) : NaN;
  return n >= 1 && n <= 1024 * 1024 ? n : 1024;
}

const fdNumber = (v: string | undefined) => (v !== undefined && /^\d+$/.test(v) ? Number(v) : null);

export function loadConfig(env: NodeJS.ProcessEnv, agentDir: string): AgentConfig {
  const limits = parseJsonObject(env.SANDBOXD_LIMITS, 'SANDBOXD_LIMITS');
  const num = (v: unknown) => (typeof v === 'number' && v > 0 ? v : undefined);
  return {
    sandboxId: env.SANDBOX_ID ?? 'unknown',
    socketPath: env.SANDBOXD_AGENT_SOCKET ?? `${AGENT_RUN_DIR}/${AGENT_SOCKET_NAME}`,
    listenFd: fdNumber(env.SANDBOXD_AGENT_LISTEN_FD),
    relayFds: (env.SANDBOXD_AGENT_RELAY_FDS ?? '')
      .split(',')
      .map((v) => fdNumber(v))
      .filter((v): v is number => v !== null && v > 2),
    readyFd: fdNumber(env.SANDBOXD_AGENT_READY_FD),
    stateDir: env.SANDBOXD_AGENT_STATE_DIR ?? AGENT_STATE_DIR,
    workspaceDir: env.SANDBOXD_AGENT_WORKSPACE ?? '/workspace',
    agentDir,
    baseEnv: userBaseEnv(env),
    createEnv: stringValues(parseJsonObject(env.SANDBOXD_ENV_VARS, 'SANDBOXD_ENV_VARS')),
    limits: { vcpu: num(limits.vcpu), memoryMb: num(limits.memory_mb), diskMb: num(limits.disk_mb) },
    outputCapBytes: 10 * 1024 * 1024,
    processOutputRingBytes: ringKb(env.SANDBOXD_PROCESS_OUTPUT_RING_KB) * 1024,
    maxReadBytes: 10 * 1024 * 1024,
    pythonZygote: env.SANDBOXD_AGENT_PY_ZYGOTE !== '0',
    desktop: env.SANDBOXD_DESKTOP || null,
  };
}
