// The organization's templates and their builds: the list (the built-in ones and the
// organization's own, which it may delete), a build's log followed while it grows, and a form that
// starts a build. Logs are read by offset polling (GET …/logs?offset=N): no events token, and a cut
// or a reload loses nothing, since the next call asks again from the same offset.

import { ApiError, call } from './api.js';
import { actionButton, h, relative } from './dom.js';
import type { Page, PageContext } from './page.js';

interface TemplateInfo {
  id: string;
  name: string;
  display_name: string;
  category: string;
  status: string;
  is_public: boolean;
  build_id: string | null;
  default_resources: { vcpu: number; memory_mb: number; disk_gb: number };
  error_message?: string | null;
  created_at: string;
  updated_at: string;
}

interface BuildStatus {
  build_id: string;
  template_id: string;
  status: string;
  progress: number;
  current_step: string | null;
  error_message: string | null;
  build_duration_ms: number | null;
}

interface BuildLogs {
  logs: string;
  offset: number;
  status: string;
  complete: boolean;
}

/** The `from` images of service-spec.md, as suggestions: the service says what it accepts. */
const BASE_IMAGES = ['debian:11', 'debian:10', 'python:3.11', 'python:3.10', 'python:3.9', 'node:20', 'node:18', 'ubuntu:22.04', 'ubuntu:20.04', 'ubuntu:18.04', 'alpine:3.18', 'alpine:3.17'];

/** The most log text kept in the page: a step can print megabytes, and the tab should not. */
const MAX_LOG_CHARS = 1_000_000;

/**
 * The steps box, one step a line: `RUN <command>`, `APT <package>…`, `ENV KEY=VALUE`,
 * `WORKDIR /path` (a line ending in `\` goes on in the next one; `#` starts a comment), or the
 * API's own JSON array of step objects. Copy steps need uploaded files: the SDK and CLI do that.
 */
export function parseSteps(text: string): Array<Record<string, unknown>> {
  const trimmed = text.trim();
  if (trimmed.startsWith('[')) {
    const steps: unknown = JSON.parse(trimmed);
    if (!Array.isArray(steps) || !steps.every((s) => s && typeof s === 'object' && !Array.isArray(s))) throw new Error('steps: a JSON array of step objects');
    return steps as Array<Record<string, unknown>>;
  }
  const steps: Array<Record<string, unknown>> = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const at = i + 1;
    let line = lines[i]!.trim();
    while (line.endsWith('\\') && i + 1 < lines.length) line = `${line.slice(0, -1)}\n${lines[++i]!.trim()}`;
    if (!line || line.startsWith('#')) continue;
    const [, word = '', rest = ''] = /^(\S+)\s*([\s\S]*)$/.exec(line) ?? [];
    const arg = rest.trim();
    switch (word.toUpperCase()) {
      case 'RUN':
        if (!arg) throw new Error(`line ${at}: RUN needs a command`);
        steps.push({ type: 'run', command: arg });
        break;
      case 'APT':
        if (!arg) throw new Error(`line ${at}: APT needs package names`);
        steps.push({ type: 'apt', packages: arg.split(/\s+/) });
        break;
      case 'ENV': {
        const eq = arg.indexOf('=');
        if (eq < 1) throw new Error(`line ${at}: ENV KEY=VALUE`);
        steps.push({ type: 'env', key: arg.slice(0, eq), value: arg.slice(eq + 1) });
        break;
      }
      case 'WORKDIR':
        if (!arg) throw new Error(`line ${at}: WORKDIR needs a path`);
        steps.push({ type: 'workdir', path: arg });
        break;
      case 'FROM':
        throw new Error(`line ${at}: give the base image in its own field`);
      case 'COPY':
        throw new Error(`line ${at}: copy steps need uploaded files; build those with the SDK or the CLI`);
      default:
        throw new Error(`line ${at}: a step is RUN, APT, ENV or WORKDIR (got "${word}")`);
    }
  }
  return steps;
}

