import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { ServiceError } from '@sandboxd/protocol';
import { REPO_ROOT } from '../config/index.js';

/** The manual: the repository's docs/ folder, the version of the daemon that serves it. */
export const MANUAL_DIR = join(REPO_ROOT, 'docs');

/** Nothing but the page itself: no scripts, no styles, no connections. */
const MANUAL_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const PAGE = /^[\w-]+\.md$/;

const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function pages(dir: string): Set<string> {
  try {
    return new Set(readdirSync(dir).filter((f) => PAGE.test(f)));
  } catch {
    return new Set();
  }
}

/**
 * The contents, grouped as docs/README.md groups them: its `## ` headings and, under each, its
 * table rows that link a page (`| [page.md](page.md) | what |`). Pages it does not list follow.
 */
function contents(dir: string, files: Set<string>): string {
  const sections: Array<{ title: string; items: Array<{ file: string; what: string }> }> = [];
  const listed = new Set<string>();
  const index = files.has('README.md') ? readFileSync(join(dir, 'README.md'), 'utf8') : '';
  for (const line of index.split('\n')) {
    const heading = /^##\s+(.+)$/.exec(line);
    if (heading) sections.push({ title: heading[1]!, items: [] });
    const row = /^\|\s*\[[^\]]*\]\(([\w-]+\.md)\)\s*\|\s*(.*?)\s*\|\s*$/.exec(line);
    if (row && sections.length > 0 && files.has(row[1]!) && !listed.has(row[1]!)) {
      sections.at(-1)!.items.push({ file: row[1]!, what: row[2]!.replace(/`/g, '') });
      listed.add(row[1]!);
    }
  }
  const rest = [...files].filter((f) => f !== 'README.md' && !listed.has(f)).sort();
  if (rest.length > 0) sections.push({ title: 'Other pages', items: rest.map((file) => ({ file, what: '' })) });
  const body = sections
    .filter((s) => s.items.length > 0)
    .map((s) => `<h2>${escape(s.title)}</h2>\n<ul>\n${s.items.map((i) => `<li><a href="/manual/${i.file}">${i.file}</a>${i.what ? ` ${escape(i.what)}` : ''}</li>`).join('\n')}\n</ul>`)
    .join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>sandboxd manual</title>
<link rel="icon" href="data:,">
</head><body>
<h1>sandboxd manual</h1>
<p>The pages of this version's <code>docs/</code> folder, as text. The API reference is at <a href="/docs">/docs</a>; the console at <a href="/console">/console</a>.</p>
${body || '<p>No pages: this installation has no docs/ folder.</p>'}
</body></html>
`;
}

/**
 * GET /manual: the manual's contents; GET /manual/<page>.md: one page as plain text (Markdown reads
 * as it is). Only the .md files of the manual's folder are served, by exact name, read at each
 * request so that the pages are those of the checkout the daemon runs from.
 */
export function manualRoutes(app: FastifyInstance, dir = MANUAL_DIR): void {
  const headers = { 'content-security-policy': MANUAL_CSP, 'x-content-type-options': 'nosniff', 'referrer-policy': 'no-referrer', 'cache-control': 'no-cache' };
  app.get('/manual', async (_req, reply) => reply.headers(headers).type('text/html; charset=utf-8').send(contents(dir, pages(dir))));
  app.get<{ Params: { page: string } }>('/manual/:page', async (req, reply) => {
    const page = req.params.page;
    if (!PAGE.test(page) || !pages(dir).has(page)) throw new ServiceError('ROUTE_NOT_FOUND', `no page ${JSON.stringify(page.slice(0, 100))} in the manual (see /manual)`);
    return reply.headers(headers).type('text/plain; charset=utf-8').send(readFileSync(join(dir, page)));
  });
}
