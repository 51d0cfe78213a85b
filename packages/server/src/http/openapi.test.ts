import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { AGENT_ROUTES, ERROR_CODES } from '@sandboxd/protocol';
import { buildApp } from './app.js';
import { docsRoutes } from './docs.js';
import { buildOpenApi } from './openapi.js';
import { loadConfig } from '../config.js';
import { SqliteStore } from '../store/sqlite.js';
import { KeyService } from '../services/keys.js';
import { TemplateService } from '../services/templates.js';
import { TokenService } from '../services/tokens.js';
import { SandboxService } from '../services/sandboxes.js';
import { SlidingWindowLimiter } from '../services/rate-limit.js';
import { EventBus } from '../services/events.js';
import { KeyedMutex } from '../services/locks.js';
import { RouteTable } from '../services/routes.js';
import { UploadService } from '../services/uploads.js';
import { TemplateBuildService } from '../services/template-builds.js';
import { QuotaService } from '../services/quotas.js';
import { FsBlobStore } from '../images/blob-store.js';
import type { Runtime } from '../runtime/types.js';

const dir = mkdtempSync(join(tmpdir(), 'sbd-openapi-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The HTTP app over a real store; no sandbox is created here, so the runtime is never reached. */
async function app() {
  const config = loadConfig({ SANDBOXD_DATA_DIR: dir });
  const store = SqliteStore.open(':memory:');
  const keys = new KeyService(store);
  const templates = new TemplateService(store);
  const tokens = new TokenService(join(dir, 'jwt.pem'), 60);
  const unreachable = new Proxy({}, { get: () => () => Promise.reject(new Error('runtime not used in this test')) }) as Runtime;
  const createLimiter = new SlidingWindowLimiter(10, 60_000, 'creates');
  const quotas = new QuotaService(store, config.limits);
  const sandboxes = new SandboxService({
    store,
    runtime: unreachable,
    tokens,
    templates,
    layerPath: (id) => id,
    gateway: { open: async () => 1, close: async () => {}, publicHost: () => 'http://127.0.0.1:1' },
    routes: new RouteTable(),
    events: new EventBus(),
    locks: new KeyedMutex(),
    createLimiter,
    quotas,
    agentReadyTimeoutMs: 100,
    tombstoneSeconds: 60,
    nodeId: 'test',
    log: () => {},
  });
  const uploads = new UploadService(store, new FsBlobStore(join(dir, 'blobs')), join(dir, 'upload.key'), 'http://127.0.0.1:1');
  const builds = new TemplateBuildService(store, uploads, { run: () => Promise.reject(new Error('unused')) }, join(dir, 'logs'), { perHour: 10, perDay: 50 }, () => {}, quotas);
  const a = await buildApp({ services: { config, store, keys, tokens, sandboxes, templates, events: new EventBus(), createLimiter, quotas, builds, uploads } });
  const org = await keys.ensureOrg('default');
  const { secret } = await keys.createKey(org.id);
  return { a, secret };
}

test('/openapi.json is a valid OpenAPI 3.1 document with every route of both APIs', async () => {
  const { a } = await app();
  const registered: string[] = [];
  a.addHook('onRoute', () => {});
  const res = await a.inject({ method: 'GET', url: '/openapi.json' });
  assert.equal(res.statusCode, 200);
  const doc = res.json();
  const validator = new Validator();
  const result = await validator.validate(doc);
  assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2));
  assert.equal(doc.openapi, '3.1.0');

  // Every lifecycle route Fastify knows is documented.
  // Reconstruct full paths from Fastify's own route tree (an independent view of what is served).
  const printed = a.printRoutes({ commonPrefix: false });
  const stack: string[] = [];
  for (const line of printed.split('\n')) {
    const m = /^([│ ]*)[├└]── (\S+)(?: \(([A-Z, ]+)\))?/.exec(line);
    if (!m) continue;
    const depth = m[1]!.length / 4;
    stack.length = depth;
    stack.push(m[2]!);
    if (!m[3]) continue;
    const path = stack.join('').replace(/:([A-Za-z_]+)/g, '{$1}');
    if (path === '/openapi.json' || path === '/docs' || path.startsWith('/docs/') || path === '/' || path === '/console' || path.startsWith('/console/') || path.includes('*')) continue;
    for (const method of m[3].split(',').map((x) => x.trim()).filter((x) => x !== 'HEAD')) registered.push(`${method} ${path}`);
  }
  assert.ok(registered.length >= 20, `found ${registered.length} routes`);
  for (const r of registered) {
    const [method, path] = r.split(' ');
    assert.ok(doc.paths[path!]?.[method!.toLowerCase()], `${r} is missing from the document`);
  }
  for (const r of AGENT_ROUTES) assert.ok(doc.paths[`/agent${r.path}`]?.[r.method.toLowerCase()], `agent ${r.method} ${r.path}`);
  // The create body in the document is the schema that validates requests.
  const create = doc.paths['/v1/sandboxes'].post.requestBody.content['application/json'].schema;
  assert.ok(create.properties.template_name && create.properties.timeout_seconds);
});

