import { describeCause, ServiceError } from '@sandboxd/protocol';
import { Agent as UndiciAgent, type Dispatcher } from 'undici';
import { readNodeCredential } from '../runtime/cluster-auth.js';
import { replaceFile } from './credential-file.js';
import type { NodeRegistry } from './membership.js';
import type { NodeRegistration, NodeReport, NodeRow, SandboxUsage } from '../store/types/index.js';

export interface RegistryClientOptions {
  /**
   * Control's API: the replicas' service (e.g. `http://control.sandboxd:8080`), or each replica:
   * a call that cannot reach one (or that one answers 5xx) is made to the next.
   */
  controlUrls: string[];
  /** This node's registry credential (`sandboxd cluster node-credential <id>`). */
  credential: string;
  /**
   * Where the credential was read from (SANDBOXD_NODE_CREDENTIAL_FILE): a renewed one replaces it
   * there, so that the node starts from it next time.
   */
  credentialFile?: string;
  /** After a renewal that failed, the first wait before the next (it doubles, up to an hour); default a minute. */
  renewRetryMs?: number;
  timeoutMs?: number;
  /** For an https:// control URL: the CA bundle (PEM) its certificate is checked against (absent: the system's). */
  ca?: string;
  log?: (msg: string) => void;
}

/** The most of an answer a node reads (ids of the live sandboxes it holds: ~30 bytes each). */
const MAX_ANSWER_BYTES = 8 * 1024 * 1024;
/** The longest wait between renewals that fail (control away, or one too old to renew). */
const MAX_RENEW_RETRY_MS = 3_600_000;

/**
 * A node's registry through control (http/routes/internal-nodes.ts, services/node-registry.ts): the node holds no database
 * credentials, only its registry credential, which opens its own entry and nothing else. The
 * credential expires: once past half its life, the node asks control for a new one after a
 * registration or heartbeat that went through (so at start and then as it beats, never in their
 * way), uses it from then on, and keeps it in its file. One made before credentials expired is
 * renewed at once. A renewal that fails is logged and tried again later: the current one still holds.
 */
export class RegistryClient implements NodeRegistry {
  private readonly bases: URL[];
  /** The replica the last call reached: the next call begins there. */
  private current = 0;
  private readonly dispatcher: Dispatcher | undefined;
  private credential: string;
  /** When the credential is due for renewal (ms; 0: now), and when the next try may be after one failed. */
  private renewAt: number;
  private retryAt = 0;
  private retryMs: number;
  private renewing: Promise<void> | undefined;

