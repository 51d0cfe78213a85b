import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { Validator } from '@seriousme/openapi-schema-validator';
import { AGENT_ROUTES, ERROR_CODES, Sandbox } from '@sandboxd/protocol';
import { buildApp } from './app.js';
import { docsRoutes } from './docs.js';
import { buildOpenApi } from './openapi.js';
import { AGENT_RESPONSES, RESPONSES } from './responses/index.js';
import { loadConfig } from '../config/index.js';
import { SqliteStore } from '../store/sqlite.js';
import { KeyService } from '../services/keys.js';
import { TemplateService } from '../services/templates.js';
import { TokenService } from '../services/tokens.js';
import { SandboxService } from '../services/sandboxes/index.js';
import { fixedPlacement, nodeOver, refusingRuntime } from '../testing/fake-node.js';
import { SlidingWindowLimiter } from '../services/rate-limit.js';
import { EventBus } from '../services/events.js';
import { KeyedMutex } from '../services/locks.js';
import { RouteTable } from '../gateway/routes.js';
import { UploadService, uploadKeyFromFile } from '../services/uploads.js';
import { localUploadBlobs } from '../services/upload-blobs.js';
import { fileBuildLogs } from '../services/build-logs.js';
import { TemplateBuildService } from '../services/template-builds/index.js';
import { QuotaService } from '../services/quotas.js';
import { FsBlobStore } from '../images/blob-store.js';
import { describes, documentedSuccess, examplesOf, sseEvents, validator } from '../testing/openapi-check.js';


const dir = mkdtempSync(join(tmpdir(), 'sbd-openapi-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The HTTP app over a real store; no sandbox is created here, so the runtime is never reached. */
async function app() {
  const config = loadConfig({ SANDBOXD_DATA_DIR: dir });
  const store = SqliteStore.open(':memory:');
  const keys = new KeyService(store);
  const templates = new TemplateService(store);
  const tokens = new TokenService(join(dir, 'jwt.pem'), 60);
  // No container is reached (a sandbox's socket path is only recorded).
  const unreachable = refusingRuntime(dir);
  const createLimiter = new SlidingWindowLimiter(10, 60_000, 'creates');
  const quotas = new QuotaService(store, config.limits);
  const sandboxes = new SandboxService({
    store,
    placement: fixedPlacement(store, nodeOver(unreachable, 'test')),
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
    log: () => {},
  });
  const uploads = new UploadService(store, localUploadBlobs(new FsBlobStore(join(dir, 'blobs'))), uploadKeyFromFile(join(dir, 'upload.key')), 'http://127.0.0.1:1');
  const builds = new TemplateBuildService({ store, uploads, engine: { run: () => Promise.reject(new Error('unused')) }, limits: { perHour: 10, perDay: 50 }, log: () => {}, quotas, logs: fileBuildLogs(join(dir, 'logs')) });
  const a = await buildApp({ services: { config, store, keys, tokens, sandboxes, templates, events: new EventBus(), createLimiter, quotas, builds, uploads } });
  const org = await keys.ensureOrg('default');
  const { secret } = await keys.createKey(org.id);
  return { a, secret, store, keys, org };
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
    // The nodes' layer route is no part of the public API; E2B's (/e2b/) is described by E2B; /mcp
    // speaks the Model Context Protocol (its tools describe themselves: docs/mcp.md).
    if (path === '/openapi.json' || path.startsWith('/internal/') || path === '/docs' || path.startsWith('/docs/') || path === '/' || path === '/console' || path.startsWith('/console/') || path === '/manual' || path.startsWith('/manual/') || path.startsWith('/e2b/') || path === '/mcp' || path.includes('*')) continue;
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
  // Styles: this origin's, and the elements xterm.js adds, which carry the page's nonce (new each load).
  const nonce = /style-src 'self' 'nonce-([A-Za-z0-9+/=]{16,})'(;|$)/.exec(csp)?.[1];
  assert.ok(nonce, csp);
  assert.ok(res.body.includes(`<meta name="style-nonce" content="${nonce}">`));
  const again = await a.inject({ method: 'GET', url: '/console' });
  assert.ok(!String(again.headers['content-security-policy']).includes(nonce), 'a new nonce for each load');
  assert.ok(!/<script>|<style>|https?:\/\//.test(res.body), res.body);
  const assets = [...res.body.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1]!);
  assert.equal(assets.length, 2);
  // The first load: the page, its script and stylesheet, and the chunks the script imports
  // statically (the terminal's, imported dynamically, comes only with a terminal).
  let transferred = Buffer.byteLength(res.body);
  const seen = new Set<string>();
  for (let url = assets.shift(); url; url = assets.shift()) {
    if (seen.has(url)) continue;
    seen.add(url);
    const gz = await a.inject({ method: 'GET', url, headers: { 'accept-encoding': 'gzip' } });
    assert.equal(gz.statusCode, 200, url);
    assert.equal(gz.headers['content-encoding'], 'gzip');
    assert.equal(gz.headers['cache-control'], 'public, max-age=31536000, immutable');
    transferred += gz.rawPayload.length;
    if (url.endsWith('.js')) {
      const plain = (await a.inject({ method: 'GET', url })).body;
      for (const m of plain.matchAll(/(?:^|[;}\s])import\s*(?:[\w*{}\s,$]+from\s*)?"\.\/([\w.-]+\.js)"/g)) assets.push(`/console/assets/${m[1]}`);
    }
  }
  assert.ok(seen.size >= 2, [...seen].join(' '));
  assert.ok(transferred < 200 * 1024, `first load ${transferred} bytes`);
  const miss = await a.inject({ method: 'GET', url: '/console/assets/console.0000000000000000.js' });
  assert.equal(miss.statusCode, 404);
  const root = await a.inject({ method: 'GET', url: '/' });
  assert.deepEqual([root.statusCode, root.headers.location], [302, '/console'], 'the root leads to the console');
});

