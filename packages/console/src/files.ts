// A sandbox's files through its agent API: browse directories, download a file, upload files into
// the directory shown.

import { ApiError, type AgentClient } from './api.js';
import { bytes, h, relative, type Notice } from './dom.js';

interface Entry {
  name: string;
  path: string;
  size: number;
  is_dir: boolean;
  modified_time?: string;
  modified?: string;
  permissions?: string;
}

/** The largest file the page downloads (it holds the file in memory before saving it). */
const MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024;

export function fileBrowser(agent: AgentClient, notice: Notice): { el: HTMLElement; load: (path?: string) => Promise<void> } {
  let cwd = '';
  const where = h('span', { class: 'mono', id: 'files-path' });
  const up = h('button', { type: 'button', class: 'small', id: 'files-up' }, 'Up');
  const refresh = h('button', { type: 'button', class: 'small', id: 'files-refresh' }, 'Refresh');
  const picker = h('input', { type: 'file', id: 'files-upload', multiple: '', 'aria-label': 'Upload files' });
  const body = h('tbody', { id: 'file-rows' });
  const el = h(
    'div',
    { class: 'files' },
    h('div', { class: 'toolbar' }, up, where, refresh, h('label', { class: 'upload' }, 'Upload: ', picker)),
    h('div', { class: 'table-wrap' }, h('table', {}, h('thead', {}, h('tr', {}, ...['Name', 'Size', 'Modified', ''].map((t) => h('th', {}, t)))), body)),
  );

  const download = async (e: Entry) => {
    const res = await agent.fetch('GET', `/files/download?path=${encodeURIComponent(e.path)}`);
    if (!res.ok) {
      const err = (await res.json().catch(() => ({}))) as { message?: string; code?: string };
      throw new ApiError(res.status, err.code ?? `HTTP_${res.status}`, err.message ?? `HTTP ${res.status}`);
    }
    // The bytes are the sandbox's: held in this tab up to a cap (bigger files: the SDK or sbx cp),
    // and saved as plain bytes whatever type the sandbox claimed.
    const parts: BlobPart[] = [];
    let size = 0;
    const reader = res.body!.getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      size += r.value.length;
      if (size > MAX_DOWNLOAD_BYTES) {
        await reader.cancel();
        throw new Error(`${e.name} is over ${bytes(MAX_DOWNLOAD_BYTES)}: download it with the SDK or sbx cp`);
      }
      parts.push(r.value as Uint8Array<ArrayBuffer>);
    }
    const url = URL.createObjectURL(new Blob(parts, { type: 'application/octet-stream' }));
    const a = h('a', { href: url, download: e.name });
    document.body.append(a);
    a.click();
    a.remove();
    window.setTimeout(() => URL.revokeObjectURL(url), 60_000);
  };

  const load = async (path?: string) => {
    const list = await agent.call<{ files: Entry[]; path: string }>('GET', `/files/list${path ? `?path=${encodeURIComponent(path)}` : ''}`);
    cwd = list.path;
    where.textContent = cwd;
    up.disabled = cwd === '/';
    const sorted = list.files.sort((a, b) => Number(b.is_dir) - Number(a.is_dir) || a.name.localeCompare(b.name));
    body.replaceChildren(
      ...sorted.map((e) => {
        const name = e.is_dir ? h('button', { type: 'button', class: 'link', 'data-dir': e.path }, `${e.name}/`) : h('span', {}, e.name);
        if (e.is_dir) name.addEventListener('click', () => void load(e.path).catch((err: unknown) => notice.say(`${e.path}: ${(err as Error).message}`, 'error')));
        const actions = h('td', {});
        if (!e.is_dir) {
          const b = h('button', { type: 'button', class: 'small', 'aria-label': `Download ${e.name}` }, 'Download');
          b.addEventListener('click', () => void download(e).catch((err: unknown) => notice.say(`Download ${e.path}: ${(err as Error).message}`, 'error')));
          actions.append(b);
        }
        const modified = e.modified_time ?? e.modified;
        return h('tr', { 'data-path': e.path }, h('td', { class: 'mono' }, name), h('td', {}, e.is_dir ? '' : bytes(e.size)), h('td', { title: modified ?? '' }, modified ? relative(modified) : ''), actions);
      }),
    );
  };

  up.addEventListener('click', () => {
    const parent = cwd.replace(/\/[^/]*$/, '') || '/';
    void load(parent).catch((err: unknown) => notice.say(`${parent}: ${(err as Error).message}`, 'error'));
  });
  refresh.addEventListener('click', () => void load(cwd).catch((err: unknown) => notice.say((err as Error).message, 'error')));
  picker.addEventListener('change', () => {
    const files = [...(picker.files ?? [])];
    void (async () => {
      for (const f of files) {
        notice.say(`Uploading ${f.name} (${bytes(f.size)})…`);
        const dest = `${cwd === '/' ? '' : cwd}/${f.name}`;
        await agent.call('POST', `/files/upload?path=${encodeURIComponent(dest)}`, f);
      }
      notice.say(`Uploaded ${files.map((f) => f.name).join(', ')} to ${cwd}.`);
      picker.value = '';
      await load(cwd);
    })().catch((err: unknown) => notice.say(`Upload: ${(err as Error).message}`, 'error'));
  });
  return { el, load };
}