  constructor(private readonly o: RegistryClientOptions) {
    this.credential = o.credential;
    this.renewAt = renewalDue(o.credential);
    this.retryMs = o.renewRetryMs ?? 60_000;
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
        headers: { authorization: `Bearer ${this.credential}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
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
    void this.renewIfDue(reg.id);
    return this.row(json, path);
  }

  async heartbeat(id: string, report: NodeReport, leaseMs: number): Promise<NodeRow | undefined> {
    const path = `/internal/v1/nodes/${id}/heartbeat`;
    const { status, json } = await this.call('POST', path, { report, lease_ms: leaseMs });
    if (status === 404 && (json as { code?: unknown } | undefined)?.code === 'NOT_FOUND') return undefined;
    // An operator removed the node: its credential is refused from then on, as if it had no entry.
    if (removedBy(status, json)) {
      this.o.log?.(this.refused(status, json, path).message);
      return undefined;
    }
    if (status !== 200) throw this.refused(status, json, path);
    void this.renewIfDue(id);
    return this.row(json, path);
  }

  /**
   * Renews the credential if it is past half its life (and no failed try asks to wait): resolves
   * once done or failed (logged), never rejects. One renewal at a time.
   */
  renewIfDue(id: string): Promise<void> {
    if (this.renewing) return this.renewing;
    const now = Date.now();
    if (now < this.renewAt || now < this.retryAt) return Promise.resolve();
    this.renewing = this.renew(id)
      .then(() => {
        this.retryAt = 0;
        this.retryMs = this.o.renewRetryMs ?? 60_000;
      })
      .catch((err: unknown) => {
        this.retryAt = Date.now() + this.retryMs;
        const current = readNodeCredential(this.credential)?.expiresAt;
        this.o.log?.(
          `node ${id}: renewing its registry credential failed (trying again in ${Math.round(this.retryMs / 1000)} s; the one it holds is good ${current === undefined ? 'with no end' : `until ${new Date(current * 1000).toISOString()}`}): ${String(err)}`,
        );
        this.retryMs = Math.min(this.retryMs * 2, MAX_RENEW_RETRY_MS);
      })
      .finally(() => (this.renewing = undefined));
    return this.renewing;
  }

  private async renew(id: string): Promise<void> {
    const path = `/internal/v1/nodes/${id}/credential`;
    const { status, json } = await this.call('POST', path, {});
    if (status !== 200) throw this.refused(status, json, path);
    const credential = (json as { credential?: unknown } | undefined)?.credential;
    const claims = typeof credential === 'string' ? readNodeCredential(credential) : undefined;
    if (!claims || claims.nodeId !== id || claims.expiresAt === undefined) throw new Error(`control's registry answered ${path} with no credential of node ${id}`);
    this.credential = credential as string;
    this.renewAt = renewalDue(this.credential);
    const until = new Date(claims.expiresAt * 1000).toISOString();
    if (!this.o.credentialFile) {
      this.o.log?.(`node ${id} renewed its registry credential (good until ${until}); it was given inline (SANDBOXD_NODE_CREDENTIAL): the new one lives in this process only`);
      return;
    }
    try {
      await replaceFile(this.o.credentialFile, `${this.credential}\n`);
      this.o.log?.(`node ${id} renewed its registry credential (good until ${until}) and wrote it to ${this.o.credentialFile}`);
    } catch (err) {
      // The node goes on with the new one; a restart starts from the old, which it renews again.
      this.o.log?.(`node ${id} renewed its registry credential (good until ${until}) but cannot write it to ${this.o.credentialFile} (a restart starts from the one there): ${String(err)}`);
    }
  }

  private async sandboxes(id: string): Promise<{ usage: SandboxUsage | undefined; ids: string[] } | 'removed'> {
    const path = `/internal/v1/nodes/${id}/sandboxes`;
    const { status, json } = await this.call('GET', path);
    if (removedBy(status, json)) return 'removed';
    if (status !== 200) throw this.refused(status, json, path);
    const r = json as { usage?: unknown; ids?: unknown } | undefined;
    if (!r || !Array.isArray(r.ids) || !r.ids.every((x) => typeof x === 'string')) throw new Error(`control's registry answered ${path} with no sandbox list`);
    return { usage: r.usage && typeof r.usage === 'object' ? (r.usage as SandboxUsage) : undefined, ids: r.ids as string[] };
  }

  /** undefined once the node was removed: the heartbeat that follows is told so, and stops. */
  async usage(id: string): Promise<SandboxUsage | undefined> {
    const r = await this.sandboxes(id);
    return r === 'removed' ? undefined : r.usage;
  }

  async deletedIds(id: string, ids: string[]): Promise<string[]> {
    if (ids.length === 0) return [];
    const path = `/internal/v1/nodes/${id}/deleted`;
    const { status, json } = await this.call('POST', path, { ids });
    // A control of an earlier release has no such route: nothing is known deleted, the grace applies.
    if (status === 404 && (json as { code?: unknown } | undefined)?.code === 'ROUTE_NOT_FOUND') return [];
    if (status !== 200) throw this.refused(status, json, path);
    const r = json as { ids?: unknown } | undefined;
    if (!r || !Array.isArray(r.ids) || !r.ids.every((x) => typeof x === 'string')) throw new Error(`control's registry answered ${path} with no sandbox list`);
    // Only those it was asked of: an answer is never a list of what to destroy of its own.
    const asked = new Set(ids);
    return (r.ids as string[]).filter((x) => asked.has(x));
  }

  async liveIds(id: string): Promise<string[]> {
    const r = await this.sandboxes(id);
    // Not "none": what the node holds is not the store's to empty by a refusal.
    if (r === 'removed') throw new Error(`node ${id} was removed from the cluster: control's registry no longer says which sandboxes are its`);
    return r.ids;
  }
}

/** When a credential is due for renewal (ms): half its life; one without exp (or not one) at once. */
function renewalDue(credential: string): number {
  const c = readNodeCredential(credential);
  if (!c || c.expiresAt === undefined) return 0;
  return ((c.issuedAt + c.expiresAt) / 2) * 1000;
}

/** Whether control refused a call because an operator removed the node (services/node-registry.ts). */
function removedBy(status: number, json: unknown): boolean {
  return status === 403 && typeof (json as { node_removed_at?: unknown } | undefined)?.node_removed_at === 'string';
}
