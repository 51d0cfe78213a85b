// The organization's volumes (issue 32): filesystems its sandboxes share, each with its size and the
// sandboxes that mount it. Read-only here: `sbx volume` and the API make and delete them.

import { call } from './api.js';
import { h, relative } from './dom.js';
import type { Page } from './page.js';

interface Volume {
  id: string;
  name: string;
  size_gb: number;
  mounted_by: string[];
  created_at: string;
}

function row(v: Volume): HTMLElement {
  return h(
    'tr',
    { 'data-volume': v.name },
    h('td', {}, v.name),
    h('td', { class: 'mono' }, v.id),
    h('td', {}, `${v.size_gb} GB`),
    h('td', {}, ...(v.mounted_by.length ? v.mounted_by.map((id) => h('a', { href: `#/sandboxes/${id}`, class: 'mono' }, id)) : ['–'])),
    h('td', { title: v.created_at }, relative(v.created_at)),
  );
}

export const volumesPage: Page = async (ctx) => {
  const body = h('tbody', { id: 'volume-rows' });
  const empty = h('p', { class: 'muted', id: 'volumes-empty' }, 'No volumes. Make one with `sbx volume create NAME --size GB`, mount it with `sbx create --volume NAME:/path`.');
  const heads = ['Name', 'Id', 'Size', 'Mounted by', 'Created'];
  ctx.main.append(h('section', { id: 'volumes', class: 'panel' }, h('h2', {}, 'Volumes'), h('div', { class: 'table-wrap' }, h('table', {}, h('thead', {}, h('tr', {}, ...heads.map((t) => h('th', {}, t)))), body)), empty));
  const list = await call<{ data: Volume[] }>('GET', '/v1/volumes');
  body.replaceChildren(...list.data.map(row));
  empty.hidden = list.data.length > 0;
  return undefined;
};
