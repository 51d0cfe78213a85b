import { describeCause, ServiceError } from '@sandboxd/protocol';
import { Agent as UndiciAgent, type Dispatcher } from 'undici';
import type { NodeRegistry } from './membership.js';
import type { NodeRegistration, NodeReport, NodeRow, SandboxUsage } from '../store/types.js';

export interface RegistryClientOptions {
  /**
   * Control's API: the replicas' service (e.g. `http://control.sandboxd:8080`), or each replica:
   * a call that cannot reach one (or that one answers 5xx) is made to the next.
   */
  controlUrls: string[];
  /** This node's registry credential (`sandboxd cluster node-credential <id>`). */
  credential: string;
  timeoutMs?: number;
  /** For an https:// control URL: the CA bundle (PEM) its certificate is checked against (absent: the system's). */
  ca?: string;
  log?: (msg: string) => void;
}

/** The most of an answer a node reads (ids of the live sandboxes it holds: ~30 bytes each). */
const MAX_ANSWER_BYTES = 8 * 1024 * 1024;

/**
 * A node's registry through control (http/routes/internal-nodes.ts, services/node-registry.ts): the node holds no database
 * credentials, only its registry credential, which opens its own entry and nothing else.
 */
export class RegistryClient implements NodeRegistry {
  private readonly bases: URL[];
  /** The replica the last call reached: the next call begins there. */
  private current = 0;
  private readonly dispatcher: Dispatcher | undefined;

  constructor(private readonly o: RegistryClientOptions) {
    if (o.controlUrls.length === 0) throw new Error('no control URL');
    this.bases = o.controlUrls.map((u) => {
      const base = new URL(u);
      if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new Error(`the control URL must be http(s): (${u})`);
      return base;
    });
    if (o.ca && this.bases.some((b) => b.protocol === 'https:')) this.dispatcher = new UndiciAgent({ connect: { ca: o.ca, minVersion: 'TLSv1.2' } });
  }

  /** The call made to each replica in turn, from the one that answered last, until one answers (below 500). */
  private async call(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    let last: unknown;
    for (let i = 0; i < this.bases.length; i++) {
      const at = (this.current + i) % this.bases.length;
      try {
        const answer = await this.callOne(this.bases[at]!, method, path, body);
        if (at !== this.current) this.o.log?.(`control's registry answers at ${this.bases[at]!.origin} (${this.bases[this.current]!.origin} did not)`);
        this.current = at;
        return answer;
      } catch (err) {
        last = err;
      }
    }
    throw last;
  }

  private async callOne(base: URL, method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    let res: Response;
    try {
      res = await fetch(new URL(path, base), {
        method,
        headers: { authorization: `Bearer ${this.o.credential}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.o.timeoutMs ?? 10_000),
        ...(this.dispatcher ? { dispatcher: this.dispatcher } : {}),
      } as RequestInit);
    } catch (err) {
      throw new ServiceError('STORE_UNAVAILABLE', `control's registry at ${base.origin} cannot be reached`).withDetail(`${method} ${path}: ${describeCause(err)}`);
    }
    const text = await res.text();
    if (text.length > MAX_ANSWER_BYTES) throw new ServiceError('STORE_UNAVAILABLE', `control's registry answered over ${MAX_ANSWER_BYTES} bytes`);
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    if (res.status >= 500) throw new ServiceError('STORE_UNAVAILABLE', `control's registry answered ${res.status}`).withDetail(text.slice(0, 300));
    return { status: res.status, json };
  }

  /** The parts of an entry a node uses; the rest of NodeRow is control's. */
  private row(json: unknown, path: string): NodeRow {
    const r = json as { id?: unknown; url?: unknown; status?: unknown; lease_expires_at?: unknown } | undefined;
    if (!r || typeof r.id !== 'string' || typeof r.url !== 'string' || typeof r.status !== 'string') throw new Error(`control's registry answered ${path} with no node entry`);
    return { id: r.id, url: r.url, status: r.status, leaseExpiresAt: String(r.lease_expires_at ?? '') } as NodeRow;
  }

  private refused(status: number, json: unknown, path: string): Error {
    const e = json as { code?: unknown; message?: unknown } | undefined;
    return new Error(`control's registry refused ${path} (${status} ${typeof e?.code === 'string' ? e.code : ''}): ${typeof e?.message === 'string' ? e.message : ''}`);
  }

  async register(reg: NodeRegistration, leaseMs: number): Promise<NodeRow> {
    const path = `/internal/v1/nodes/${reg.id}`;
    const { status, json } = await this.call('PUT', path, { url: reg.url, capacity: reg.capacity, lease_ms: leaseMs });
    if (status !== 200) throw this.refused(status, json, path);
    return this.row(json, path);
  }

  async heartbeat(id: string, report: NodeReport, leaseMs: number): Promise<NodeRow | undefined> {
    const path = `/internal/v1/nodes/${id}/heartbeat`;
    const { status, json } = await this.call('POST', path, { report, lease_ms: leaseMs });
    if (status === 404 && (json as { code?: unknown } | undefined)?.code === 'NOT_FOUND') return undefined;
    if (status !== 200) throw this.refused(status, json, path);
    return this.row(json, path);
  }

  private async sandboxes(id: string): Promise<{ usage: SandboxUsage | undefined; ids: string[] }> {
    const path = `/internal/v1/nodes/${id}/sandboxes`;
    const { status, json } = await this.call('GET', path);
    if (status !== 200) throw this.refused(status, json, path);
    const r = json as { usage?: unknown; ids?: unknown } | undefined;
    if (!r || !Array.isArray(r.ids) || !r.ids.every((x) => typeof x === 'string')) throw new Error(`control's registry answered ${path} with no sandbox list`);
    return { usage: r.usage && typeof r.usage === 'object' ? (r.usage as SandboxUsage) : undefined, ids: r.ids as string[] };
  }

  async usage(id: string): Promise<SandboxUsage | undefined> {
    return (await this.sandboxes(id)).usage;
  }

  async liveIds(id: string): Promise<string[]> {
    return (await this.sandboxes(id)).ids;
  }
}