const resources = (r: TemplateInfo['default_resources']) => `${r.vcpu} vCPU · ${r.memory_mb} MB · ${r.disk_gb} GB`;

/** A number field that may stay empty (the service's default). */
function optionalInt(input: HTMLInputElement): number | undefined {
  const v = input.value.trim();
  return v === '' ? undefined : Number(v);
}

/** The panel that follows one build: its status line and its log. */
function buildPanel(): { el: HTMLElement; title: HTMLElement; status: HTMLElement; logs: HTMLPreElement } {
  const title = h('h2', {});
  const status = h('p', { id: 'build-status', class: 'build-status' });
  const logs = h('pre', { id: 'build-logs', class: 'build-log mono', tabindex: '0', 'aria-label': 'Build log' });
  const el = h('section', { id: 'build-panel', class: 'panel' }, title, status, logs);
  el.hidden = true;
  return { el, title, status, logs };
}

/**
 * Follows a build until it ends: new log text every second (sooner while it comes fast), its
 * progress, then its final status. Returns what stops following.
 */
function followBuild(
  ctx: PageContext,
  panel: ReturnType<typeof buildPanel>,
  buildId: string,
  name: string,
  ended: (s: BuildStatus, watched: boolean) => void,
): () => void {
  const id = encodeURIComponent(buildId);
  let offset = 0;
  let kept = 0;
  let stopped = false;
  /** Seen while it ran (not a finished build's log opened later). */
  let watched = false;
  let timer: number | undefined;
  panel.el.hidden = false;
  panel.el.setAttribute('data-build', buildId);
  panel.title.textContent = `Build of ${name}`;
  panel.logs.replaceChildren();
  const show = (s: BuildStatus) => {
    panel.el.setAttribute('data-status', s.status);
    const parts = [s.status === 'building' ? `${Math.round(s.progress)}%` : '', s.status === 'building' ? (s.current_step ?? '') : '', s.build_duration_ms !== null ? `${(s.build_duration_ms / 1000).toFixed(1)} s` : ''];
    panel.status.replaceChildren(h('span', { class: `state ${s.status}` }, s.status), ' ', h('span', { class: 'muted mono' }, buildId), ' ', parts.filter(Boolean).join(' · '));
    if (s.error_message) panel.status.append(h('span', { class: 'error-text' }, ` ${s.error_message}`));
  };
  const append = (text: string) => {
    const pre = panel.logs;
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(document.createTextNode(text));
    kept += text.length;
    // The oldest text goes first once the page holds enough; the service keeps it all.
    while (kept > MAX_LOG_CHARS && pre.childNodes.length > 1) {
      const first = pre.firstChild!;
      kept -= first.textContent?.length ?? 0;
      first.remove();
    }
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };
  const tick = async () => {
    try {
      const [chunk, status] = await Promise.all([
        call<BuildLogs>('GET', `/v1/templates/build/${id}/logs?offset=${offset}`),
        call<BuildStatus>('GET', `/v1/templates/build/${id}/status`),
      ]);
      if (stopped) return;
      if (chunk.logs) append(chunk.logs);
      offset = chunk.offset;
      if (chunk.complete) {
        // Its status as of now: the one read beside the last lines may predate the end.
        const final = status.status === 'building' ? await call<BuildStatus>('GET', `/v1/templates/build/${id}/status`) : status;
        if (stopped) return;
        show(final);
        ended(final, watched || status.status === 'building');
        return;
      }
      show(status);
      watched = true;
      timer = window.setTimeout(() => void tick(), chunk.logs ? 300 : 1000);
    } catch (err) {
      if (stopped || ctx.unauthorized(err)) return;
      ctx.notice.say(`Build ${buildId}: ${(err as Error).message}`, 'error');
      if (!(err instanceof ApiError && (err.status === 403 || err.status === 404))) timer = window.setTimeout(() => void tick(), 5000);
    }
  };
  void tick();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
  };
}