test('/docs is the reference UI bundled at build time: its own hashed assets only, cached for good, gzipped, under a CSP', async () => {
  const { a } = await app();
  const res = await a.inject({ method: 'GET', url: '/docs' });
  assert.equal(res.statusCode, 200);
  assert.match(res.headers['content-type'] as string, /text\/html/);
  const csp = String(res.headers['content-security-policy']);
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'self'(;|$)/, 'no inline or remote script');
  assert.ok(!/https?:\/\//.test(res.body), 'nothing from another origin (no CDN)');
  assert.ok(!/<script>|<style>/.test(res.body), 'no inline script or style');
  const assets = [...res.body.matchAll(/(?:src|href)="(\/docs\/assets\/[^"]+)"/g)].map((m) => m[1]!);
  assert.equal(assets.length, 3, res.body);
  for (const url of assets) {
    assert.match(url, /\.[0-9a-f]{16}\.(js|css)$/);
    const plain = await a.inject({ method: 'GET', url });
    assert.equal(plain.statusCode, 200, url);
    assert.match(String(plain.headers['content-type']), url.endsWith('.js') ? /text\/javascript/ : /text\/css/);
    assert.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable');
    assert.equal(plain.headers['content-encoding'], undefined);
    const gz = await a.inject({ method: 'GET', url, headers: { 'accept-encoding': 'gzip, br' } });
    assert.equal(gz.headers['content-encoding'], 'gzip');
    assert.ok(gz.rawPayload.length < plain.rawPayload.length, `${url}: gzip is smaller`);
    assert.ok(!plain.body.includes('sourceMappingURL'), `${url}: no source map reference`);
  }
  const init = assets.find((u) => u.includes('/init.'))!;
  assert.match((await a.inject({ method: 'GET', url: init })).body, /url: '\/openapi\.json'/);
  for (const bad of ['/docs/assets/nope.js', '/docs/assets/..%2fmanifest.json', '/docs/assets/manifest.json']) {
    const r = await a.inject({ method: 'GET', url: bad });
    assert.equal(r.statusCode, 404, bad);
    assert.equal(r.json().code, 'ROUTE_NOT_FOUND');
  }
});

test('/docs without a build of the UI is the plain HTML reference', async () => {
  const Fastify = (await import('fastify')).default;
  const a = Fastify();
  docsRoutes(a, () => buildOpenApi([], 'test'), join(dir, 'no-docs-ui'));
  const res = await a.inject({ method: 'GET', url: '/docs' });
  assert.equal(res.statusCode, 200);
  assert.match(res.body, /\/agent\/execute/);
  assert.match(String(res.headers['content-security-policy']), /default-src 'none'/);
});

test('bodyless POST with a JSON content type is accepted; bad JSON is a 400 in the error shape', async () => {
  const { a, secret } = await app();
  const empty = await a.inject({ method: 'POST', url: '/v1/sandboxes/sbnone/pause', headers: { 'x-api-key': secret, 'content-type': 'application/json' } });
  assert.equal(empty.statusCode, 404);
  assert.equal(empty.json().code, 'NOT_FOUND');
  const bad = await a.inject({ method: 'POST', url: '/v1/sandboxes', headers: { 'x-api-key': secret, 'content-type': 'application/json' }, payload: '{' });
  assert.equal(bad.statusCode, 400);
  assert.deepEqual(Object.keys(bad.json()).sort(), ['code', 'error', 'message', 'request_id']);
  assert.equal(bad.headers['x-request-id'], bad.json().request_id);
});

