import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { access, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import { errorHandler } from './errors.js';
import { MANUAL_DIR, manualRoutes } from './manual.js';

const dir = mkdtempSync(join(tmpdir(), 'sandboxd-manual-'));
after(() => rmSync(dir, { recursive: true, force: true }));

async function app(from = dir) {
  const a = Fastify();
  a.setErrorHandler(errorHandler);
  manualRoutes(a, from);
  await a.ready();
  return a;
}

test('/manual lists the pages as docs/README.md groups them, then the rest; each page is served as text', async () => {
  writeFileSync(join(dir, 'README.md'), '# Manual\n\n## Using <it>\n\n| Page | What |\n|---|---|\n| [b.md](b.md) | The `b` page |\n| [gone.md](gone.md) | not there |\n');
  writeFileSync(join(dir, 'a.md'), '# A\n<script>alert(1)</script>\n');
  writeFileSync(join(dir, 'b.md'), '# B\n');
  writeFileSync(join(dir, 'notes.txt'), 'not a page');
  const a = await app();

  const index = await a.inject({ method: 'GET', url: '/manual' });
  assert.equal(index.statusCode, 200);
  assert.match(String(index.headers['content-type']), /^text\/html/);
  assert.match(String(index.headers['content-security-policy']), /default-src 'none'/);
  assert.ok(index.body.includes('<h2>Using &#60;it&#62;</h2>'), 'headings are escaped');
  assert.ok(index.body.includes('<a href="/manual/b.md">b.md</a> The b page'));
  assert.ok(index.body.indexOf('b.md') < index.body.indexOf('a.md'), 'the listed pages first, then the others');
  assert.ok(!index.body.includes('gone.md') && !index.body.includes('notes.txt'));
  assert.ok(index.body.includes('href="/docs"'), 'links the API reference');

  const page = await a.inject({ method: 'GET', url: '/manual/a.md' });
  assert.equal(page.statusCode, 200);
  assert.match(String(page.headers['content-type']), /^text\/plain/);
  assert.equal(page.headers['x-content-type-options'], 'nosniff');
  assert.equal(page.body, '# A\n<script>alert(1)</script>\n');

  for (const url of ['/manual/notes.txt', '/manual/missing.md', '/manual/..%2Fetc%2Fpasswd', '/manual/README', '/manual/%2e%2e']) {
    const res = await a.inject({ method: 'GET', url });
    assert.equal(res.statusCode, 404, url);
    assert.ok(!res.body.includes('root:'), url);
  }
  await a.close();
});

test("/manual without a docs folder says so; the repository's own manual lists every page of docs/README.md", async () => {
  const none = await app(join(dir, 'missing'));
  assert.match((await none.inject({ method: 'GET', url: '/manual' })).body, /No pages/);
  await none.close();

  const real = await app(MANUAL_DIR);
  const index = (await real.inject({ method: 'GET', url: '/manual' })).body;
  for (const p of ['lifecycle-api.md', 'agent.md', 'sdk.md', 'cli.md', 'configuration.md', 'security.md', 'cluster.md', 'performance.md']) {
    assert.ok(index.includes(`href="/manual/${p}"`), p);
  }
  assert.ok(!index.includes('Other pages'), 'docs/README.md lists every page');
  await real.close();
});

test('docs/performance.md has one line per figure: a command that exists, what, the figure, its goal', async () => {
  const text = await readFile(join(MANUAL_DIR, 'performance.md'), 'utf8');
  const rows = text.split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| Command |'));
  assert.ok(rows.length > 20, 'the table is there');
  for (const row of rows) {
    const cells = row.slice(1, -1).split(' | ').map((c) => c.trim());
    assert.equal(cells.length, 4, `four cells: ${row}`);
    const [command, what, figure] = cells;
    assert.ok(what !== '' && figure !== '', `a figure and what it is: ${row}`);
    if (command === 'not in a benchmark script') continue;
    // A benchmark, or a test that measures it beside what it checks.
    const test = /^`node --test packages\/([a-z-]+)\/dist\/([a-z0-9/-]+)\.test\.js`$/.exec(command);
    if (test) {
      await access(join(MANUAL_DIR, '..', 'packages', test[1]!, 'src', `${test[2]}.test.ts`));
      continue;
    }
    const m = /^`(?:[A-Z_]+=\S+ )*node bench\/dist\/([a-z0-9-]+)\.js[^`]*`$/.exec(command);
    assert.ok(m, `a benchmark command: ${row}`);
    await access(join(MANUAL_DIR, '..', 'bench', 'src', `${m[1]}.ts`));
  }
});
