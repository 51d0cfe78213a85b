import { ServiceError, type Sandbox, type SandboxMetrics } from '@sandboxd/protocol';
import { page, pageStart } from '../pages.js';
import type { SandboxCore } from './core.js';

/** Reads about sandboxes: the organization's list, and one sandbox's resource use now. */
export class Reads {
  constructor(private readonly c: SandboxCore) {}

  async list(
    orgId: string,
    q: { limit?: number; status?: string; template?: string; region?: string; cursor?: string },
    opts: { node?: boolean } = {},
  ): Promise<{ data: Sandbox[]; hasMore: boolean; nextCursor: string | null }> {
    const limit = q.limit ?? 100;
    const after = pageStart(q.cursor);
    if (q.status && !['running', 'paused', 'stopped'].includes(q.status)) {
      throw new ServiceError('VALIDATION_ERROR', 'status must be one of running, paused, stopped');
    }
    const rows = await this.c.d.store.sandboxes.list({ orgId, status: q.status, template: q.template, region: q.region, after, limit: limit + 1 });
    const { page: shown, hasMore, nextCursor } = page(rows, limit);
    return { data: shown.map((r) => this.c.render(r, opts)), hasMore, nextCursor };
  }

  /** One sandbox's resource use now; a stopped one has its disk only. */
  async metrics(orgId: string, id: string): Promise<SandboxMetrics> {
    const row = await this.c.get(orgId, id);
    const zero = { cpuUsageNs: 0, memoryBytes: 0, memoryLimitBytes: row.memoryMb * 1024 * 1024, oomKills: 0, pids: 0, diskUsedBytes: 0, diskTotalBytes: row.diskGb * 1024 ** 3, networkRxBytes: 0, networkTxBytes: 0, egressDenied: 0 };
    const st = await this.c
      .node(row)
      .stats(id)
      .catch((err: unknown) => {
        // A node that is away is said so (503), not reported as a sandbox using nothing.
        if (err instanceof ServiceError && err.code === 'NODE_UNAVAILABLE') throw err;
        this.c.d.log('reading sandbox stats failed', { id, error: String(err) });
        return zero;
      });
    return {
      sandbox_id: row.id,
      status: row.status,
      timestamp: new Date().toISOString(),
      cpu: { usage_seconds: Math.round(st.cpuUsageNs / 1e6) / 1e3, vcpu: row.vcpu },
      memory: { used_bytes: st.memoryBytes, limit_bytes: st.memoryLimitBytes || zero.memoryLimitBytes },
      disk: { used_bytes: st.diskUsedBytes, total_bytes: st.diskTotalBytes },
      network: { rx_bytes: st.networkRxBytes, tx_bytes: st.networkTxBytes },
      pids: st.pids,
      oom_kills: st.oomKills,
      egress_denied: st.egressDenied ?? 0,
    };
  }
}