test('every operation of both APIs answers with a described success: a real schema, examples that validate, and an example of its JSON request body', async () => {
  const { a } = await app();
  const doc = (await a.inject({ method: 'GET', url: '/openapi.json' })).json();
  // Closed: an example shows no field its schema does not list.
  const check = validator({ closed: true });
  const problems: string[] = [];
  let operations = 0;
  for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    for (const [method, op] of Object.entries(ops)) {
      operations++;
      const where = `${method.toUpperCase()} ${path}`;
      const successes = Object.entries(op.responses as Record<string, any>).filter(([status]) => /^(101|2\d\d)$/.test(status));
      if (successes.length === 0) problems.push(`${where}: no success response`);
      for (const [status, r] of successes) {
        const at = `${where} ${status}`;
        if (!r.description || r.description === 'success') problems.push(`${at}: no description beyond "success"`);
        if (status === '101') {
          // A WebSocket upgrade: no body, but the messages each side sends once it is open.
          for (const side of ['client', 'server'] as const) {
            const m = r['x-websocket']?.[side];
            if (!m || !describes(m.schema, 'application/json')) problems.push(`${at}: no schema of the ${side}'s messages`);
            else if (examplesOf(m).length === 0) problems.push(`${at}: no example of the ${side}'s messages`);
            else for (const ex of examplesOf(m)) check(m.schema, ex, `${at} ${side} message example`);
          }
          continue;
        }
        const media = Object.entries((r.content ?? {}) as Record<string, any>);
        if (media.length === 0) problems.push(`${at}: no body described`);
        for (const [type, m] of media) {
          if (!describes(m.schema, type)) {
            problems.push(`${at} ${type}: no schema that describes the body (${JSON.stringify(m.schema)})`);
            continue;
          }
          const examples = examplesOf(m);
          if (examples.length === 0) problems.push(`${at} ${type}: no example`);
          for (const ex of examples) check(m.schema, ex, `${at} ${type} example`);
          if (type === 'text/event-stream') {
            const events = (m['x-events'] ?? {}) as Record<string, unknown>;
            if (Object.keys(events).length === 0) problems.push(`${at}: no schema of the events' data (x-events)`);
            for (const ex of examples) {
              const sent = sseEvents(String(ex));
              assert.ok(sent.length > 0, `${at}: the example holds events`);
              for (const e of sent) {
                assert.ok(events[e.event], `${at}: event "${e.event}" of the example is not described`);
                check(events[e.event], JSON.parse(e.data), `${at} event ${e.event} example`);
              }
            }
          }
        }
      }
      for (const [type, m] of Object.entries((op.requestBody?.content ?? {}) as Record<string, any>)) {
        const at = `${where} request ${type}`;
        if (!describes(m.schema, type)) problems.push(`${at}: no schema that describes the body`);
        else if (type === 'application/json') {
          if (examplesOf(m).length === 0) problems.push(`${at}: no example`);
          for (const ex of examplesOf(m)) check(m.schema, ex, `${at} example`);
        }
      }
    }
  }
  assert.deepEqual(problems, [], 'operations without a described success or example (http/responses/)');
  assert.ok(operations >= 60, `${operations} operations`);

  // What the document says of a few, exactly.
  const responses = (p: string, m: string) => doc.paths[p][m].responses;
  assert.deepEqual(Object.keys(responses('/v1/sandboxes', 'post')).filter((s) => /^[12]/.test(s)), ['201']);
  assert.deepEqual(Object.keys(responses('/v1/templates/build', 'post')).filter((s) => /^[12]/.test(s)), ['202']);
  assert.deepEqual(Object.keys(responses('/agent/execute/async', 'post')).filter((s) => /^[12]/.test(s)), ['202']);
  assert.deepEqual(Object.keys(responses('/agent/terminal', 'get')).filter((s) => /^[12]/.test(s)), ['101']);
  assert.deepEqual(Object.keys(responses('/v1/templates/build/{id}/logs', 'get')['200'].content).sort(), ['application/json', 'text/event-stream']);
  assert.ok(responses('/agent/files/download', 'get')['200'].content['*/*'], 'a download is bytes of any type');
  assert.ok(responses('/metrics', 'get')['200'].content['text/plain'], 'Prometheus text');
  assert.deepEqual(Object.keys(doc.paths['/v1/templates/files/upload/{token}'].put.requestBody.content), ['application/octet-stream']);
  assert.equal(doc.paths['/v1/sandboxes/{id}/pause'].post.requestBody, undefined, 'a bodyless POST documents no body');
  assert.equal(doc.paths['/v1/events/token'].post.requestBody.required, false, 'the events token body is optional');
  // Every entry of responses/ is an operation served; a route that declares its response
  // schema (what Fastify serializes with) declares the one responses/ names.
  for (const [prefix, entries] of [['', RESPONSES], ['/agent', AGENT_RESPONSES]] as const) {
    for (const [k, d] of Object.entries(entries)) {
      const [method, path] = k.split(' ') as [string, string];
      const op = doc.paths[`${prefix}${path}`]?.[method.toLowerCase()];
      assert.ok(op, `responses/: ${k} is no operation`);
      const declared = d.content?.['application/json']?.schema;
      if (declared) assert.deepEqual(op.responses[String(d.status)].content['application/json'].schema, JSON.parse(JSON.stringify(declared)), `${k}: the route declares another schema`);
    }
  }
});

