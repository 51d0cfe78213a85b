import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { AGENT_ROUTES } from '@sandboxd/protocol';
import { buildApp } from './app.js';
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
    if (path === '/openapi.json' || path === '/docs' || path.includes('*')) continue;
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

test('/docs renders a browsable reference', async () => {
  const { a } = await app();
  const res = await a.inject({ method: 'GET', url: '/docs' });
  assert.equal(res.statusCode, 200);
  assert.match(res.headers['content-type'] as string, /text\/html/);
  assert.match(res.body, /\/v1\/sandboxes/);
  assert.match(res.body, /\/agent\/execute/);
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
