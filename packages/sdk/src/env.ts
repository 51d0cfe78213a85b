import type { AgentClient } from './agent.js';
import { enc, type CallOptions } from './client.js';

type Vars = Record<string, string>;

/**
 * The sandbox's environment variables, applied to every later execution and command (below
 * per-call `env`). Every change resolves with the full resulting set.
 */
export class Env {
  constructor(private readonly agent: AgentClient) {}

  async getAll(options: CallOptions = {}): Promise<Vars> {
    return this.call('GET', '/env', undefined, options, 'get env');
  }

  async get(key: string, options: CallOptions = {}): Promise<string | undefined> {
    return (await this.getAll(options))[key];
  }

  async set(key: string, value: string, options: CallOptions = {}): Promise<Vars> {
    return this.update({ [key]: value }, options);
  }

  /** Sets the given variables, keeping the others. */
  async update(vars: Vars, options: CallOptions = {}): Promise<Vars> {
    return this.call('PATCH', '/env', { env_vars: vars }, options, 'update env');
  }

  /** Replaces the whole set. */
  async replace(vars: Vars, options: CallOptions = {}): Promise<Vars> {
    return this.call('PUT', '/env', { env_vars: vars }, options, 'replace env');
  }

  async delete(key: string, options: CallOptions = {}): Promise<Vars> {
    return this.call('DELETE', `/env/${enc(key)}`, undefined, options, `delete env ${key}`);
  }

  private async call(method: 'GET' | 'PUT' | 'PATCH' | 'DELETE', path: string, json: unknown, options: CallOptions, what: string): Promise<Vars> {
    const body = await this.agent.http.json<{ env_vars?: unknown }>({
      method,
      path,
      json,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what,
    });
    const out: Vars = {};
    if (body.env_vars && typeof body.env_vars === 'object') {
      for (const [k, v] of Object.entries(body.env_vars as Record<string, unknown>)) out[k] = String(v);
    }
    return out;
  }
}
