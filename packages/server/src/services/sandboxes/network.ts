import { describeCause, isProgrammingError, ServiceError, type NetworkPolicy, type SetNetworkBody } from '@sandboxd/protocol';
import { DEFAULT_EGRESS } from '../../runtime/egress-policy.js';
import type { SandboxCore } from './core.js';
import { PortReads } from './port-reads.js';
import { egressFrom } from './spec.js';

/** A preview URL, as `GET /v1/sandboxes/{id}/ports/{port}` gives it. */
export interface PreviewInfo {
  port: number;
  url: string;
  public: boolean;
  signed_url?: string;
  signed_url_expires_at?: string;
}

/** A port something listens on inside a sandbox, as `GET /v1/sandboxes/{id}/ports` lists it. */
export interface ListedPort {
  port: number;
  addresses: string[];
  loopback_only: boolean;
}

/** The ports listed at most (the lowest first, as the kernel lists them): a sandbox can hold 60,000. */
export const MAX_PORTS_LISTED = 1000;

/** Each preview of a port takes a gateway port (port mode): a sandbox holds a bounded number. */
export const MAX_PREVIEWS_PER_SANDBOX = 32;
/** How long a signed link to a private preview may be opened (it sets a session of its own). */
const PREVIEW_LINK_SECONDS = 600;

/** A sandbox's reach both ways: its egress policy out, its preview URLs in, and what listens inside. */
export class Network {
  private readonly portReads = new PortReads();
  /** Each read's list as JSON (a read's array is shared by its callers until it goes stale). */
  private readonly rendered = new WeakMap<object, string>();

  constructor(private readonly c: SandboxCore) {}

  /**
   * Replaces a sandbox's egress policy (running, paused or stopped). The store first, then the
   * node: a crash in between leaves the new policy recorded, and the next start applies it; a node
   * that fails answers an error to retry (the policy is recorded already).
   */
  async setNetwork(orgId: string, id: string, body: SetNetworkBody): Promise<NetworkPolicy> {
    const { d } = this.c;
    const egress = egressFrom(body);
    return d.locks.run(id, async () => {
      const row = await this.c.get(orgId, id);
      if (row.status !== 'running' && row.status !== 'paused' && row.status !== 'stopped') {
        throw new ServiceError('INVALID_STATE', `cannot set the network of a sandbox whose current state is ${row.status}`, { id, current_state: row.status });
      }
      if (!row.internetAccess) {
        if (!egress || egress.internet) {
          throw new ServiceError('INVALID_STATE', `sandbox ${id} was created with internet_access false: it has no network, so none can be given to it now; create a sandbox with internet access (and allow_out/deny_out) instead`, { id });
        }
        return this.c.network(row);
      }
      const next = await d.store.sandboxes.update(id, row.version, { egress, updatedAt: new Date().toISOString() });
      if (!next) throw new ServiceError('INVALID_STATE', `sandbox ${id} was changed by another request while this one ran; read it again and retry`, { id, current_state: row.status });
      try {
        await this.c.node(row).setEgress(id, egress ?? DEFAULT_EGRESS);
      } catch (err) {
        if (err instanceof ServiceError || isProgrammingError(err)) throw err;
        throw new ServiceError('RUNTIME_ERROR', 'the policy is recorded but could not be applied yet; try again').withDetail(describeCause(err));
      }
      return this.c.network(next);
    });
  }

  /** What listens inside the sandbox, by port (read from the kernel, not asked of the sandbox); at most MAX_PORTS_LISTED ports. */
  async ports(orgId: string, id: string): Promise<ListedPort[]> {
    return JSON.parse(await this.portsJson(orgId, id)) as ListedPort[];
  }

