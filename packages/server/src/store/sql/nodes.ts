import { Params, type SqlDb } from './db.js';
import { nodeFrom } from './rows.js';
import { checkLeaseMs, checkNodeId, checkNodeRegistration, checkNodeReport, checkNodeStatus, checkNow } from './checks.js';
import type { NodeRegistration, NodeReport, NodeRepo, NodeStatus } from '../types/index.js';

/** A known node registering again: its new URL and capacity, a new lease, the rest as it was. */
const REREGISTER = `ON CONFLICT (id) DO UPDATE SET url = excluded.url, capacity_vcpu = excluded.capacity_vcpu,
         capacity_memory_mb = excluded.capacity_memory_mb, capacity_disk_gb = excluded.capacity_disk_gb,
         capacity_max_sandboxes = excluded.capacity_max_sandboxes, version = nodes.version + 1,
         heartbeat_at = excluded.heartbeat_at, lease_expires_at = excluded.lease_expires_at, updated_at = excluded.updated_at
       RETURNING *`;

export class SqlNodeRepo implements NodeRepo {
  constructor(private readonly db: SqlDb) {}

  /** The time a node statement runs at and its lease's end (checked first: bad input never reaches SQL). */
  private clock(p: Params, now: string | undefined, leaseMs?: number) {
    const at = checkNow(now);
    return this.db.dialect.clock(p, at, leaseMs === undefined ? undefined : checkLeaseMs(leaseMs));
  }

  async register(node: NodeRegistration, leaseMs: number, now?: string) {
    const n = checkNodeRegistration(node);
    const p = new Params();
    const { at, lease } = this.clock(p, now, leaseMs);
    const c = n.capacity;
    const r = await this.db.get(
      `INSERT INTO nodes (id, url, status, capacity_vcpu, capacity_memory_mb, capacity_disk_gb, capacity_max_sandboxes, version,
         heartbeat_at, lease_expires_at, registered_at, updated_at)
       VALUES (${p.add(n.id)}, ${p.add(n.url)}, 'active', ${p.add(c.vcpu)}, ${p.add(c.memoryMb)}, ${p.add(c.diskGb)}, ${p.add(c.maxSandboxes)}, 0,
         ${at}, ${lease}, ${at}, ${at})
       ${REREGISTER}`,
      p.values,
    );
    return nodeFrom(r!);
  }

  async registerUnlessRemoved(node: NodeRegistration, leaseMs: number, issuedAt?: string, now?: string) {
    const n = checkNodeRegistration(node);
    const since = checkNow(issuedAt);
    const p = new Params();
    const { at, lease } = this.clock(p, now, leaseMs);
    const c = n.capacity;
    const id = p.add(n.id);
    // INSERT ... SELECT, so that the removal is read by the statement that writes: its values cast,
    // as a SELECT's parameters have no column to take a type from (PostgreSQL would take text).
    const int = (v: number) => `CAST(${p.add(v)} AS bigint)`;
    const r = await this.db.get(
      `INSERT INTO nodes (id, url, status, capacity_vcpu, capacity_memory_mb, capacity_disk_gb, capacity_max_sandboxes, version,
         heartbeat_at, lease_expires_at, registered_at, updated_at)
       SELECT CAST(${id} AS text), CAST(${p.add(n.url)} AS text), 'active', ${int(c.vcpu)}, ${int(c.memoryMb)}, ${int(c.diskGb)}, ${int(c.maxSandboxes)}, 0,
         ${at}, ${lease}, ${at}, ${at}
       WHERE NOT EXISTS (SELECT 1 FROM node_removals WHERE id = ${id}${since === undefined ? '' : ` AND removed_at >= ${p.add(since)}`})
       ${REREGISTER}`,
      p.values,
    );
    return r && nodeFrom(r);
  }

  async recordRemoval(id: string, now?: string) {
    const node = checkNodeId(id);
    const p = new Params();
    const { at } = this.clock(p, now);
    const r = await this.db.get(
      `INSERT INTO node_removals (id, removed_at) VALUES (${p.add(node)}, ${at})
       ON CONFLICT (id) DO UPDATE SET removed_at = CASE WHEN excluded.removed_at > node_removals.removed_at THEN excluded.removed_at ELSE node_removals.removed_at END
       RETURNING removed_at`,
      p.values,
    );
    return String(r!.removed_at);
  }

  async removedAt(id: string) {
    const r = await this.db.get('SELECT removed_at FROM node_removals WHERE id = $1', [checkNodeId(id)]);
    return r ? String(r.removed_at) : undefined;
  }

  async admit(id: string) {
    return (await this.db.run('DELETE FROM node_removals WHERE id = $1', [checkNodeId(id)])) > 0;
  }

  async heartbeat(id: string, report: NodeReport, leaseMs: number, now?: string) {
    const node = checkNodeId(id);
    const rep = checkNodeReport(report);
    const p = new Params();
    const { at, lease } = this.clock(p, now, leaseMs);
    const u = rep.usage;
    const c = rep.capacity;
    // Only a row that exists is changed: a node the operator removed does not come back this way.
    const r = await this.db.get(
      `UPDATE nodes SET usage_sandboxes = ${p.add(u.sandboxes)}, usage_vcpu = ${p.add(u.vcpu)}, usage_memory_mb = ${p.add(u.memoryMb)},
         usage_disk_gb = ${p.add(u.diskGb)}, warm = ${p.add(JSON.stringify(rep.warm))}, layers_digest = ${p.add(rep.layersDigest)},
         orphans = ${p.add(rep.orphans ?? null)},
         capacity_vcpu = coalesce(${p.add(c?.vcpu ?? null)}, capacity_vcpu), capacity_memory_mb = coalesce(${p.add(c?.memoryMb ?? null)}, capacity_memory_mb),
         capacity_disk_gb = coalesce(${p.add(c?.diskGb ?? null)}, capacity_disk_gb),
         capacity_max_sandboxes = coalesce(${p.add(c?.maxSandboxes ?? null)}, capacity_max_sandboxes),
         version = version + 1, heartbeat_at = ${at}, lease_expires_at = ${lease}, updated_at = ${at}
       WHERE id = ${p.add(node)} RETURNING *`,
      p.values,
    );
    return r && nodeFrom(r);
  }

  async byId(id: string) {
    const r = await this.db.get('SELECT * FROM nodes WHERE id = $1', [checkNodeId(id)]);
    return r && nodeFrom(r);
  }

  async list() {
    return (await this.db.all('SELECT * FROM nodes ORDER BY id')).map(nodeFrom);
  }

  async live(now?: string) {
    const p = new Params();
    const { at } = this.clock(p, now);
    return (await this.db.all(`SELECT * FROM nodes WHERE lease_expires_at > ${at} ORDER BY id`, p.values)).map(nodeFrom);
  }

  async setStatus(id: string, status: NodeStatus) {
    const node = checkNodeId(id);
    const to = checkNodeStatus(status);
    const p = new Params();
    const { at } = this.clock(p, undefined);
    return (await this.db.run(`UPDATE nodes SET status = ${p.add(to)}, version = version + 1, updated_at = ${at} WHERE id = ${p.add(node)}`, p.values)) > 0;
  }

  async remove(id: string) {
    return (await this.db.run('DELETE FROM nodes WHERE id = $1', [checkNodeId(id)])) > 0;
  }
}