test('the checks of the document fail on what they are there to catch', () => {
  const check = validator();
  assert.throws(() => check(JSON.parse(JSON.stringify(Sandbox)), { id: 'sbq7k2m9x4v8t1w6z3r5np' }, 'a partial sandbox'), /must have required property/);
  assert.equal(describes({}, 'application/json'), false);
  assert.equal(describes({ type: 'object' }, 'application/json'), false);
  assert.equal(describes({ type: 'string', format: 'binary' }, '*/*'), true);
  assert.throws(() => sseEvents('event: x\n\n'), /event and data/);
});

test('what the routes really answer validates against the document', async () => {
  const { a, store, keys, org } = await app();
  const doc = (await a.inject({ method: 'GET', url: '/openapi.json' })).json();
  // Every field of a real answer must be documented, and every required one sent.
  const check = validator({ closed: true });
  const admin = (await keys.createKey(org.id, { name: 'admin', scopes: ['admin', 'sandboxes:read', 'sandboxes:write', 'templates:read', 'templates:write'] })).secret;
  const call = async (method: string, url: string, documented: string, payload?: unknown, headers: Record<string, string> = {}) => {
    const res = await a.inject({ method: method as 'GET', url, headers: { 'x-api-key': admin, ...headers }, ...(payload === undefined ? {} : { payload: payload as object }) });
    assert.ok(res.statusCode < 300, `${method} ${url}: ${res.statusCode} ${res.body}`);
    const answer = documentedSuccess(doc, method, documented, res.statusCode);
    const type = String(res.headers['content-type']).split(';')[0]!;
    assert.ok(answer.content[type], `${method} ${url}: ${type} is not documented`);
    check(answer.content[type].schema, type === 'application/json' ? res.json() : res.body, `${method} ${url} answer`);
    return res;
  };

  await call('GET', '/health', '/health');
  await call('GET', '/v1/account', '/v1/account');
  await call('GET', '/v1/account/limits', '/v1/account/limits');
  await call('POST', '/v1/events/token', '/v1/events/token');

  await call('GET', '/v1/admin/orgs', '/v1/admin/orgs');
  await call('POST', '/v1/admin/orgs', '/v1/admin/orgs', { name: 'acme' });
  await call('GET', '/v1/admin/keys', '/v1/admin/keys');
  const created = (await call('POST', '/v1/admin/keys', '/v1/admin/keys', { org: 'acme', name: 'ci' })).json();
  await call('DELETE', `/v1/admin/keys/${created.id}`, '/v1/admin/keys/{id}');

  const now = new Date().toISOString();
  await store.templates.upsert({
    id: 'tpl_af851e734adfae9a94c3', orgId: null, name: 'code-interpreter', displayName: 'Code Interpreter', description: 'Python', category: 'data-science', language: 'python',
    vcpu: 2, memoryMb: 2048, diskGb: 10, status: 'active', isPublic: true, buildId: null, features: ['code_execution'], tags: ['python'], layers: ['a'.repeat(64)],
    env: {}, workdir: '/workspace', errorMessage: null, createdAt: now, updatedAt: now,
  });
  await call('GET', '/v1/templates', '/v1/templates');
  await call('GET', '/v1/templates/code-interpreter', '/v1/templates/{nameOrId}');

  // A sandbox row as a create leaves it (no container: the routes used here do not reach the runtime).
  await store.sandboxes.insert({
    id: 'sbq7k2m9x4v8t1w6z3r5np', orgId: org.id, templateId: 'tpl_af851e734adfae9a94c3', templateName: 'code-interpreter', status: 'running', region: 'local', internetAccess: true, egress: null,
    timeoutSeconds: null, expiresAt: null, vcpu: 2, memoryMb: 2048, diskGb: 10, layers: ['a'.repeat(64)], templateEnv: {}, envVars: {}, gatewayPort: 40017, nodeId: 'test',
    version: 0, deletedReason: null, createdAt: now, updatedAt: now, deletedAt: null, onTimeout: 'delete', idleTimeoutSeconds: null, autoResume: false, idleCheckAt: null, snapshotId: null, lineage: [],
  });
  await call('GET', '/v1/sandboxes?limit=1', '/v1/sandboxes');
  await call('GET', '/v1/sandboxes/sbq7k2m9x4v8t1w6z3r5np', '/v1/sandboxes/{id}');
  await call('PUT', '/v1/sandboxes/sbq7k2m9x4v8t1w6z3r5np/timeout', '/v1/sandboxes/{id}/timeout', { timeout_seconds: 600 });
  await call('POST', '/v1/sandboxes/sbq7k2m9x4v8t1w6z3r5np/token/refresh', '/v1/sandboxes/{id}/token/refresh');
  await call('GET', '/v1/sandboxes/sbq7k2m9x4v8t1w6z3r5np/metrics', '/v1/sandboxes/{id}/metrics');
  await call('POST', '/v1/events/token', '/v1/events/token', { sandbox_id: 'sbq7k2m9x4v8t1w6z3r5np' });
  // A drain of the node it runs on (without a body): a running sandbox is listed and left there.
  await store.nodes.register({ id: 'test', url: 'http://127.0.0.1:1', capacity: { vcpu: 1, memoryMb: 1024, diskGb: 1, maxSandboxes: 10 } }, 60_000);
  const nodes = (await call('GET', '/v1/admin/nodes', '/v1/admin/nodes')).json();
  assert.deepEqual(nodes.data.map((n: { id: string; committed: { active: number } }) => [n.id, n.committed.active]), [['test', 1]]);
  const drain = (await call('POST', '/v1/admin/nodes/test/drain', '/v1/admin/nodes/{id}/drain')).json();
  assert.deepEqual([drain.running.map((r: { id: string }) => r.id), drain.moved, drain.drained], [['sbq7k2m9x4v8t1w6z3r5np'], [], false]);

  const bytes = Buffer.from('print("hello")\n');
  const sha = createHash('sha256').update(bytes).digest('hex');
  const link = (await call('POST', '/v1/templates/files/upload-link', '/v1/templates/files/upload-link', { files: [{ path: 'app/main.py', size: bytes.length, hash: `sha256:${sha}` }] })).json();
  await call('POST', '/v1/templates/files/upload-link', '/v1/templates/files/upload-link', { files_hash: 'a3f1c9e07b5d2846', content_length: 10 });
  const token = new URL(link.upload_urls[0].upload_url).pathname.split('/').pop()!;
  await call('PUT', `/v1/templates/files/upload/${token}`, '/v1/templates/files/upload/{token}', bytes, { 'content-type': 'application/octet-stream' });

  const build = (await call('POST', '/v1/templates/build', '/v1/templates/build', { alias: 'py-app', steps: [{ type: 'from', image: 'python:3.11' }, { type: 'copy', file_id: `f_${sha}`, dest: '/workspace/' }] })).json();
  await call('GET', `/v1/templates/build/${build.build_id}/status`, '/v1/templates/build/{id}/status');
  await call('GET', `/v1/templates/build/${build.build_id}/logs?offset=0`, '/v1/templates/build/{id}/logs');
});
