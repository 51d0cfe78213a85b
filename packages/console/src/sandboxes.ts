// The organization's sandboxes, live: filter, create from a template, pause, resume, stop, start,
// extend and delete. Rows are kept by id and redrawn one at a time as events arrive, and rows out
// of view are skipped by the browser's layout (content-visibility), so a list of a thousand
// updates about as fast as a list of ten.

import { ApiError, call, listAll, type SandboxRow, type Template } from './api.js';
import { actionButton, h, relative } from './dom.js';
import { openStream } from './live.js';
import type { Page, PageContext } from './page.js';

export const SANDBOX_EVENTS = ['created', 'paused', 'resumed', 'stopped', 'started', 'deleted', 'expired', 'oom_killed'];

/** The buttons for what can be done to a sandbox in its state. */
export function sandboxActions(ctx: PageContext, r: SandboxRow, refresh: (id: string) => Promise<void>, gone: (id: string) => void): HTMLElement {
  const id = encodeURIComponent(r.id);
  const actions = h('div', { class: 'actions' });
  const post = (verb: string) => () => call('POST', `/v1/sandboxes/${id}/${verb}`).then(() => refresh(r.id));
  const act = (label: string, fn: () => Promise<unknown>) => actionButton(label, `${label} ${r.id}`, ctx.notice, fn);
  if (r.status === 'running') actions.append(act('Pause', post('pause')), act('Stop', post('stop')));
  if (r.status === 'paused') actions.append(act('Resume', post('resume')), act('Stop', post('stop')));
  if (r.status === 'stopped') actions.append(act('Start', post('start')));
  if (r.status !== 'stopped') actions.append(act('Extend', () => call('PUT', `/v1/sandboxes/${id}/timeout`, { timeout_seconds: 3600 }).then(() => refresh(r.id))));
  actions.append(act('Delete', () => call('DELETE', `/v1/sandboxes/${id}`).then(() => gone(r.id))));
  return actions;
}

