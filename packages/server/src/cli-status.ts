import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from './config/index.js';
import { openStore } from './roles/shared.js';
import { clusterStatus, type ClusterStatus, type ReplicaView } from './services/cluster-status.js';
import { renderNodeView } from './services/node-views.js';
import { describeUrl } from './store/postgres-url.js';
import type { Store } from './store/types/index.js';

type Table = (rows: Array<Record<string, string>>) => string;

/** What `sandboxd cluster status` prints: the status, or a store it cannot read. */
type Outcome = { where: string; status: ClusterStatus } | { where: string; dialect: 'sqlite' | 'postgres'; error: string };

const ago = (seconds: number) => (seconds < 120 ? `${seconds} s ago` : seconds < 7200 ? `${Math.round(seconds / 60)} min ago` : `${Math.round(seconds / 3600)} h ago`);

function replicaJson(r: ReplicaView) {
  return {
    id: r.id,
    role: r.role,
    state: r.state,
    hostname: r.hostname,
    pid: r.pid,
    url: r.url,
    version: r.version,
    started_at: r.startedAt,
    seen_at: r.seenAt,
    seen_age_seconds: r.seenAgeSeconds,
    stopped_at: r.stoppedAt,
  };
}

/** The status as `--json` prints it (the nodes as GET /v1/admin/nodes shows them). */
export function statusJson(o: Outcome): Record<string, unknown> {
  if ('error' in o) {
    return { verdict: 'down', problems: [`the store cannot be read: ${o.error}`], warnings: [], store: { dialect: o.dialect, where: o.where, reachable: false, error: o.error } };
  }
  const s = o.status;
  const u = s.sandboxes;
  return {
    verdict: s.verdict,
    problems: s.problems,
    warnings: s.warnings,
    mode: s.mode,
    checked_at: s.now,
    store: { dialect: s.schema.dialect, where: o.where, reachable: true, schema_version: s.schema.version, schema_latest: s.schema.latest },
    replicas: s.replicas.map(replicaJson),
    edges: s.edges.map(replicaJson),
    nodes: s.nodes.map(renderNodeView),
    sandboxes: { active: u.active, stopped: u.stopped, vcpu: u.activeVcpu, memory_mb: u.activeMemoryMb, disk_gb: u.diskGb },
    orphans: s.orphans,
  };
}

const counts = (states: string[]) => {
  const by = new Map<string, number>();
  for (const st of states) by.set(st, (by.get(st) ?? 0) + 1);
  return [...by].map(([st, n]) => `${n} ${st}`).join(', ');
};

function replicaRows(list: ReplicaView[]): Array<Record<string, string>> {
  return list.map((r) => ({
    id: r.id,
    state: r.state,
    host: r.hostname,
    pid: String(r.pid),
    url: r.url,
    version: r.version,
    seen: ago(r.seenAgeSeconds),
    started: r.startedAt,
  }));
}

