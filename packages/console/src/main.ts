// The sandboxd web console: sign in with an API key (kept in this tab's session storage, never in
// a URL), then the organization's sandboxes, live: filter them, create one from a template,
// pause, resume, stop, start, extend and delete. Talks to the lifecycle API of the origin it is
// served from. Nothing from the service is put into the page as HTML: text nodes only.

const KEY = 'sandboxd.apiKey';

interface SandboxRow {
  id: string;
  status: string;
  template_name: string;
  created_at: string;
  expires_at: string | null;
  resources?: { vcpu?: number; memory_mb?: number; disk_gb?: number };
}

interface Template {
  name: string;
  id: string;
  status?: string;
}

class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

async function call<T>(method: string, path: string, body?: unknown, key = sessionStorage.getItem(KEY) ?? ''): Promise<T> {
  const res = await fetch(path, {
    method,
    headers: { 'x-api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data: unknown;
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    data = { message: text };
  }
  if (!res.ok) {
    const e = data as { code?: string; message?: string };
    throw new ApiError(res.status, e.code ?? `HTTP_${res.status}`, e.message ?? `HTTP ${res.status}`);
  }
  return data as T;
}

/** An element with attributes and children; strings become text nodes. */
function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: Array<Node | string | null>): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c !== null) el.append(typeof c === 'string' ? document.createTextNode(c) : c);
  return el;
}

const app = document.getElementById('app')!;
let notice: HTMLElement;

function say(text: string, kind: 'error' | 'info' = 'info'): void {
  notice.textContent = text;
  notice.className = `notice ${kind}`;
  notice.hidden = !text;
}

function relative(iso: string | null): string {
  if (!iso) return 'never';
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  const a = Math.abs(s);
  if (a < 5) return 'just now';
  const text = a < 60 ? `${a}s` : a < 3600 ? `${Math.round(a / 60)}m` : a < 86400 ? `${Math.round(a / 3600)}h` : `${Math.round(a / 86400)}d`;
  return s >= 0 ? `in ${text}` : `${text} ago`;
}

function signInPage(reason = ''): void {
  app.replaceChildren();
  const input = h('input', { type: 'password', id: 'api-key', autocomplete: 'off', placeholder: 'sbd_…', 'aria-label': 'API key', required: '' });
  const form = h('form', { id: 'sign-in', class: 'card' }, h('h1', {}, 'sandboxd'), h('label', { for: 'api-key' }, 'API key'), input, h('button', { type: 'submit' }, 'Sign in'));
  notice = h('p', { class: 'notice', role: 'status' });
  notice.hidden = true;
  form.append(notice);
  app.append(form);
  if (reason) say(reason, 'error');
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    call('GET', '/v1/account/limits', undefined, key).then(
      () => {
        sessionStorage.setItem(KEY, key);
        void sandboxesPage();
      },
      (err: unknown) => say(err instanceof ApiError && err.status === 401 ? 'That key is not valid (or was revoked).' : String((err as Error).message), 'error'),
    );
  });
  input.focus();
}

