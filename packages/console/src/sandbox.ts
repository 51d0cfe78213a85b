// One sandbox: its state and actions, live CPU, memory and disk charts, a terminal, its files,
// its processes and its events.

import { AgentClient, ApiError, call, type SandboxRow } from './api.js';
import { LineChart } from './chart.js';
import { bytes, h, relative } from './dom.js';
import { desktopPanel } from './desktop.js';
import { fileBrowser } from './files.js';
import { openStream } from './live.js';
import type { Page } from './page.js';
import { SANDBOX_EVENTS, sandboxActions } from './sandboxes.js';

interface Metrics {
  status: string;
  timestamp: string;
  cpu: { usage_seconds: number; vcpu: number };
  memory: { used_bytes: number; limit_bytes: number };
  disk: { used_bytes: number; total_bytes: number };
  pids: number;
}

interface Proc {
  pid: number;
  ppid: number;
  name: string;
  status: string;
  command: string;
}

/** What makes it sleep and wake. */
function sleepText(sb: SandboxRow): string {
  const parts = [sb.idle_timeout_seconds ? `pauses after ${sb.idle_timeout_seconds} s` : 'stays running'];
  if (sb.auto_resume) parts.push('wakes on a request');
  return parts.join(', ');
}

export const sandboxPage: Page = async (ctx, id) => {
  let sb: SandboxRow;
  try {
    sb = await call<SandboxRow>('GET', `/v1/sandboxes/${encodeURIComponent(id)}`);
  } catch (err) {
    if (err instanceof ApiError && (err.status === 404 || err.status === 410)) {
      ctx.main.append(h('p', {}, `There is no sandbox ${id} (it may have been deleted). `), h('a', { href: '#/' }, 'Back to the sandboxes'));
      return undefined;
    }
    throw err;
  }
  const undo: Array<() => void> = [];
  const head = h('div', { class: 'sandbox-head' });
  const cpu = new LineChart('chart-cpu', 'CPU', (v) => `${v.toFixed(1)} %`, () => 100 * (sb.resources?.vcpu ?? 1), 30);
  const memory = new LineChart('chart-memory', 'Memory', bytes, () => undefined, 30);
  const disk = new LineChart('chart-disk', 'Disk', bytes, () => undefined, 30);
  const tools = h('div', { class: 'tools' });
  const events = h('ol', { id: 'events', class: 'events' });
  const noEvents = h('p', { class: 'muted' }, 'None since this page opened.');
  ctx.main.append(
    head,
    h('section', { class: 'panel' }, h('h2', {}, 'Usage'), h('div', { class: 'charts' }, cpu.el, memory.el, disk.el)),
    tools,
    h('section', { class: 'panel' }, h('h2', {}, 'Events'), noEvents, events),
  );

  const gone = () => {
    location.hash = '#/';
  };
  const refresh = async () => {
    try {
      const next = await call<SandboxRow>('GET', `/v1/sandboxes/${encodeURIComponent(id)}`);
      const wasRunning = sb.status === 'running';
      sb = next;
      drawHead();
      if ((sb.status === 'running') !== wasRunning) drawTools();
    } catch (err) {
      if (err instanceof ApiError && (err.status === 404 || err.status === 410)) gone();
      else if (!ctx.unauthorized(err)) throw err;
    }
  };
  const drawHead = () => {
    const r = sb.resources ?? {};
    head.replaceChildren(
      h('div', {}, h('h2', { class: 'mono' }, sb.id), h('span', { class: `state ${sb.status}`, id: 'sandbox-state', 'data-status': sb.status }, sb.status)),
      h(
        'dl',
        {},
        h('dt', {}, 'Template'),
        h('dd', {}, sb.template_name),
        h('dt', {}, 'Resources'),
        h('dd', {}, `${r.vcpu ?? '?'} vCPU, ${r.memory_mb ?? '?'} MiB, ${r.disk_gb ?? '?'} GiB`),
        h('dt', {}, 'Created'),
        h('dd', { title: sb.created_at }, relative(sb.created_at)),
        h('dt', {}, sb.on_timeout === 'pause' ? (sb.status === 'paused' ? 'Kept until' : 'Sleeps') : 'Expires'),
        h('dd', { title: sb.expires_at ?? '' }, relative(sb.expires_at)),
        h('dt', {}, 'When unused'),
        h('dd', { id: 'sleep-settings' }, sleepText(sb)),
        // The operator's keys are told which node holds it.
        ...(sb.node ? [h('dt', {}, 'Node'), h('dd', { id: 'sandbox-node', class: 'mono' }, h('a', { href: '#/nodes' }, sb.node))] : []),
      ),
      sandboxActions(ctx, sb, refresh, gone),
    );
  };

  // Terminal, files and processes need the sandbox running: they are made when it runs, and
  // closed when it does not.
  let closeTools: Array<() => void> = [];
  const drawTools = () => {
    for (const c of closeTools) c();
    closeTools = [];
    tools.replaceChildren();
    if (sb.status !== 'running' || !sb.public_host) {
      tools.append(h('section', { class: 'panel' }, h('p', { class: 'muted' }, `The sandbox is ${sb.status}: its terminal, files and processes are there while it runs.`)));
      return;
    }
    const client = new AgentClient(sb.id, sb.public_host);
    const termStatus = h('span', { id: 'terminal-status', class: 'live' }, 'not open');
    const termBox = h('div', { id: 'terminal', class: 'terminal' });
    const procs = h('tbody', { id: 'process-rows' });
    const ports = h('tbody', { id: 'port-rows' });
    const files = fileBrowser(client, ctx.notice);
    tools.append(
      h('section', { class: 'panel' }, h('h2', {}, 'Terminal ', termStatus), termBox),
      h('section', { class: 'panel' }, h('h2', {}, 'Files'), files.el),
      h('section', { class: 'panel' }, h('h2', {}, 'Listening ports'), h('div', { class: 'table-wrap' }, h('table', {}, h('thead', {}, h('tr', {}, ...['Port', 'Addresses', 'Listens on', 'Preview'].map((t) => h('th', {}, t)))), ports))),
      h('section', { class: 'panel' }, h('h2', {}, 'Processes'), h('div', { class: 'table-wrap' }, h('table', {}, h('thead', {}, h('tr', {}, ...['PID', 'Parent', 'Name', 'State', 'Command'].map((t) => h('th', {}, t)))), procs))),
    );
    let open = true;
    closeTools.push(() => (open = false));
    void import('./terminal.js')
      .then((t) => t.openTerminal(termBox, client, (text) => (termStatus.textContent = text)))
      .then(
        (close) => (open ? closeTools.push(close) : close()),
        (err: unknown) => (termStatus.textContent = `could not open: ${(err as Error).message}`),
      );
    void files.load().catch((err: unknown) => ctx.notice.say(`Files: ${(err as Error).message}`, 'error'));
    void desktopPanel(client, sb.id, (m) => ctx.notice.say(m, 'error')).then((panel) => open && panel && tools.prepend(panel), () => undefined);
    const loadProcs = async () => {
      const p = await client.call<{ processes: Proc[] }>('GET', '/processes');
      procs.replaceChildren(...p.processes.sort((a, b) => a.pid - b.pid).map((x) => h('tr', {}, h('td', {}, String(x.pid)), h('td', {}, String(x.ppid)), h('td', {}, x.name), h('td', {}, x.status), h('td', { class: 'mono wrap' }, x.command))));
    };
    // What listens inside, from the service (the kernel's tables), not from the sandbox.
    const loadPorts = async () => {
      const p = await call<{ data: Array<{ port: number; addresses: string[]; loopback_only: boolean }> }>('GET', `/v1/sandboxes/${encodeURIComponent(sb.id)}/ports`);
      ports.replaceChildren(
        ...(p.data.length
          ? p.data.map((x) =>
              h(
                'tr',
                { 'data-port': String(x.port) },
                h('td', {}, String(x.port)),
                h('td', { class: 'mono' }, x.addresses.join(', ')),
                h('td', {}, x.loopback_only ? 'loopback' : 'network'),
                h('td', {}, previewButton(x.port)),
              ),
            )
          : [h('tr', {}, h('td', { class: 'muted' }, 'nothing listens'))]),
      );
    };
    // Its preview URL in a new tab: a private one through its signed link, which sets the
    // preview's own cookie there (the console's key never leaves this page).
    const previewButton = (port: number) => {
      const b = h('button', { type: 'button', class: 'small', 'data-preview': String(port) }, 'Open');
      b.addEventListener('click', () => {
        // Opened now, in the click, or a popup blocker stops it; pointed at the URL once known.
        const tab = window.open('about:blank', '_blank');
        if (tab) tab.opener = null;
        call<{ url: string; signed_url?: string }>('GET', `/v1/sandboxes/${encodeURIComponent(sb.id)}/ports/${port}`).then(
          (r) => {
            if (tab) tab.location.href = r.signed_url ?? r.url;
          },
          (err: unknown) => {
            tab?.close();
            ctx.notice.say(`Preview of port ${port}: ${(err as Error).message}`, 'error');
          },
        );
      });
      return b;
    };
    const refreshAll = () => {
      void loadProcs().catch(() => undefined);
      void loadPorts().catch(() => undefined);
    };
    refreshAll();
    const timer = window.setInterval(refreshAll, 5000);
    closeTools.push(() => window.clearInterval(timer));
  };
  undo.push(() => {
    for (const c of closeTools) c();
  });

  drawHead();
  drawTools();

  // Live figures: CPU as the share of the sandbox's vCPUs used between two samples.
  let last: Metrics | undefined;
  undo.push(
    openStream({
      path: `/v1/sandboxes/${encodeURIComponent(id)}/metrics/stream?interval=2`,
      sandboxId: id,
      on: {
        metrics: (m: Metrics) => {
          if (last && m.status === 'running') {
            const dt = (Date.parse(m.timestamp) - Date.parse(last.timestamp)) / 1000;
            const used = m.cpu.usage_seconds - last.cpu.usage_seconds;
            if (dt > 0 && used >= 0) cpu.push((100 * used) / dt);
          }
          last = m;
          memory.push(m.memory.used_bytes);
          disk.push(m.disk.used_bytes);
        },
        end: () => gone(),
      },
    }),
  );
  undo.push(
    openStream({
      path: `/v1/sandboxes/${encodeURIComponent(id)}/events`,
      sandboxId: id,
      on: Object.fromEntries(
        SANDBOX_EVENTS.map((kind) => [
          kind,
          (e: { status: string; at?: string; reason?: string }) => {
            noEvents.remove();
            events.prepend(h('li', { 'data-kind': kind }, h('time', { datetime: e.at ?? '' }, e.at ? new Date(e.at).toLocaleTimeString() : ''), ` ${kind}`, e.reason ? ` (${e.reason})` : ''));
            if (kind === 'deleted') gone();
            else void refresh().catch(() => undefined);
          },
        ]),
      ),
    }),
  );
  return () => {
    for (const u of undo) u();
  };
};