/** The status for a terminal: one part a line (tables indented under theirs), the verdict last. */
export function statusText(o: Outcome, table: Table): string {
  const indent = (text: string) => text.split('\n').map((l) => `  ${l}`).join('\n');
  const line = (label: string, text: string) => `${label.padEnd(10)} ${text}`;
  const dialectName = (d: 'sqlite' | 'postgres') => (d === 'postgres' ? 'PostgreSQL' : 'SQLite');
  if ('error' in o) return [line('store', `${dialectName(o.dialect)} at ${o.where}: cannot be read: ${o.error}`), line('verdict', 'DOWN: the store cannot be read')].join('\n');
  const s = o.status;
  const out = [line('store', `${dialectName(s.schema.dialect)} at ${o.where}: reachable, schema at step ${s.schema.version} (this sandboxd's: ${s.schema.latest})`)];
  out.push(line('mode', s.mode === 'unknown' ? 'unknown (nothing has recorded itself here)' : s.mode));
  if (s.mode !== 'unknown') {
    out.push(line(s.mode === 'cluster' ? 'control' : 'daemon', s.replicas.length ? counts(s.replicas.map((r) => r.state)) : 'none recorded'));
    if (s.replicas.length) out.push(indent(table(replicaRows(s.replicas))));
  }
  out.push(line('edges', s.edges.length ? counts(s.edges.map((r) => r.state)) : 'none recorded (each edge records itself here when it starts; a cluster without edges serves sandboxes through control)'));
  if (s.edges.length) out.push(indent(table(replicaRows(s.edges))));
  if (s.mode === 'all-in-one') {
    out.push(line('nodes', "this machine, in the daemon's own process (GET /v1/admin/nodes shows what it holds now)"));
  } else {
    out.push(line('nodes', s.nodes.length ? counts(s.nodes.map((n) => (n.up ? 'up' : 'lost'))) : 'none registered'));
    if (s.nodes.length) {
      const rows = s.nodes.map((n) => ({
        id: n.id,
        status: n.status,
        lease: n.up ? `up (beat ${ago(n.heartbeatAgeSeconds ?? 0)})` : `LOST (beat ${ago(n.heartbeatAgeSeconds ?? 0)})`,
        sandboxes: `${n.committed.active + n.committed.stopped}/${n.capacity.maxSandboxes ?? '-'}`,
        vcpu: `${n.committed.activeVcpu}/${n.capacity.vcpu}`,
        memory_mb: `${n.committed.activeMemoryMb}/${n.capacity.memoryMb}`,
        disk_gb: `${n.committed.diskGb}/${n.capacity.diskGb}`,
        reported: String(n.reported.sandboxes),
        warm: String(n.reported.warmReady),
        orphans: n.reported.orphans === null ? '-' : String(n.reported.orphans),
        url: n.url ?? '',
      }));
      out.push(indent(table(rows)));
    }
  }
  const u = s.sandboxes;
  out.push(line('sandboxes', `${u.active} active, ${u.stopped} stopped: ${u.activeVcpu} vCPU, ${u.activeMemoryMb} MB of memory, ${u.diskGb} GB of disk`));
  if (s.mode === 'cluster') out.push(line('orphans', s.orphans === null ? 'not counted (no node reports them)' : `${s.orphans} (sandboxes on nodes that no one owns)`));
  for (const w of s.warnings) out.push(line('warning', w));
  for (const p of s.problems) out.push(line('problem', p));
  const head = { ok: 'OK', warnings: 'OK, with warnings', degraded: 'DEGRADED', down: 'DOWN' }[s.verdict];
  out.push(line('verdict', s.problems.length ? `${head}: ${s.problems[0]}` : head));
  return out.join('\n');
}

/** Reads the status from the configured store: a store that cannot be opened or read is the answer, not a crash. */
export async function readStatus(config: Config): Promise<Outcome> {
  const dialect = config.databaseUrl ? 'postgres' : 'sqlite';
  const where = config.databaseUrl ? describeUrl(config.databaseUrl) : join(config.dataDir, 'sandboxd.db');
  // Opening SQLite makes the file: a data directory no daemon ever used is said so, and left as it is.
  if (!config.databaseUrl && !existsSync(where)) return { where, dialect, error: `there is no database: no daemon has run with SANDBOXD_DATA_DIR=${config.dataDir} (a cluster's store is SANDBOXD_DATABASE_URL)` };
  let store: Store | undefined;
  try {
    store = await openStore(config);
    return { where, status: await clusterStatus(store) };
  } catch (err) {
    return { where, dialect, error: err instanceof Error ? err.message : String(err) };
  } finally {
    store?.close();
  }
}

/** The exit status: 1 when something is wrong (the store, no replica, a node lost with sandboxes), for scripts. */
export function statusExitCode(o: Outcome): number {
  return 'error' in o || o.status.problems.length > 0 ? 1 : 0;
}