async function sandboxesPage(): Promise<void> {
  const rows = new Map<string, SandboxRow>();
  const body = h('tbody', { id: 'sandbox-rows' });
  const filter = h('input', { type: 'search', id: 'filter', placeholder: 'Filter by id, template or state', 'aria-label': 'Filter' });
  const templates = h('select', { id: 'template', 'aria-label': 'Template' });
  const timeout = h('input', { type: 'number', id: 'timeout', min: '60', step: '60', value: '3600', 'aria-label': 'Timeout (seconds)' });
  const create = h('button', { type: 'submit', id: 'create' }, 'Create sandbox');
  const live = h('span', { id: 'live', class: 'live' }, 'connecting…');
  const count = h('span', { id: 'count' });
  notice = h('p', { class: 'notice', role: 'status' });
  notice.hidden = true;
  const signOut = h('button', { type: 'button', class: 'secondary', id: 'sign-out' }, 'Sign out');
  app.replaceChildren(
    h('header', {}, h('h1', {}, 'sandboxd'), h('nav', {}, h('a', { href: '/docs' }, 'API reference'), signOut)),
    notice,
    h('form', { id: 'create-form', class: 'toolbar' }, templates, timeout, create),
    h('div', { class: 'toolbar' }, filter, count, live),
    h('div', { class: 'table-wrap' }, h('table', {}, h('thead', {}, h('tr', {}, ...['Sandbox', 'Template', 'State', 'Created', 'Expires', ''].map((t) => h('th', {}, t)))), body)),
  );
  signOut.addEventListener('click', () => {
    stop();
    sessionStorage.removeItem(KEY);
    signInPage();
  });

  const render = () => {
    const q = filter.value.trim().toLowerCase();
    const shown = [...rows.values()]
      .filter((r) => r.status !== 'deleted')
      .filter((r) => !q || r.id.toLowerCase().includes(q) || r.template_name.toLowerCase().includes(q) || r.status.includes(q))
      .sort((a, b) => b.created_at.localeCompare(a.created_at));
    body.replaceChildren(...shown.map(row));
    count.textContent = `${shown.length} of ${[...rows.values()].filter((r) => r.status !== 'deleted').length}`;
  };

  const act = (label: string, r: SandboxRow, fn: () => Promise<unknown>, after: () => Promise<void> = () => refreshOne(r.id)) => {
    const b = h('button', { type: 'button', class: 'small', 'data-action': label.toLowerCase(), 'aria-label': `${label} ${r.id}` }, label);
    b.addEventListener('click', () => {
      b.disabled = true;
      fn().then(
        after,
        (err: unknown) => {
          say(`${label} ${r.id}: ${(err as Error).message}`, 'error');
          b.disabled = false;
        },
      );
    });
    return b;
  };

  const row = (r: SandboxRow) => {
    const id = encodeURIComponent(r.id);
    const actions = h('div', { class: 'actions' });
    const post = (verb: string) => () => call('POST', `/v1/sandboxes/${id}/${verb}`);
    if (r.status === 'running') actions.append(act('Pause', r, post('pause')), act('Stop', r, post('stop')));
    if (r.status === 'paused') actions.append(act('Resume', r, post('resume')), act('Stop', r, post('stop')));
    if (r.status === 'stopped') actions.append(act('Start', r, post('start')));
    if (r.status !== 'stopped') actions.append(act('Extend', r, () => call('PUT', `/v1/sandboxes/${id}/timeout`, { timeout_seconds: 3600 })));
    actions.append(
      act(
        'Delete',
        r,
        () => call('DELETE', `/v1/sandboxes/${id}`),
        async () => {
          rows.delete(r.id);
          render();
        },
      ),
    );
    return h(
      'tr',
      { 'data-id': r.id, 'data-status': r.status },
      h('td', { class: 'mono' }, r.id),
      h('td', {}, r.template_name),
      h('td', {}, h('span', { class: `state ${r.status}` }, r.status)),
      h('td', { title: r.created_at }, relative(r.created_at)),
      h('td', { title: r.expires_at ?? '' }, relative(r.expires_at)),
      h('td', { class: 'actions-cell' }, actions),
    );
  };

  const refreshOne = async (id: string) => {
    try {
      rows.set(id, await call<SandboxRow>('GET', `/v1/sandboxes/${encodeURIComponent(id)}`));
    } catch (err) {
      if (err instanceof ApiError && (err.status === 404 || err.status === 410)) rows.delete(id);
      else throw err;
    }
    render();
  };

  const loadAll = async () => {
    rows.clear();
    let cursor: string | null = null;
    do {
      const page: { data: SandboxRow[]; next_cursor: string | null } = await call('GET', `/v1/sandboxes?limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
      for (const r of page.data) rows.set(r.id, r);
      cursor = page.next_cursor;
    } while (cursor);
    render();
  };

  // Live: the organization's events over EventSource, opened with a short-lived events token (an
  // API key never goes into a URL), renewed before it expires; on a gap, the list is read again.
  let source: EventSource | null = null;
  let renew: number | undefined;
  let stopped = false;
  const stop = () => {
    stopped = true;
    source?.close();
    window.clearTimeout(renew);
  };
  const connect = async () => {
    if (stopped) return;
    const t = await call<{ token: string; expires_at: string }>('POST', '/v1/events/token', {});
    const next = new EventSource(`/v1/events?token=${encodeURIComponent(t.token)}`);
    next.addEventListener('open', () => {
      live.textContent = 'live';
      live.className = 'live on';
      void loadAll();
    });
    next.addEventListener('error', () => {
      live.textContent = 'reconnecting…';
      live.className = 'live';
      if (next.readyState === EventSource.CLOSED && source === next) renew = window.setTimeout(() => void connect().catch(() => undefined), 2000);
    });
    for (const kind of ['created', 'paused', 'resumed', 'stopped', 'started', 'deleted', 'expired', 'oom_killed']) {
      next.addEventListener(kind, (ev) => {
        const data = JSON.parse((ev as MessageEvent<string>).data) as { id: string; status: string };
        const known = rows.get(data.id);
        if (data.status === 'deleted') rows.delete(data.id);
        else if (known) rows.set(data.id, { ...known, status: data.status });
        if (!known && data.status !== 'deleted') void refreshOne(data.id).catch(() => undefined);
        else render();
      });
    }
    source?.close();
    source = next;
    window.clearTimeout(renew);
    // The stream outlives its token; a new one is fetched ahead of the next reconnect.
    renew = window.setTimeout(() => void connect().catch(() => undefined), Math.max(30_000, Date.parse(t.expires_at) - Date.now() - 60_000));
  };

  filter.addEventListener('input', render);
  document.getElementById('create-form')!.addEventListener('submit', (ev) => {
    ev.preventDefault();
    create.disabled = true;
    say('Creating…');
    call<SandboxRow>('POST', '/v1/sandboxes', { template_name: templates.value, timeout_seconds: Number(timeout.value) || 3600 }).then(
      (r) => {
        rows.set(r.id, r);
        render();
        say(`Created ${r.id}.`);
        create.disabled = false;
      },
      (err: unknown) => {
        say(`Create: ${(err as Error).message}`, 'error');
        create.disabled = false;
      },
    );
  });

  try {
    const list = await call<{ data?: Template[] } | Template[]>('GET', '/v1/templates');
    const ts = Array.isArray(list) ? list : (list.data ?? []);
    templates.replaceChildren(...ts.filter((t) => !t.status || t.status === 'active').map((t) => h('option', { value: t.name }, t.name)));
    await loadAll();
    await connect();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      sessionStorage.removeItem(KEY);
      signInPage('Your key is no longer valid; sign in again.');
      return;
    }
    say(String((err as Error).message), 'error');
  }
}

if (sessionStorage.getItem(KEY)) void sandboxesPage();
else signInPage();