  /**
   * The same as JSON, made once per read of the sandbox's tables whoever asks (a crowded sandbox's
   * list is thousands of entries: rendering it for every caller was the cost of a flood).
   */
  async portsJson(orgId: string, id: string): Promise<string> {
    const row = await this.c.get(orgId, id);
    if (row.status !== 'running' && row.status !== 'paused') return '[]';
    const raw = await this.portReads.get(row.orgId, row.id, () => this.c.node(row).listeningPorts(row.id));
    let json = this.rendered.get(raw);
    if (json === undefined) {
      const byPort = new Map<number, string[]>();
      for (const l of raw) {
        const at = byPort.get(l.port);
        if (at) at.push(l.address);
        else if (byPort.size < MAX_PORTS_LISTED) byPort.set(l.port, [l.address]);
      }
      const loopback = (a: string) => a.startsWith('127.') || a === '::1' || a.startsWith('::ffff:7f');
      json = JSON.stringify([...byPort].map(([port, addresses]) => ({ port, addresses, loopback_only: addresses.every(loopback) })));
      this.rendered.set(raw, json);
    }
    return json;
  }

  /**
   * The preview URL of a port of the sandbox, made on first ask (port mode: a gateway port of its
   * own, kept across restarts) and changed to public or private with `setPublic`. A private one
   * comes with a signed link that opens it in a browser; `mayWake`: that link's holder may wake it.
   * `readOnly` (a key that may only read): the preview as it is, if there is one, never a signed
   * link (it would open a private app: a notebook or an editor is code execution).
   */
  async preview(orgId: string, id: string, port: number, opts: { setPublic?: boolean; mayWake: boolean; readOnly?: boolean; keyId?: string; linkTtlSeconds?: number }): Promise<PreviewInfo> {
    const { d } = this.c;
    const gateway = d.gateway;
    if (!gateway.openPreview || !gateway.previewUrl) throw new ServiceError('RUNTIME_ERROR', 'this service does not serve preview URLs');
    await this.c.get(orgId, id);
    return d.locks.run(id, async () => {
      // What is true under the lock: a delete may have come first.
      const row = await this.c.get(orgId, id);
      const existing = await d.store.previews.get(row.id, port);
      if (opts.readOnly && !existing) {
        throw new ServiceError('PERMISSION_DENIED', `port ${port} of sandbox ${row.id} has no preview yet; making one takes the sandboxes:write scope`, { id: row.id, port });
      }
      if (!existing && (await d.store.previews.forSandbox(row.id)).length >= MAX_PREVIEWS_PER_SANDBOX) {
        throw new ServiceError('LIMIT_EXCEEDED', `a sandbox has at most ${MAX_PREVIEWS_PER_SANDBOX} preview ports`, { id: row.id });
      }
      // Each takes a gateway port (port mode): no organization may take the range from the others.
      const orgMax = d.maxPreviewsPerOrg;
      if (!existing && orgMax !== undefined) {
        const used = await d.store.previews.countForOrg(row.orgId);
        if (used >= orgMax) {
          throw new ServiceError(
            'ORG_QUOTA_EXCEEDED',
            `the organization's sandboxes hold ${used} preview ports: the limit is ${orgMax} (SANDBOXD_MAX_PREVIEWS_PER_ORG); they go with their sandboxes`,
            { id: row.id, limit: 'previews', max: orgMax, used },
          );
        }
      }
      const isPublic = opts.setPublic ?? existing?.public ?? false;
      const gw = await gateway.openPreview!(row.id, port, isPublic, existing?.gatewayPort ?? null);
      if (!existing || existing.public !== isPublic || existing.gatewayPort !== gw) {
        await d.store.previews.upsert({ sandboxId: row.id, port, public: isPublic, gatewayPort: gw, createdAt: existing?.createdAt ?? new Date().toISOString() });
        // The other replicas' gateways read its previews again with its route; so does this one's
        // (a read of the store begun before the upsert would otherwise apply the old state after it).
        if (this.c.replicas.shared) d.routes.forget(row.id);
        this.c.replicas.changed(row.id);
      }
      const url = gateway.previewUrl!(row.id, port, gw);
      const info: PreviewInfo = { port, url, public: isPublic };
      if (!isPublic && !opts.readOnly) {
        const link = await d.tokens.issuePreview('link', row.id, port, opts.mayWake, opts.linkTtlSeconds ?? PREVIEW_LINK_SECONDS, opts.keyId);
        info.signed_url = `${url}/_sandboxd/auth?token=${link.token}`;
        info.signed_url_expires_at = link.expiresAt.toISOString();
      }
      return info;
    });
  }
}
