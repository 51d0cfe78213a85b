// A built-in template building behind a serving daemon (issue 27): the daemon answers at once with
// base ready (its layer taken from the suite's warm-up), `go` builds as a layer over it in a build
// container, and meanwhile the API lists it as building with a percent and a create of it answers
// 503 TEMPLATE_BUILDING with when to retry; once built, the same create is served.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { builtinLayerIds } from '../../packages/server/dist/images/builtin-layers.js';
import { BUILTIN_TEMPLATES } from '../../packages/server/dist/images/builtin.js';
import { agent, api, createSandbox, startServer, TEST_DATA_DIR, type TestServer } from './harness.js';

let server: TestServer;
before(async () => {
  // The daemon's own layers dir, holding only base (a hard-link copy of the suite's): go must be built.
  const layers = join(TEST_DATA_DIR, `layers-building-${process.pid}`);
  mkdirSync(layers, { mode: 0o700 });
  const base = builtinLayerIds(BUILTIN_TEMPLATES).get('base')!;
  execFileSync('cp', ['-al', join(TEST_DATA_DIR, 'layers', base), join(layers, base)]);
  // The suite's package cache (filled by the warm-up): the build downloads nothing it holds.
  server = await startServer({ templates: ['base', 'go'], env: { SANDBOXD_LAYERS_DIR: layers, SANDBOXD_APT_CACHE_DIR: join(TEST_DATA_DIR, 'apt-cache') } });
  (server as { layersDir?: string }).layersDir = layers;
});
after(async () => {
  await server?.stop();
  const layers = (server as { layersDir?: string } | undefined)?.layersDir;
  if (layers) execFileSync('rm', ['-rf', '--one-file-system', layers]);
});

test('base serves at once; go is building (percent, 503 TEMPLATE_BUILDING + Retry-After), then serves', { timeout: 15 * 60_000 }, async () => {
  const sb = await createSandbox(server, { template_name: 'base' });
  assert.equal((await agent(sb, 'POST', '/commands/run', { command: 'echo ok' })).body.stdout.trim(), 'ok');

  const shown = await api(server, 'GET', '/v1/templates/go');
  assert.equal(shown.status, 200);
  assert.equal(shown.body.status, 'building', JSON.stringify(shown.body));
  assert.equal(shown.body.is_active, false);
  assert.equal(typeof shown.body.progress, 'number');
  const listed = (await api(server, 'GET', '/v1/templates')).body.data.find((t: { name: string }) => t.name === 'go');
  assert.equal(listed.status, 'building');

  const res = await fetch(`${server.baseUrl}/v1/sandboxes`, {
    method: 'POST',
    headers: { 'x-api-key': server.apiKey, 'content-type': 'application/json' },
    body: JSON.stringify({ template_name: 'go' }),
  });
  const body = (await res.json()) as { code: string; message: string; retry_after: number };
  assert.equal(res.status, 503, JSON.stringify(body));
  assert.equal(body.code, 'TEMPLATE_BUILDING');
  assert.match(body.message, /template "go" is still being built \(\d+ % done/);
  assert.ok(body.retry_after >= 5, String(body.retry_after));
  assert.equal(res.headers.get('retry-after'), String(body.retry_after));

  const percents: number[] = [];
  const deadline = Date.now() + 12 * 60_000;
  for (;;) {
    const t = (await api(server, 'GET', '/v1/templates/go')).body;
    if (t.status === 'active') break;
    assert.equal(t.status, 'building', `go: ${t.status} ${t.error_message}`);
    percents.push(t.progress);
    assert.ok(Date.now() < deadline, 'go was not built in 12 minutes');
    await new Promise((r) => setTimeout(r, 1000));
  }
  assert.ok(percents.every((p, i) => i === 0 || p >= percents[i - 1]!), `percent never goes back: ${percents.join(',')}`);
  const shownReady = (await api(server, 'GET', '/v1/templates/go')).body;
  assert.equal(shownReady.is_active, true);
  assert.equal(shownReady.progress, null);
  assert.equal(shownReady.layers.length, 2, 'go is one layer over base');
  const gosb = await createSandbox(server, { template_name: 'go' });
  const v = await agent(gosb, 'POST', '/commands/run', { command: 'go version && git --version' });
  assert.match(v.body.stdout, /go1\.19/);
  assert.match(v.body.stdout, /git version/);
});
