// The sandboxd web console: sign in with an API key (kept in this tab's session storage, never in
// a URL), then pages routed by the URL's fragment: #/ the sandboxes, #/sandboxes/<id> one sandbox,
// #/templates the templates and their builds, #/volumes the volumes, #/admin keys and organizations and #/nodes the nodes
// (operators only).
// Talks to the lifecycle API of the origin it is served from, and to each sandbox's agent API at
// its public_host. Every page links the manual (/manual) and the API reference (/docs).

import { ApiError, call, KEY } from './api.js';
import { h, Notice } from './dom.js';
import { adminPage } from './admin.js';
import { nodesPage } from './nodes.js';
import { sandboxPage } from './sandbox.js';
import { sandboxesPage } from './sandboxes.js';
import { templatesPage } from './templates.js';
import { volumesPage } from './volumes.js';
import type { Account, Page, PageContext } from './page.js';

const app = document.getElementById('app')!;

/** The manual (the repository's docs/, served by the daemon) and the API reference, on every page. */
const helpLinks = (): HTMLAnchorElement[] => [h('a', { href: '/manual', id: 'nav-manual' }, 'Manual'), h('a', { href: '/docs', id: 'nav-api-reference' }, 'API reference')];

function signInPage(reason = ''): void {
  app.replaceChildren();
  const input = h('input', { type: 'password', id: 'api-key', autocomplete: 'off', placeholder: 'sbd_…', 'aria-label': 'API key', required: '' });
  const notice = new Notice();
  const [manual, reference] = helpLinks();
  const help = h('p', { class: 'muted help' }, manual, ' · ', reference);
  const form = h('form', { id: 'sign-in', class: 'card' }, h('h1', {}, 'sandboxd'), h('label', { for: 'api-key' }, 'API key'), input, h('button', { type: 'submit' }, 'Sign in'), notice.el, help);
  app.append(form);
  if (reason) notice.say(reason, 'error');
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    call<Account>('GET', '/v1/account', undefined, key).then(
      (account) => {
        sessionStorage.setItem(KEY, key);
        shell(account);
      },
      (err: unknown) => notice.say(err instanceof ApiError && err.status === 401 ? 'That key is not valid (or was revoked).' : String((err as Error).message), 'error'),
    );
  });
  input.focus();
}

const ROUTES: Array<{ re: RegExp; page: Page; nav: string }> = [
  { re: /^#?\/?$/, page: sandboxesPage, nav: 'sandboxes' },
  { re: /^#\/sandboxes\/([\w-]{1,128})$/, page: sandboxPage, nav: 'sandboxes' },
  { re: /^#\/templates$/, page: templatesPage, nav: 'templates' },
  { re: /^#\/volumes$/, page: volumesPage, nav: 'volumes' },
  { re: /^#\/admin$/, page: adminPage, nav: 'admin' },
  { re: /^#\/nodes$/, page: nodesPage, nav: 'nodes' },
];

/** The pages of the operator's keys only (the admin API's). */
const OPERATOR_PAGES = new Set(['admin', 'nodes']);

function shell(account: Account): void {
  const notice = new Notice();
  const main = h('section', { id: 'page' });
  const signOut = h('button', { type: 'button', class: 'secondary', id: 'sign-out' }, 'Sign out');
  const links = new Map<string, HTMLAnchorElement>([
    ['sandboxes', h('a', { href: '#/', id: 'nav-sandboxes' }, 'Sandboxes')],
    ['templates', h('a', { href: '#/templates', id: 'nav-templates' }, 'Templates')],
    ['volumes', h('a', { href: '#/volumes', id: 'nav-volumes' }, 'Volumes')],
  ]);
  if (account.operator) {
    links.set('admin', h('a', { href: '#/admin', id: 'nav-admin' }, 'Keys & orgs'));
    links.set('nodes', h('a', { href: '#/nodes', id: 'nav-nodes' }, 'Nodes'));
  }
  const who = h('span', { class: 'who', title: `key ${account.key.name} (${account.key.scopes.join(', ')})` }, account.organization.name);
  app.replaceChildren(h('header', {}, h('h1', {}, h('a', { href: '#/', class: 'brand' }, 'sandboxd')), h('nav', {}, ...links.values(), ...helpLinks(), who, signOut)), notice.el, main);

  let leave: (() => void) | undefined;
  let generation = 0;
  const ctx: PageContext = {
    main,
    notice,
    account,
    unauthorized(err) {
      if (!(err instanceof ApiError && err.status === 401)) return false;
      end('Your key is no longer valid; sign in again.');
      return true;
    },
  };
  const route = () => {
    leave?.();
    leave = undefined;
    const mine = ++generation;
    notice.say('');
    main.replaceChildren();
    const hash = location.hash || '#/';
    const r = ROUTES.find((x) => x.re.test(hash) && (!OPERATOR_PAGES.has(x.nav) || account.operator));
    for (const [name, a] of links) a.classList.toggle('current', name === r?.nav);
    if (!r) {
      main.append(h('p', {}, 'No such page. '), h('a', { href: '#/' }, 'Back to the sandboxes'));
      return;
    }
    Promise.resolve(r.page(ctx, decodeURIComponent(hash.match(r.re)![1] ?? ''))).then(
      (undo) => {
        // Left before it was drawn: undo at once.
        if (mine !== generation) undo?.();
        else leave = undo ?? undefined;
      },
      (err: unknown) => {
        if (!ctx.unauthorized(err)) notice.say(String((err as Error).message), 'error');
      },
    );
  };
  const end = (reason?: string) => {
    window.removeEventListener('hashchange', route);
    generation++;
    leave?.();
    leave = undefined;
    sessionStorage.removeItem(KEY);
    signInPage(reason);
  };
  signOut.addEventListener('click', () => end());
  window.addEventListener('hashchange', route);
  route();
}

const saved = sessionStorage.getItem(KEY);
if (saved) {
  call<Account>('GET', '/v1/account', undefined, saved).then(shell, (err: unknown) => {
    sessionStorage.removeItem(KEY);
    signInPage(err instanceof ApiError && err.status === 401 ? 'Your key is no longer valid; sign in again.' : String((err as Error).message));
  });
} else {
  signInPage();
}