export const sandboxesPage: Page = async (ctx) => {
  const rows = new Map<string, SandboxRow>();
  const drawn = new Map<string, HTMLElement>();
  const body = h('div', { id: 'sandbox-rows', role: 'rowgroup' });
  const filter = h('input', { type: 'search', id: 'filter', placeholder: 'Filter by id, template or state', 'aria-label': 'Filter' });
  const templates = h('select', { id: 'template', 'aria-label': 'Template' });
  const timeout = h('input', { type: 'number', id: 'timeout', min: '60', step: '60', value: '3600', 'aria-label': 'Timeout (seconds)' });
  const sleep = h('input', { type: 'checkbox', id: 'sleep' });
  const sleepLabel = h('label', { class: 'check', title: 'paused after 10 minutes unused; a request to it wakes it' }, sleep, ' Sleep when idle');
  const create = h('button', { type: 'submit', id: 'create' }, 'Create sandbox');
  const live = h('span', { id: 'live', class: 'live' }, 'connecting…');
  const count = h('span', { id: 'count' });
  const form = h('form', { id: 'create-form', class: 'toolbar' }, templates, timeout, sleepLabel, create);
  ctx.main.append(
    form,
    h('div', { class: 'toolbar' }, filter, count, live),
    h(
      'div',
      { class: 'table-wrap list', role: 'table', 'aria-label': 'Sandboxes' },
      h('div', { class: 'grid-row head', role: 'row' }, ...['Sandbox', 'Template', 'State', 'Created', 'Expires', ''].map((t) => h('div', { role: 'columnheader' }, t))),
      body,
    ),
  );

  const matches = (r: SandboxRow) => {
    const q = filter.value.trim().toLowerCase();
    return !q || r.id.toLowerCase().includes(q) || r.template_name.toLowerCase().includes(q) || r.status.includes(q);
  };
  const newestFirst = (a: SandboxRow, b: SandboxRow) => b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id);
  const counts = () => {
    count.textContent = `${body.childElementCount} of ${rows.size}`;
  };
  /** Everything again: on load and when the filter changes. */
  const renderAll = () => {
    drawn.clear();
    const shown = [...rows.values()].filter(matches).sort(newestFirst);
    body.replaceChildren(...shown.map((r) => draw(r)));
    counts();
  };
  /** One row: replaced in place, put where it sorts, or removed. */
  const renderOne = (id: string) => {
    const r = rows.get(id);
    const old = drawn.get(id);
    if (!r || !matches(r)) {
      old?.remove();
      drawn.delete(id);
    } else if (old) {
      old.replaceWith(draw(r));
    } else {
      const tr = draw(r);
      // Newest first: most new rows go to the top; otherwise before the first older row.
      let before: Element | null = body.firstElementChild;
      while (before && newestFirst(rows.get(before.getAttribute('data-id')!)!, r) < 0) before = before.nextElementSibling;
      body.insertBefore(tr, before);
    }
    counts();
  };
  const gone = (id: string) => {
    rows.delete(id);
    renderOne(id);
  };
  const refreshOne = async (id: string) => {
    try {
      rows.set(id, await call<SandboxRow>('GET', `/v1/sandboxes/${encodeURIComponent(id)}`));
    } catch (err) {
      if (err instanceof ApiError && (err.status === 404 || err.status === 410)) rows.delete(id);
      else throw err;
    }
    renderOne(id);
  };
  const draw = (r: SandboxRow) => {
    const tr = h(
      'div',
      { class: 'grid-row', role: 'row', 'data-id': r.id, 'data-status': r.status },
      h('div', { role: 'cell', class: 'mono' }, h('a', { href: `#/sandboxes/${encodeURIComponent(r.id)}` }, r.id)),
      h('div', { role: 'cell' }, r.template_name),
      h(
        'div',
        { role: 'cell' },
        h('span', { class: `state ${r.status}` }, r.status),
        ...(r.available === false ? [' ', h('span', { class: 'state unavailable', title: 'its node is away: it is served again when the node is back' }, 'node away')] : []),
      ),
      h('div', { role: 'cell', title: r.created_at }, relative(r.created_at)),
      h('div', { role: 'cell', title: r.expires_at ?? '' }, relative(r.expires_at)),
      h('div', { role: 'cell', class: 'actions-cell' }, sandboxActions(ctx, r, refreshOne, gone)),
    );
    drawn.set(r.id, tr);
    return tr;
  };

  const loadAll = async () => {
    const all = await listAll<SandboxRow>('/v1/sandboxes');
    rows.clear();
    for (const r of all) if (r.status !== 'deleted') rows.set(r.id, r);
    renderAll();
  };

  filter.addEventListener('input', renderAll);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    create.disabled = true;
    ctx.notice.say('Creating…');
    const body: Record<string, unknown> = { template_name: templates.value, timeout_seconds: Number(timeout.value) || 3600 };
    if (sleep.checked) Object.assign(body, { idle_timeout_seconds: 600, auto_resume: true });
    call<SandboxRow>('POST', '/v1/sandboxes', body).then(
      (r) => {
        rows.set(r.id, r);
        renderOne(r.id);
        ctx.notice.say(`Created ${r.id}.`);
        create.disabled = false;
      },
      (err: unknown) => {
        ctx.notice.say(`Create: ${(err as Error).message}`, 'error');
        create.disabled = false;
      },
    );
  });

  const ts = (await call<{ data: Template[] }>('GET', '/v1/templates')).data;
  templates.replaceChildren(...ts.filter((t) => !t.status || t.status === 'active' || t.status === 'ready').map((t) => h('option', { value: t.name }, t.name)));
  await loadAll();
  const on: Record<string, (d: { id: string; status: string }) => void> = {};
  for (const kind of SANDBOX_EVENTS) {
    on[kind] = (data) => {
      const known = rows.get(data.id);
      if (data.status === 'deleted') gone(data.id);
      else if (known) {
        rows.set(data.id, { ...known, status: data.status });
        renderOne(data.id);
      } else void refreshOne(data.id).catch(() => undefined);
    };
  }
  let first = true;
  return openStream({
    path: '/v1/events',
    on,
    onStatus: (up) => {
      live.textContent = up ? 'live' : 'reconnecting…';
      live.className = up ? 'live on' : 'live';
      // After a gap, events may have been missed: read the list again.
      if (up && !first) void loadAll().catch((err: unknown) => ctx.unauthorized(err));
      if (up) first = false;
    },
  });
};
