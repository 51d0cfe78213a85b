// Small DOM helpers. Nothing from the service is put into the page as HTML: text nodes only.

/** An element with attributes and children; strings become text nodes. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: Array<Node | string | null | undefined>): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c !== null && c !== undefined) el.append(typeof c === 'string' ? document.createTextNode(c) : c);
  return el;
}

/** An SVG element (charts). */
export function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number> = {}): SVGElementTagNameMap[K] {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** The page's message line: one per page, replaced by each message. */
export class Notice {
  readonly el = h('p', { class: 'notice', role: 'status' });
  constructor() {
    this.el.hidden = true;
  }
  say(text: string, kind: 'error' | 'info' = 'info'): void {
    this.el.textContent = text;
    this.el.className = `notice ${kind}`;
    this.el.hidden = !text;
  }
}

export function relative(iso: string | null | undefined): string {
  if (!iso) return 'never';
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  const a = Math.abs(s);
  if (a < 5) return 'just now';
  const text = a < 60 ? `${a}s` : a < 3600 ? `${Math.round(a / 60)}m` : a < 86400 ? `${Math.round(a / 3600)}h` : `${Math.round(a / 86400)}d`;
  return s >= 0 ? `in ${text}` : `${text} ago`;
}

export function bytes(n: number): string {
  if (!Number.isFinite(n)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

/** A button that runs `fn`, disabled while it runs; a failure goes to the notice. */
export function actionButton(label: string, aria: string, notice: Notice, fn: () => Promise<unknown>, cls = 'small'): HTMLButtonElement {
  const b = h('button', { type: 'button', class: cls, 'data-action': label.toLowerCase(), 'aria-label': aria }, label);
  b.addEventListener('click', () => {
    b.disabled = true;
    fn().then(
      () => (b.disabled = false),
      (err: unknown) => {
        notice.say(`${aria}: ${(err as Error).message}`, 'error');
        b.disabled = false;
      },
    );
  });
  return b;
}
