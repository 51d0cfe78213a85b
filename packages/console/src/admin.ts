// Organizations and API keys, through the admin API (the operator's keys only): the organizations,
// one organization's keys, a form for each, and revoke. A new key's secret is in the create answer
// only: it is shown here once, with a copy button, and dropped from the page when it is dismissed
// or the page is left.

import { call } from './api.js';
import { actionButton, h, relative, type Notice } from './dom.js';
import type { Page, PageContext } from './page.js';

interface Org {
  id: string;
  name: string;
  created_at: string;
}

interface Key {
  id: string;
  org_id: string;
  org: string | null;
  name: string;
  scopes: string[];
  created_at: string;
  revoked_at: string | null;
  last_used_at: string | null;
}

/**
 * API_SCOPES of packages/protocol/src/lifecycle/account.ts, copied: importing it would bundle
 * TypeBox into the console for one list (the browser test checks they are the same).
 */
const SCOPES = ['sandboxes:read', 'sandboxes:write', 'templates:read', 'templates:write', 'metrics:read', 'admin'];
/** What a key gets when none are named (DEFAULT_KEY_SCOPES): the form starts with these. */
const DEFAULT_SCOPES = new Set(['sandboxes:read', 'sandboxes:write', 'templates:read', 'templates:write']);

const when = (iso: string | null) => h('td', { title: iso ?? '' }, relative(iso));

/** The secret of a key just made: shown until dismissed, with a copy button. */
function secretBox(notice: Notice, k: Key & { secret: string }, dismiss: () => void): HTMLElement {
  const value = h('code', { id: 'key-secret-value', class: 'mono' }, k.secret);
  const copy = h('button', { type: 'button', id: 'copy-secret', class: 'small' }, 'Copy');
  copy.addEventListener('click', () => {
    const done = () => notice.say(`Copied the secret of ${k.name}.`);
    const byHand = () => {
      // No clipboard (an insecure origin, or refused): select it for a manual copy.
      getSelection()?.selectAllChildren(value);
      notice.say('Could not copy: the secret is selected, copy it by hand.', 'error');
    };
    if (navigator.clipboard) navigator.clipboard.writeText(k.secret).then(done, byHand);
    else byHand();
  });
  const ok = h('button', { type: 'button', id: 'dismiss-secret', class: 'small secondary' }, 'I have stored it');
  ok.addEventListener('click', dismiss);
  return h(
    'div',
    { id: 'key-secret', class: 'secret', 'data-key': k.id, role: 'alert' },
    h('strong', {}, `The secret of ${k.name} (${k.id}), for ${k.org ?? k.org_id}:`),
    value,
    h('p', {}, 'It is shown this once and cannot be shown again: the service keeps only its hash. Store it now.'),
    h('div', { class: 'actions' }, copy, ok),
  );
}

