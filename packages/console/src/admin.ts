// Placeholder: replaced by the keys and organizations page.
import { h } from './dom.js';
import type { Page } from './main.js';

export const adminPage: Page = (ctx) => {
  ctx.main.append(h('p', {}, 'Keys'));
  return undefined;
};
