// Placeholder: replaced by the templates page.
import { h } from './dom.js';
import type { Page } from './main.js';

export const templatesPage: Page = (ctx) => {
  ctx.main.append(h('p', {}, 'Templates'));
  return undefined;
};
