import {
  AsyncStartedResponse,
  BackgroundStartedResponse,
  CommandResponse,
  ExecuteResponse,
  ExecuteStreamClientFrame,
  ExecuteStreamServerFrame,
  KillResponse,
  ProcessExitEvent,
  ProcessListResponse,
  ProcessLostEvent,
  ProcessOutputChunk,
  ProcessOutputResponse,
} from '@sandboxd/protocol';
import type { SuccessDoc } from '../api-doc-types.js';
import { json, jsonRequest, sse, event } from './payloads.js';
import { PROC, CTX, AT, LATER } from './examples.js';

const executeResult = {
  success: true,
  stdout: '4\n',
  stderr: '',
  exit_code: 0,
  execution_time: 0.031,
  timed_out: false,
  language: 'python',
  timestamp: LATER,
  execution_id: PROC,
  context_id: CTX,
};
const started = { process_id: PROC, execution_id: PROC, name: 'python execution', status: 'running', started_at: AT, start_time: AT, pid: 412, message: 'started in the background' };

/**
 * The agent's code and commands: runs, background processes and their output, the execute
 * stream. Keyed without the /agent prefix.
 */
export const AGENT_CODE_RESPONSES: Record<string, SuccessDoc> = {
  'POST /execute': {
    status: 200,
    description: 'the execution ended (or timed out: success false, timed_out true)',
    content: {
      'application/json': {
        schema: ExecuteResponse,
        examples: {
          ok: { summary: 'an expression', value: { ...executeResult, result: '4' } },
          failed: {
            summary: 'code that raises: still a 200',
            value: { ...executeResult, success: false, stdout: '', stderr: 'Traceback (most recent call last):\n  File "<cell>", line 1, in <module>\nZeroDivisionError: division by zero\n', exit_code: 1 },
          },
        },
      },
    },
    request: jsonRequest({ code: 'x = 2\nx + 2', language: 'python', timeout: 30 }),
  },
  'POST /execute/rich': {
    status: 200,
    description: 'the execution ended, with its rich outputs listed',
    content: json(ExecuteResponse, {
      ...executeResult,
      stdout: '',
      png: 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==',
      rich_outputs: [{ type: 'image', path: `/.sb/state/outputs/${PROC}/001-figure.png`, mime: 'image/png' }],
    }),
    request: jsonRequest({ code: 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()', language: 'python' }),
  },
  'POST /execute/background': {
    status: 200,
    description: 'started; GET /execute/processes follows it',
    content: json(BackgroundStartedResponse, started),
    request: jsonRequest({ code: 'import time\nfor i in range(60):\n    print(i, flush=True)\n    time.sleep(1)', language: 'python', timeout: 600 }),
  },
  'POST /execute/async': {
    status: 202,
    description: 'started; the result will be POSTed to callback_url',
    content: json(AsyncStartedResponse, { ...started, callback_url: 'https://ci.example.com/hooks/sandbox', message: 'started; the result will be POSTed to callback_url' }),
    request: jsonRequest({
      code: 'print(sum(range(10**7)))',
      language: 'python',
      callback_url: 'https://ci.example.com/hooks/sandbox',
      callback_headers: { 'X-Job': '1234' },
      callback_signature_secret: 'whsec_4c8e1f',
    }),
  },
  'POST /execute/ipython': {
    status: 200,
    description: 'the execution ended; the last expression is in result',
    content: json(ExecuteResponse, { ...executeResult, stdout: '', result: "{'a': 1}" }),
    request: jsonRequest({ code: "d = {'a': 1}\nd" }),
  },
  'GET /execute/processes': {
    status: 200,
    description: 'running and recently finished executions (the last 100)',
    content: json(ProcessListResponse, {
      processes: [
        {
          process_id: PROC,
          execution_id: PROC,
          name: 'python execution',
          kind: 'execute',
          background: true,
          status: 'running',
          language: 'python',
          started_at: AT,
          start_time: AT,
          end_time: null,
          exit_code: null,
          duration: null,
          pid: 412,
        },
        {
          process_id: 'proc_1f3b5d7092a4c6e8',
          execution_id: 'proc_1f3b5d7092a4c6e8',
          name: 'bash -c echo done; exit 3',
          kind: 'command',
          background: true,
          status: 'failed',
          language: 'shell',
          started_at: AT,
          start_time: AT,
          end_time: LATER,
          exit_code: 3,
          duration: 1.519,
          pid: 415,
          stdout: 'done\n',
          stderr: '',
          truncated: false,
        },
      ],
      count: 2,
      timestamp: LATER,
    }),
  },
  'GET /processes/{process_id}/output': {
    status: 200,
    description: 'the output kept from since; go on from next_offset',
    content: json(ProcessOutputResponse, {
      process_id: PROC,
      status: 'running',
      exit_code: null,
      since: 0,
      next_offset: 35,
      start_offset: 0,
      end_offset: 35,
      lost_bytes: 0,
      complete: false,
      chunks: [
        { stream: 'stdout', offset: 0, data: 'step 1\nstep 2\n' },
        { stream: 'stderr', offset: 14, data: 'warning: slow disk\n' },
        { stream: 'stdout', offset: 33, data: '3\n' },
      ],
    }),
  },
  'GET /processes/{process_id}/attach': {
    status: 200,
    description: 'server-sent events until the process exits: output (its id is the offset to resume from), lost, exit',
    content: sse(
      { output: ProcessOutputChunk, lost: ProcessLostEvent, exit: ProcessExitEvent },
      `: attached\n\nid: 14\n${event('output', { stream: 'stdout', offset: 0, data: 'step 1\nstep 2\n' })}${event('lost', { offset: 14, bytes: 1048576 })}id: 1048597\n${event('output', { stream: 'stdout', offset: 1048590, data: 'done\n' })}${event('exit', { status: 'completed', exit_code: 0, next_offset: 1048597 })}`,
    ),
  },
  'POST /execute/kill/{process_id}': { status: 200, description: 'killed (or it had ended)', content: json(KillResponse, { process_id: PROC, status: 'killed', message: 'process and its children killed' }) },
  'DELETE /execute/kill': { status: 200, description: 'killed (or it had ended)', content: json(KillResponse, { process_id: PROC, status: 'killed', message: 'process and its children killed' }) },
  'GET /execute/stream': {
    status: 101,
    description: 'Switching Protocols: the connection is a WebSocket. Send an execute frame; the output comes as stdout and stderr frames, then result and complete. The socket stays open for more executions until the client closes it.',
    frames: {
      client: { schema: ExecuteStreamClientFrame, example: { type: 'execute', code: 'for i in range(3): print(i)', language: 'python', timeout: 30, workdir: '/workspace' } },
      server: {
        schema: ExecuteStreamServerFrame,
        examples: {
          stdout: { summary: 'output, as it comes', value: { type: 'stdout', data: '0\n1\n2\n', timestamp: AT } },
          result: { summary: 'the execution ended', value: { type: 'result', exit_code: 0, execution_time: 0.018, success: true, timed_out: false, execution_id: PROC, context_id: CTX, timestamp: LATER } },
          complete: { summary: 'the last frame of an execution', value: { type: 'complete', success: true } },
        },
      },
    },
  },
  'POST /commands/run': {
    status: 200,
    description: 'the command ended (a non-zero exit is still a 200)',
    content: json(CommandResponse, { success: true, stdout: 'Python 3.11.2\n', stderr: '', exit_code: 0, execution_time: 0.012, timed_out: false, command: 'python3 --version', timestamp: LATER, pid: 418 }),
    request: jsonRequest({ command: 'python3 --version', timeout: 30, working_dir: '/workspace' }),
  },
  'POST /commands/background': {
    status: 200,
    description: 'started; GET /execute/processes follows it',
    content: json(BackgroundStartedResponse, { ...started, name: 'python3 -m http.server 8000' }),
    request: jsonRequest({ command: 'python3', args: ['-m', 'http.server', '8000'], working_dir: '/workspace' }),
  },
};
