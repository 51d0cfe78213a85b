import type { ReplicaRow, SandboxUsage, Store, StoreSchema } from '../store/types/index.js';
import { registryNodeViews, type NodeView } from './node-views.js';
import { replicaState, type ReplicaState } from './replica-presence.js';

export interface ReplicaView extends ReplicaRow {
  state: ReplicaState;
  seenAgeSeconds: number;
}

/**
 * What `sandboxd cluster status` says of the service that serves from a store: the store, the
 * processes serving from it (control replicas or the all-in-one daemon, edges), the nodes with
 * their leases and what they hold, orphans, and a verdict. `problems` make the command fail (the
 * service cannot do its work, or loses sandboxes); `warnings` do not.
 */
export interface ClusterStatus {
  verdict: 'ok' | 'warnings' | 'degraded' | 'down';
  problems: string[];
  warnings: string[];
  /** Which kind of service serves from this store, by the processes recorded in it. */
  mode: 'cluster' | 'all-in-one' | 'unknown';
  /** The store's clock when it was read: every age is measured on it. */
  now: string;
  schema: StoreSchema;
  /** Control replicas, or the all-in-one daemon. */
  replicas: ReplicaView[];
  edges: ReplicaView[];
  /** A cluster's registered nodes (the all-in-one's machine is in its process, not here). */
  nodes: NodeView[];
  /** Every sandbox the store records, not deleted. */
  sandboxes: SandboxUsage;
  /** The sandboxes no one owns that the nodes report, all together (null: no node counts them). */
  orphans: number | null;
}

const ago = (seconds: number) => (seconds < 120 ? `${seconds} s ago` : seconds < 7200 ? `${Math.round(seconds / 60)} min ago` : `${Math.round(seconds / 3600)} h ago`);

function lastSeen(list: ReplicaView[]): string {
  const latest = [...list].sort((a, b) => b.seenAt.localeCompare(a.seenAt))[0];
  if (!latest) return 'none has recorded itself';
  return `the last, ${latest.id}, ${latest.state === 'stopped' ? 'stopped' : 'was seen'} ${ago(latest.seenAgeSeconds)}`;
}

/** Reads the status of what serves from `store`. */
export async function clusterStatus(store: Store): Promise<ClusterStatus> {
  const [{ now, replicas: rows }, schema, sandboxes] = await Promise.all([store.replicas.list(), store.schema(), store.sandboxes.usageAll()]);
  const nowMs = Date.parse(now);
  const nodes = await registryNodeViews(store, nowMs);
  const views = rows.map((r) => ({ ...r, state: replicaState(r, nowMs), seenAgeSeconds: Math.max(0, Math.round((nowMs - Date.parse(r.seenAt)) / 1000)) }));
  const edges = views.filter((r) => r.role === 'edge');
  const controls = views.filter((r) => r.role === 'control');
  const serves = views.filter((r) => r.role === 'serve');
  const mode = controls.length > 0 || nodes.length > 0 ? 'cluster' : serves.length > 0 ? 'all-in-one' : 'unknown';
  const replicas = mode === 'all-in-one' ? serves : [...controls, ...serves];
  const problems: string[] = [];
  const warnings: string[] = [];
  let down = false;

  if (schema.version > schema.latest) warnings.push(`the store's schema is at step ${schema.version}, past this sandboxd's ${schema.latest}: a later release wrote it (use that release's sandboxd)`);
  if (mode === 'unknown') {
    down = true;
    problems.push('nothing serves from this store: no daemon has recorded itself here (none of this release ran on it, or none for a day)');
  } else {
    const up = (mode === 'cluster' ? controls : serves).filter((r) => r.state === 'up');
    const what = mode === 'cluster' ? 'control replica' : 'all-in-one daemon';
    if (up.length === 0) {
      down = true;
      problems.push(`no ${what} is up: ${lastSeen(mode === 'cluster' ? controls : serves)}`);
    }
    for (const r of replicas.filter((x) => x.state === 'gone')) {
      if (up.length > 0) warnings.push(`${r.role} ${r.id} at ${r.url} is gone: not seen for ${ago(r.seenAgeSeconds).replace(' ago', '')}, and it did not say it stopped`);
    }
  }
  for (const e of edges.filter((x) => x.state === 'gone')) warnings.push(`edge ${e.id} at ${e.url} is gone: not seen for ${ago(e.seenAgeSeconds).replace(' ago', '')}, and it did not say it stopped`);
  // Edges are optional (control's gateway serves sandboxes too): one that died is worth a word, not a failure.
  if (edges.some((e) => e.state === 'gone') && !edges.some((e) => e.state === 'up')) warnings.push(`no edge is up (${lastSeen(edges)}): public hosts that lead to the edges are not served`);

  if (mode === 'cluster') {
    for (const n of nodes.filter((x) => !x.up)) {
      const held = n.committed.active + n.committed.stopped;
      const said = `node ${n.id} is lost: its last heartbeat was ${ago(n.heartbeatAgeSeconds ?? 0)}`;
      if (held > 0) problems.push(`${said}, with ${held} sandbox(es) on it that cannot be reached (they are back when it is; \`sandboxd nodes remove ${n.id}\` gives them up)`);
      else warnings.push(`${said} (no sandbox on it; \`sandboxd nodes remove ${n.id}\` forgets it)`);
    }
    if (!nodes.some((n) => n.up && n.status === 'active')) problems.push(nodes.length === 0 ? 'no node has registered: sandboxes cannot be created' : 'no active node is up: sandboxes cannot be created');
  }
  const counted = nodes.filter((n) => n.reported.orphans !== null);
  const orphans = counted.length ? counted.reduce((a, n) => a + n.reported.orphans!, 0) : null;
  for (const n of counted.filter((x) => x.reported.orphans! > 0)) {
    warnings.push(`node ${n.id} holds ${n.reported.orphans} sandbox(es) that no record and no control replica owns (it destroys each after its grace, SANDBOXD_NODE_ORPHAN_GRACE_SECONDS)`);
  }
  const verdict = down ? 'down' : problems.length ? 'degraded' : warnings.length ? 'warnings' : 'ok';
  return { verdict, problems, warnings, mode, now, schema, replicas, edges, nodes, sandboxes, orphans };
}
