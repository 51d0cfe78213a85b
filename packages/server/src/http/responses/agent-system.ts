import {
  AgentHealthResponse,
  AgentInfoResponse,
  CacheClearResponse,
  CacheStatsResponse,
  EnvResponse,
  MetricsSnapshotResponse,
  ProcessTableResponse,
  SystemResponse,
  TerminalClientFrame,
  TerminalServerFrame,
} from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, jsonRequest } from './payloads.js';
import { SBX, AT, LATER } from './examples.js';

const env = (vars: Record<string, string>) => ({ env_vars: vars, count: Object.keys(vars).length, timestamp: LATER });
const system = {
  cpu: { usage_percent: 12.5, cores: 2, usage_seconds: 3.42, source: 'cgroup' },
  memory: { total: 2_147_483_648, used: 187_392_000, free: 1_960_091_648, usage_percent: 8.73, source: 'cgroup' },
  disk: { total: 10_737_418_240, used: 48_238_592, free: 10_689_179_648, usage_percent: 0.45, path: '/' },
};

/**
 * The agent itself and its sandbox: health, identity, environment, metrics, processes, cache,
 * terminal. Keyed without the /agent prefix.
 */
export const AGENT_SYSTEM_RESPONSES: Record<string, SuccessDoc> = {
  'GET /health': {
    status: 200,
    description: 'the agent runs',
    content: json(AgentHealthResponse, {
      status: 'healthy',
      version: '0.1.0',
      uptime_seconds: 84.12,
      features: ['code_execution', 'file_operations', 'commands', 'environment', 'metrics', 'processes', 'cache', 'rich_outputs', 'streaming', 'contexts', 'python_kernel', 'javascript_kernel', 'terminal'],
      languages: ['python', 'javascript', 'bash', 'go'],
      active_executions: 0,
    }),
  },
  'GET /info': {
    status: 200,
    description: 'the agent and its sandbox',
    content: json(AgentInfoResponse, {
      agent: 'sandboxd-agent',
      version: '0.1.0',
      sandbox_id: SBX,
      vm_id: SBX,
      started_at: AT,
      start_time: AT,
      platform: 'linux/x64',
      node_version: 'v20.19.2',
      workspace: '/workspace',
      languages: ['python', 'javascript', 'bash', 'go'],
    }),
  },
  'GET /env': { status: 200, description: 'the environment set', content: json(EnvResponse, env({ APP_ENV: 'staging', API_URL: 'https://api.example.com' })) },
  'PUT /env': {
    status: 200,
    description: 'the set now (the one given)',
    content: json(EnvResponse, env({ APP_ENV: 'production' })),
    request: jsonRequest({ env_vars: { APP_ENV: 'production' } }),
  },
  'PATCH /env': {
    status: 200,
    description: 'the set now (merged)',
    content: json(EnvResponse, env({ APP_ENV: 'staging', API_URL: 'https://api.example.com', DEBUG: '1' })),
    request: jsonRequest({ env_vars: { DEBUG: '1' } }),
  },
  'DELETE /env/{key}': { status: 200, description: 'the set now (a variable that was not set is no error)', content: json(EnvResponse, env({ APP_ENV: 'staging' })) },
  'GET /metrics/snapshot': {
    status: 200,
    description: 'counters since the agent started, and the resource use now',
    content: json(MetricsSnapshotResponse, {
      timestamp: LATER,
      uptime_seconds: 84.12,
      total_requests: 57,
      total_errors: 2,
      error_count: 2,
      requests_total: { '/execute': 31, '/files/write': 12, '/health': 14 },
      total_executions: 31,
      failed_executions: 3,
      active_executions: 1,
      avg_duration_ms: 42.17,
      p95_duration_ms: 180.4,
      system,
      process: { count: 6, running: 1 },
      cache: { size: 2, hits: 5, misses: 9, hit_rate: 0.357 },
      agent: { pid: 2, rss_bytes: 61_440_000, heap_used_bytes: 9_830_400, heap_total_bytes: 14_680_064, external_bytes: 1_212_416, array_buffers_bytes: 18_432 },
    }),
  },
  'GET /system': { status: 200, description: 'cpu, memory and disk now', content: json(SystemResponse, system) },
  'GET /processes': {
    status: 200,
    description: "the sandbox's processes",
    content: json(ProcessTableResponse, {
      processes: [
        { pid: 1, ppid: 0, name: 'init', status: 'S', command: '/.sb/init -- /.sb/node/lib/ld-linux-x86-64.so.2 --library-path /.sb/node/lib /.sb/node/bin/node /.sb/agent/agent.cjs' },
        { pid: 2, ppid: 1, name: 'ld-linux-x86-64', status: 'S', command: '/.sb/node/lib/ld-linux-x86-64.so.2 --library-path /.sb/node/lib /.sb/node/bin/node /.sb/agent/agent.cjs' },
        { pid: 412, ppid: 2, name: 'python3', status: 'R', command: '/usr/bin/python3 /.sb/agent/sbx_kernel.py' },
      ],
      count: 3,
      timestamp: LATER,
    }),
  },
  'GET /cache/stats': {
    status: 200,
    description: 'the caches: compiled programs and opted-in results',
    content: json(CacheStatsResponse, {
      cache: { size: 2, hits: 5, misses: 9, max_size: 1000, total_hits: 5, ttl: 3600 },
      programs: { size: 1, hits: 3, misses: 1 },
      results: { size: 1, hits: 2, misses: 8 },
      timestamp: LATER,
    }),
  },
  'POST /cache/clear': { status: 200, description: 'emptied', content: json(CacheClearResponse, { success: true, message: 'cache cleared', entries_removed: 2, timestamp: LATER }) },
  'GET /terminal': {
    status: 101,
    description: 'Switching Protocols: the connection is a WebSocket to a shell on a pseudo-terminal. Input and resize frames go in; output frames come out, then exit when the shell ends.',
    frames: {
      client: {
        schema: TerminalClientFrame,
        examples: { input: { summary: 'keys typed', value: { type: 'input', data: 'ls -la\r' } }, resize: { summary: 'the window changed', value: { type: 'resize', cols: 120, rows: 40 } } },
      },
      server: {
        schema: TerminalServerFrame,
        examples: { output: { summary: 'what the terminal shows', value: { type: 'output', data: 'total 8\r\ndrwxr-xr-x 2 root root 4096 Jun  2 09:14 .\r\n', timestamp: LATER } }, exit: { summary: 'the shell ended', value: { type: 'exit', code: 0 } } },
      },
    },
  },
};