test('hostile input on unauthenticated routes is a 4xx in the error shape, never a 500', async () => {
  const { a } = await app();
  for (const url of ['/v1/templates/files/upload/garbage', '/v1/templates/files/upload/e30.', '/v1/templates/files/upload/%E0%A4%A.x', `/v1/templates/files/upload/${'a'.repeat(3000)}.b`]) {
    const res = await a.inject({ method: 'PUT', url, payload: 'x', headers: { 'content-type': 'application/octet-stream' } });
    assert.ok(res.statusCode >= 400 && res.statusCode < 500, `${url} → ${res.statusCode}`);
    assert.ok(res.json().code, url);
  }
  const noAuth = await a.inject({ method: 'GET', url: '/v1/sandboxes/x%00y' });
  assert.equal(noAuth.statusCode, 401);
});

test('every operation of both APIs has a group, a summary, a description and its error codes', async () => {
  const { a } = await app();
  const doc = (await a.inject({ method: 'GET', url: '/openapi.json' })).json();
  const groups = new Set((doc.tags as Array<{ name: string; description: string }>).map((t) => t.name));
  const missing: string[] = [];
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    for (const [method, op] of Object.entries(ops)) {
      const where = `${method.toUpperCase()} ${path}`;
      if (!op.summary || !op.description || op.tags?.length !== 1 || !groups.has(op.tags[0])) missing.push(where);
      // INTERNAL_ERROR (a bug, with an incident id) everywhere; the codes named by status.
      assert.match(op.responses['500']?.description ?? '', /INTERNAL_ERROR/, where);
      for (const [status, r] of Object.entries(op.responses as Record<string, any>)) {
        if (!/^[45]\d\d$/.test(status)) continue;
        for (const code of String(r.description).split(', ')) assert.equal(String(ERROR_CODES[code as keyof typeof ERROR_CODES]?.status), status, `${where}: ${code} under ${status}`);
      }
    }
  }
  assert.deepEqual(missing, [], 'operations without a summary, description or group (http/api-docs.ts)');
  assert.match(doc.paths['/v1/sandboxes'].post.responses['429'].description, /RATE_LIMIT_EXCEEDED/);
  assert.equal(doc.paths['/v1/sandboxes/{id}'].get.responses['404'].content['application/json'].example.code, 'NOT_FOUND');
  assert.deepEqual(doc.paths['/agent/files/read'].get.tags, ['files']);
});

test('/console is the console bundled at build time: hashed assets, a CSP without inline code, a first load far under 200 KB compressed', async () => {
  const { a } = await app();
  const res = await a.inject({ method: 'GET', url: '/console' });
  assert.equal(res.statusCode, 200);
  const csp = String(res.headers['content-security-policy']);
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'self'(;|$)/);
  assert.match(csp, /style-src 'self'(;|$)/);
  assert.ok(!/<script>|<style>|https?:\/\//.test(res.body), res.body);
  const assets = [...res.body.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1]!);
  assert.equal(assets.length, 2);
  let transferred = Buffer.byteLength(res.body);
  for (const url of assets) {
    const gz = await a.inject({ method: 'GET', url, headers: { 'accept-encoding': 'gzip' } });
    assert.equal(gz.statusCode, 200, url);
    assert.equal(gz.headers['content-encoding'], 'gzip');
    assert.equal(gz.headers['cache-control'], 'public, max-age=31536000, immutable');
    transferred += gz.rawPayload.length;
  }
  assert.ok(transferred < 200 * 1024, `first load ${transferred} bytes`);
  const miss = await a.inject({ method: 'GET', url: '/console/assets/console.0000000000000000.js' });
  assert.equal(miss.statusCode, 404);
  const root = await a.inject({ method: 'GET', url: '/' });
  assert.deepEqual([root.statusCode, root.headers.location], [302, '/console'], 'the root leads to the console');
});
