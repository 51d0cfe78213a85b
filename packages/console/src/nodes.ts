// The nodes that hold the sandboxes (operators only), from the admin API: each with its state, its
// lease, what the store's sandboxes on it hold against its capacity, and what it reported (its
// ready warm-pool sandboxes, those no one owns). Read again every few seconds while it is open.

import { call } from './api.js';
import { h, relative } from './dom.js';
import type { Page } from './page.js';

interface AdminNode {
  id: string;
  status: 'active' | 'cordoned' | 'draining';
  up: boolean;
  in_process: boolean;
  url: string | null;
  lease_expires_at: string | null;
  heartbeat_at: string | null;
  capacity: { vcpu: number; memory_mb: number; disk_gb: number; max_sandboxes: number | null };
  committed: { sandboxes: number; active: number; stopped: number; vcpu: number; memory_mb: number; disk_gb: number };
  reported: { sandboxes: number; warm_ready: number; orphans: number | null };
}

const REFRESH_MS = 5000;

function row(n: AdminNode): HTMLElement {
  const state = n.up ? n.status : 'lost';
  const of = (used: number, total: number | null, unit = '') => (total === null ? `${used}${unit}` : `${used} / ${total}${unit}`);
  return h(
    'tr',
    { 'data-node': n.id, 'data-up': String(n.up), 'data-status': n.status },
    h('td', { class: 'mono' }, n.id),
    h('td', {}, h('span', { class: `state ${state}` }, state)),
    h('td', { title: n.lease_expires_at ? `lease until ${n.lease_expires_at}` : 'no lease: the daemon serves it itself' }, n.in_process ? 'in process' : `beat ${relative(n.heartbeat_at)}`),
    h('td', { title: `${n.committed.active} active, ${n.committed.stopped} stopped; its runtime holds ${n.reported.sandboxes}` }, of(n.committed.sandboxes, n.capacity.max_sandboxes)),
    h('td', {}, of(n.committed.vcpu, n.capacity.vcpu)),
    h('td', {}, of(n.committed.memory_mb, n.capacity.memory_mb, ' MB')),
    h('td', {}, of(n.committed.disk_gb, n.capacity.disk_gb, ' GB')),
    h('td', {}, String(n.reported.warm_ready)),
    h('td', { title: 'sandboxes it holds that no record owns (it destroys them after a grace)' }, n.reported.orphans === null ? '–' : String(n.reported.orphans)),
    h('td', { class: 'mono' }, n.url ?? 'this process'),
  );
}

export const nodesPage: Page = async (ctx) => {
  const body = h('tbody', { id: 'node-rows' });
  const summary = h('p', { id: 'nodes-summary', class: 'muted' });
  const heads = ['Node', 'State', 'Lease', 'Sandboxes', 'vCPU', 'Memory', 'Disk', 'Warm', 'Orphans', 'Address'];
  ctx.main.append(
    h('section', { id: 'nodes', class: 'panel' }, h('h2', {}, 'Nodes'), summary, h('div', { class: 'table-wrap' }, h('table', { class: 'nodes' }, h('thead', {}, h('tr', {}, ...heads.map((t) => h('th', {}, t)))), body))),
  );
  const load = async () => {
    const list = await call<{ mode: 'cluster' | 'all-in-one'; data: AdminNode[] }>('GET', '/v1/admin/nodes');
    summary.setAttribute('data-mode', list.mode);
    summary.textContent =
      list.mode === 'all-in-one'
        ? 'One machine: the daemon serves its sandboxes itself (sandboxd serve).'
        : `A cluster: ${list.data.filter((n) => n.up).length} of ${list.data.length} node(s) up (sandboxd nodes cordon, drain and remove act on them).`;
    body.replaceChildren(...list.data.map(row));
  };
  await load();
  const timer = setInterval(() => {
    load().catch((err: unknown) => {
      if (!ctx.unauthorized(err)) ctx.notice.say(`Nodes: ${(err as Error).message}`, 'error');
    });
  }, REFRESH_MS);
  return () => clearInterval(timer);
};