/** One organization's keys: the list, the form that makes one, revoke. */
function keysPanel(ctx: PageContext) {
  const title = h('h2', {});
  const body = h('tbody', { id: 'key-rows' });
  const secretSlot = h('div', {});
  const name = h('input', { id: 'key-name', placeholder: 'key name (optional)', autocomplete: 'off', maxlength: '100' });
  const boxes = SCOPES.map((s) => h('input', { type: 'checkbox', name: 'scope', value: s, id: `scope-${s.replace(':', '-')}` }));
  for (const b of boxes) b.checked = DEFAULT_SCOPES.has(b.value);
  const create = h('button', { type: 'submit', id: 'create-key' }, 'Create key');
  const form = h(
    'form',
    { id: 'key-form', class: 'toolbar' },
    name,
    h('fieldset', { class: 'scopes' }, h('legend', {}, 'Scopes'), ...boxes.map((b) => h('label', { for: b.id }, b, b.value))),
    create,
  );
  const el = h(
    'section',
    { id: 'keys', class: 'panel' },
    title,
    form,
    secretSlot,
    h('div', { class: 'table-wrap' }, h('table', { class: 'keys' }, h('thead', {}, h('tr', {}, ...['Key', 'Id', 'Scopes', 'Created', 'Last used', 'State', ''].map((t) => h('th', {}, t)))), body)),
  );
  let org: Org | undefined;

  const row = (k: Key) => {
    const own = k.id === ctx.account.key.id;
    const actions = h('div', { class: 'actions' });
    if (!k.revoked_at && !own) {
      actions.append(
        actionButton('Revoke', `Revoke ${k.name}`, ctx.notice, async () => {
          if (!confirm(`Revoke the key ${k.name} (${k.id})? Every client using it is refused from now on.`)) return;
          const revoked = await call<Key>('DELETE', `/v1/admin/keys/${encodeURIComponent(k.id)}`);
          ctx.notice.say(`Revoked ${k.name}.`);
          tr.replaceWith(row(revoked));
        }),
      );
    }
    const tr = h(
      'tr',
      { 'data-key': k.id, 'data-revoked': String(Boolean(k.revoked_at)) },
      h('td', {}, k.name, own ? h('span', { class: 'muted' }, ' (this key)') : null),
      h('td', { class: 'mono' }, k.id),
      h('td', { class: 'scopes' }, k.scopes.join(', ')),
      when(k.created_at),
      when(k.last_used_at),
      h('td', { title: k.revoked_at ?? '' }, h('span', { class: `state ${k.revoked_at ? 'revoked' : 'active'}` }, k.revoked_at ? `revoked ${relative(k.revoked_at)}` : 'active')),
      h('td', { class: 'actions-cell' }, actions),
    );
    return tr;
  };

  const show = async (o: Org) => {
    org = o;
    forget();
    el.setAttribute('data-org', o.name);
    title.textContent = `Keys of ${o.name}`;
    const keys = (await call<{ data: Key[] }>('GET', `/v1/admin/keys?org=${encodeURIComponent(o.id)}`)).data;
    // Another organization chosen meanwhile: its list wins.
    if (org !== o) return;
    body.replaceChildren(...keys.sort((a, b) => b.created_at.localeCompare(a.created_at)).map(row));
  };
  /** The secret leaves the page (dismissed, another organization, the page left). */
  const forget = () => secretSlot.replaceChildren();

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const target = org;
    if (!target) return;
    const scopes = boxes.filter((b) => b.checked).map((b) => b.value);
    if (scopes.length === 0) {
      ctx.notice.say('Choose at least one scope.', 'error');
      return;
    }
    create.disabled = true;
    const req: Record<string, unknown> = { org: target.id, scopes };
    if (name.value.trim()) req.name = name.value.trim();
    call<Key & { secret: string }>('POST', '/v1/admin/keys', req).then(
      (k) => {
        create.disabled = false;
        name.value = '';
        ctx.notice.say(`Created the key ${k.name}.`);
        // The secret is shown whatever is on show now (it names its organization): it exists nowhere else.
        if (org === target) body.prepend(row(k));
        secretSlot.replaceChildren(secretBox(ctx.notice, k, forget));
      },
      (err: unknown) => {
        create.disabled = false;
        if (!ctx.unauthorized(err)) ctx.notice.say(`Create key: ${(err as Error).message}`, 'error');
      },
    );
  });
  return { el, show, forget };
}

export const adminPage: Page = async (ctx) => {
  const body = h('tbody', { id: 'org-rows' });
  const orgName = h('input', { id: 'org-name', required: '', placeholder: 'new organization', autocomplete: 'off', pattern: '[A-Za-z0-9][A-Za-z0-9._\\-]{0,62}', 'aria-label': 'Organization name' });
  const create = h('button', { type: 'submit', id: 'create-org' }, 'Create organization');
  const form = h('form', { id: 'org-form', class: 'toolbar' }, orgName, create);
  const keys = keysPanel(ctx);
  ctx.main.append(
    h('section', { id: 'orgs', class: 'panel' }, h('h2', {}, 'Organizations'), form, h('div', { class: 'table-wrap' }, h('table', { class: 'orgs' }, h('thead', {}, h('tr', {}, ...['Organization', 'Id', 'Created', ''].map((t) => h('th', {}, t)))), body))),
    keys.el,
  );
  const fail = (err: unknown) => {
    if (!ctx.unauthorized(err)) ctx.notice.say(String((err as Error).message), 'error');
  };

  let current = '';
  const select = (o: Org) => {
    current = o.id;
    for (const tr of body.children) tr.classList.toggle('current', tr.getAttribute('data-org-id') === o.id);
    void keys.show(o).catch(fail);
  };
  const row = (o: Org) => {
    const pick = h('button', { type: 'button', class: 'small', 'data-action': 'keys', 'aria-label': `Keys of ${o.name}` }, 'Keys');
    pick.addEventListener('click', () => select(o));
    return h(
      'tr',
      { 'data-org': o.name, 'data-org-id': o.id, class: o.id === current ? 'current' : '' },
      h('td', {}, o.name),
      h('td', { class: 'mono' }, o.id),
      when(o.created_at),
      h('td', { class: 'actions-cell' }, pick),
    );
  };
  const load = async () => {
    const orgs = (await call<{ data: Org[] }>('GET', '/v1/admin/orgs')).data;
    body.replaceChildren(...orgs.map(row));
    return orgs;
  };

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    create.disabled = true;
    call<Org>('POST', '/v1/admin/orgs', { name: orgName.value.trim() }).then(
      async (o) => {
        create.disabled = false;
        orgName.value = '';
        ctx.notice.say(`Created the organization ${o.name}.`);
        await load();
        select(o);
      },
      (err: unknown) => {
        create.disabled = false;
        if (!ctx.unauthorized(err)) ctx.notice.say(`Create organization: ${(err as Error).message}`, 'error');
      },
    ).catch(fail);
  });

  const orgs = await load();
  // The operator's own organization first.
  const own = orgs.find((o) => o.id === ctx.account.organization.id) ?? orgs[0];
  if (own) select(own);
  return () => keys.forget();
};
