import type { AgentClient } from './agent.js';
import { enc, type CallOptions } from './client.js';
import { NotFoundError } from './errors.js';
import { scope, sleep } from './signals.js';
import type { ProcessInfo } from './types.js';
import { toProcessInfo } from './wire.js';

export interface WaitOptions extends CallOptions {
  /** Poll interval, ms (default 250). */
  intervalMs?: number;
}

/** Background executions and commands of the sandbox (running and recently finished). */
export class Processes {
  constructor(private readonly agent: AgentClient) {}

  async list(options: CallOptions = {}): Promise<ProcessInfo[]> {
    const body = await this.agent.http.json<{ processes?: unknown[] }>({
      method: 'GET',
      path: '/execute/processes',
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: 'list processes',
    });
    return (body.processes ?? []).map(toProcessInfo);
  }

  /** One process by id; NotFoundError when the agent no longer knows it. */
  async get(processId: string, options: CallOptions = {}): Promise<ProcessInfo> {
    const found = (await this.list(options)).find((p) => p.processId === processId || p.executionId === processId);
    if (!found) throw new NotFoundError(`process ${processId} not found`, { code: 'PROCESS_NOT_FOUND' });
    return found;
  }

  /** Kills a process and its whole process group. */
  async kill(processId: string, options: CallOptions = {}): Promise<void> {
    await this.agent.http.json({
      method: 'POST',
      path: `/execute/kill/${enc(processId)}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `kill process ${processId}`,
    });
  }

  /** Polls until the process is no longer `running`; resolves with its final state. */
  async wait(processId: string, options: WaitOptions = {}): Promise<ProcessInfo> {
    const s = scope(options.signal, options.requestTimeoutMs);
    try {
      for (;;) {
        const p = await this.get(processId, { signal: s.signal });
        if (p.status !== 'running') return p;
        await sleep(options.intervalMs ?? 250, s.signal);
      }
    } finally {
      s.dispose();
    }
  }
}