export const templatesPage: Page = async (ctx) => {
  const scopes = ctx.account.key.scopes;
  const canWrite = scopes.includes('templates:write');
  const body = h('tbody', { id: 'template-rows' });
  const panel = buildPanel();
  const form = buildForm();
  ctx.main.append(
    h('div', { class: 'table-wrap' }, h('table', { class: 'fixed templates' }, h('thead', {}, h('tr', {}, ...['Template', 'State', 'Resources', 'Built', 'Kind', ''].map((t) => h('th', {}, t)))), body)),
    panel.el,
    canWrite ? form.el : h('p', { class: 'muted' }, 'This key cannot build templates (it lacks templates:write).'),
  );

  let stopFollow: (() => void) | undefined;
  let listTimer: number | undefined;
  let left = false;

  const follow = (buildId: string, name: string) => {
    stopFollow?.();
    stopFollow = followBuild(ctx, panel, buildId, name, (s, watched) => {
      if (!watched) return;
      ctx.notice.say(s.status === 'active' ? `Template ${name} is built.` : `The build of ${name} ${s.status === 'failed' ? 'failed' : `ended: ${s.status}`}.`, s.status === 'active' ? 'info' : 'error');
      void load().catch(fail);
    });
  };
  const fail = (err: unknown) => {
    if (!ctx.unauthorized(err)) ctx.notice.say(String((err as Error).message), 'error');
  };

  const row = (t: TemplateInfo) => {
    const actions = h('div', { class: 'actions' });
    if (t.build_id) {
      const log = h('button', { type: 'button', class: 'small', 'data-action': 'log', 'aria-label': `Build log of ${t.name}` }, 'Build log');
      log.addEventListener('click', () => follow(t.build_id!, t.name));
      actions.append(log);
    }
    if (!t.is_public && canWrite) {
      actions.append(
        actionButton('Delete', `Delete ${t.name}`, ctx.notice, async () => {
          if (!confirm(`Delete the template ${t.name}? Sandboxes can no longer be made from it.`)) return;
          await call('DELETE', `/v1/templates/${encodeURIComponent(t.id)}`);
          ctx.notice.say(`Deleted ${t.name}.`);
          await load();
        }),
      );
    }
    const built = t.status === 'building' ? 'building…' : relative(t.updated_at);
    return h(
      'tr',
      { 'data-template': t.name, 'data-status': t.status },
      h('td', { title: t.display_name }, h('span', { class: 'mono' }, t.name), t.display_name && t.display_name !== t.name ? h('span', { class: 'muted' }, ` ${t.display_name}`) : null),
      h('td', { title: t.error_message ?? '' }, h('span', { class: `state ${t.status}` }, t.status)),
      h('td', {}, resources(t.default_resources)),
      h('td', { title: t.updated_at }, built),
      h('td', {}, t.is_public ? 'built-in' : t.category),
      h('td', { class: 'actions-cell' }, actions),
    );
  };

  /** The list again; again in a few seconds while a build runs, to show when it ends. */
  const load = async (): Promise<TemplateInfo | undefined> => {
    const list = (await call<{ data: TemplateInfo[] }>('GET', '/v1/templates')).data;
    if (left) return undefined;
    body.replaceChildren(...list.map(row));
    window.clearTimeout(listTimer);
    const building = list.find((t) => t.status === 'building' && t.build_id);
    if (building) listTimer = window.setTimeout(() => void load().catch(fail), 3000);
    return building;
  };

  form.el.addEventListener('submit', (ev) => {
    ev.preventDefault();
    let req: Record<string, unknown>;
    try {
      req = form.request();
    } catch (err) {
      ctx.notice.say(`Build: ${(err as Error).message}`, 'error');
      return;
    }
    form.submit.disabled = true;
    ctx.notice.say('Starting the build…');
    call<{ build_id: string; template_id: string; status: string }>('POST', '/v1/templates/build', req).then(
      (started) => {
        form.submit.disabled = false;
        ctx.notice.say(`Building ${String(req.alias)}…`);
        follow(started.build_id, String(req.alias));
        void load().catch(fail);
      },
      (err: unknown) => {
        form.submit.disabled = false;
        if (!ctx.unauthorized(err)) ctx.notice.say(`Build: ${(err as Error).message}`, 'error');
      },
    );
  });

  const building = await load();
  // One that builds now (started elsewhere, or before a reload): follow it.
  if (building) follow(building.build_id!, building.name);
  // Builds can be off on this service; the limits say so (they need sandboxes:read).
  if (canWrite && scopes.includes('sandboxes:read')) {
    const limits = await call<{ template_builds: { per_hour: { used: number; limit: number | null }; running: number } | null }>('GET', '/v1/account/limits').catch(() => undefined);
    if (limits && !limits.template_builds) form.el.replaceWith(h('p', { class: 'muted', id: 'builds-off' }, 'Template builds are off on this service.'));
    else if (limits?.template_builds) {
      const b = limits.template_builds;
      form.quota.textContent = `${b.per_hour.used}${b.per_hour.limit === null ? '' : ` of ${b.per_hour.limit}`} builds this hour${b.running ? `, ${b.running} running` : ''}`;
    }
  }
  return () => {
    left = true;
    stopFollow?.();
    window.clearTimeout(listTimer);
  };
};

/** The build form: name, base image, steps, resources; `request()` is the API's body (or throws). */
function buildForm() {
  const name = h('input', { id: 'build-name', required: '', pattern: '[a-z0-9][a-z0-9._\\-]{0,62}', placeholder: 'my-template', autocomplete: 'off' });
  const from = h('input', { id: 'build-from', list: 'base-images', value: 'debian:11', required: '' });
  const images = h('datalist', { id: 'base-images' }, ...BASE_IMAGES.map((i) => h('option', { value: i })));
  const steps = h('textarea', { id: 'build-steps', rows: '5', spellcheck: 'false', placeholder: 'APT curl git\nRUN pip install requests\nENV MODE=prod\nWORKDIR /app' });
  const cpu = h('input', { id: 'build-cpu', type: 'number', min: '1', max: '64', placeholder: 'default' });
  const memory = h('input', { id: 'build-memory', type: 'number', min: '128', step: '128', placeholder: 'default' });
  const disk = h('input', { id: 'build-disk', type: 'number', min: '1', placeholder: 'default' });
  const update = h('input', { id: 'build-update', type: 'checkbox' });
  const skipCache = h('input', { id: 'build-skip-cache', type: 'checkbox' });
  const submit = h('button', { type: 'submit', id: 'build-start' }, 'Build');
  const quota = h('span', { class: 'muted quota', id: 'build-quota' });
  const field = (label: string, input: HTMLElement) => h('label', {}, label, input);
  const el = h(
    'form',
    { id: 'build-form', class: 'panel stack' },
    h('h2', {}, 'Build a template'),
    h('div', { class: 'fields' }, field('Name', name), field('Base image', from), images, field('vCPU', cpu), field('Memory (MB)', memory), field('Disk (GB)', disk)),
    h('label', { for: 'build-steps' }, 'Steps: one a line, RUN <command>, APT <packages>, ENV KEY=VALUE or WORKDIR <path>; or a JSON array of step objects'),
    steps,
    h('div', { class: 'toolbar' }, h('label', { class: 'check' }, update, 'Rebuild if it exists'), h('label', { class: 'check' }, skipCache, 'Ignore cached layers'), submit, quota),
  );
  const request = (): Record<string, unknown> => {
    const list = parseSteps(steps.value);
    const req: Record<string, unknown> = { alias: name.value.trim(), steps: list };
    // A JSON array may name its own base; the service refuses both at once.
    if (!list.some((s) => s.type === 'from')) req.from_image = from.value.trim();
    const c = optionalInt(cpu);
    const m = optionalInt(memory);
    const d = optionalInt(disk);
    if (c !== undefined) req.cpu = c;
    if (m !== undefined) req.memory = m;
    if (d !== undefined) req.diskGB = d;
    if (update.checked) req.update = true;
    if (skipCache.checked) req.skipCache = true;
    return req;
  };
  return { el, submit, quota, request };
}
