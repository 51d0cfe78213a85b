import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { buildApp } from './app.js';
import { loadConfig } from '../config/index.js';
import { FsBlobStore } from '../images/blob-store.js';
import { storeBuildLogs } from '../services/build-logs.js';
import { EventBus } from '../services/events.js';
import { KeyService } from '../services/keys.js';
import { KeyedMutex } from '../services/locks.js';
import { QuotaService } from '../services/quotas.js';
import { SlidingWindowLimiter } from '../services/rate-limit.js';
import { RouteTable } from '../gateway/routes.js';
import { SandboxService } from '../services/sandboxes/index.js';
import { fixedPlacement, nodeOver, refusingRuntime } from '../testing/fake-node.js';
import { BUILD_ABANDONED_MS, TemplateBuildService } from '../services/template-builds/index.js';
import type { BuildEngine } from '../builder/types.js';
import { TemplateService } from '../services/templates.js';
import { TokenService } from '../services/tokens.js';
import { BLOB_CHUNK_BYTES, StoreUploadBlobs } from '../services/upload-blobs.js';
import { sharedUploadKey, UploadService } from '../services/uploads.js';
import { PostgresStore } from '../store/postgres.js';
import { startPostgres, type TestPostgres } from '../testing/postgres.js';

/**
 * Two control replicas on one PostgreSQL database, each with its own data directory, as behind a
 * load balancer: an upload link made by one is good on the other, a file received by one is built
 * from on the other (checked by hash), and a build's log written by one is read through the other,
 * from an offset and live.
 */
let server: TestPostgres;
const dirs: string[] = [];
const closers: Array<() => Promise<void>> = [];

before(async () => {
  server = await startPostgres();
});

after(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined);
  await server?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A build engine whose steps the test drives: it reads its COPY inputs, logs, and waits for `release`. */
function gatedEngine() {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const copied: string[] = [];
  const engine: BuildEngine = {
    async run(input, hooks) {
      for (const list of input.copies.values()) for (const c of list) copied.push(sha256(readFileSync(c.hostPath)));
      hooks.log(`copied: ${copied.join(',')}`);
      for (let i = 0; i < 50; i++) hooks.log(`early line ${i}`);
      await gate;
      for (let i = 0; i < 50; i++) hooks.log(`late line ${i}`);
      return { layerIds: ['layer-x'], env: {}, workdir: null };
    },
  };
  return { engine, release, copied };
}

interface Replica {
  app: FastifyInstance;
  url: string;
  store: PostgresStore;
  blobs: StoreUploadBlobs;
  builds: TemplateBuildService;
  dataDir: string;
}

async function replica(dbUrl: string, engine: BuildEngine): Promise<Replica> {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-replica-'));
  dirs.push(dir);
  const config = loadConfig({ SANDBOXD_DATA_DIR: dir }, { cpus: 2, memoryMb: 4096, diskGb: 100 });
  const store = await PostgresStore.open(dbUrl);
  closers.push(() => store.end());
  const keys = new KeyService(store);
  const templates = new TemplateService(store);
  const tokens = new TokenService(join(dir, 'jwt.pem'), 60);
  const runtime = refusingRuntime(dir);
  const createLimiter = new SlidingWindowLimiter(10, 60_000, 'creates');
  const quotas = new QuotaService(store, config.limits);
  const sandboxes = new SandboxService({
    store,
    placement: fixedPlacement(store, nodeOver(runtime, 'test')),
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
  const blobs = new StoreUploadBlobs(store, new FsBlobStore(join(dir, 'blobs')));
  const uploads = new UploadService(store, blobs, await sharedUploadKey(store), 'http://lb.invalid');
  const builds = new TemplateBuildService({
    store,
    uploads,
    engine,
    limits: { perHour: 100, perDay: 100 },
    log: () => {},
    quotas,
    logs: storeBuildLogs(store),
    coordination: store.coordination,
  });
  closers.push(async () => builds.close());
  const app = await buildApp({ services: { config, store, keys, tokens, sandboxes, templates, events: new EventBus(), createLimiter, quotas, builds, uploads } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  closers.push(() => app.close());
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, store, blobs, builds, dataDir: dir };
}

async function call(r: Replica, key: string | null, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${r.url}${path}`, {
    method,
    headers: { ...(key ? { 'x-api-key': key } : {}), ...(body === undefined ? {} : { 'content-type': body instanceof Uint8Array ? 'application/octet-stream' : 'application/json' }), ...headers },
    ...(body === undefined ? {} : { body: (body instanceof Uint8Array ? body : JSON.stringify(body)) as BodyInit }),
  });
  return { status: res.status, body: (await res.json()) as any };
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
/** The path of an upload URL (the load balancer's host in it stands for either replica). */
const pathOf = (url: string) => new URL(url).pathname;

async function query(url: string, sql: string, args: unknown[] = []): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<Record<string, unknown>>(sql, args)).rows;
  } finally {
    await client.end();
  }
}

/** Reads server-sent events from `res` until `until` says stop; the events so far. */
async function readEvents(reader: ReadableStreamDefaultReader<Uint8Array>, seen: Array<{ event: string; data: any }>, until: () => boolean, timeoutMs = 10_000) {
  const decoder = new TextDecoder();
  let buf = '';
  const deadline = Date.now() + timeoutMs;
  while (!until()) {
    assert.ok(Date.now() < deadline, `no such event within ${timeoutMs} ms; got ${JSON.stringify(seen.slice(-3))}`);
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) !== -1) {
      const block = buf.slice(0, at);
      buf = buf.slice(at + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (event && data) seen.push({ event, data: JSON.parse(data) });
    }
  }
}

test('replicas: an upload link of one is good on the other; a build on the other copies the file; its log is read through the first, from an offset and live', async () => {
  const db = await server.createDatabase();
  const gated = gatedEngine();
  const a = await replica(db, gated.engine);
  const b = await replica(db, gated.engine);
  const org = await new KeyService(a.store).ensureOrg('acme');
  const { secret: key } = await new KeyService(b.store).createKey(org.id);

  // A file of three chunks and a bit: it crosses chunk boundaries in the store.
  const file = Buffer.alloc(3 * BLOB_CHUNK_BYTES + 123);
  for (let i = 0; i < file.length; i++) file[i] = (i * 7 + (i >> 11)) & 0xff;
  const hash = sha256(file);
  const link = await call(a, key, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'data/app.bin', size: file.length, hash: `sha256:${hash}` }] });
  assert.equal(link.status, 200, JSON.stringify(link.body));
  assert.equal(link.body.upload_urls[0].present, false);
  const put = await call(b, null, 'PUT', pathOf(link.body.upload_urls[0].upload_url), new Uint8Array(file));
  assert.equal(put.status, 200, JSON.stringify(put.body));
  assert.equal(put.body.sha256, hash);
  // Either replica now knows the file is there.
  for (const r of [a, b]) {
    const again = await call(r, key, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'data/app.bin', size: file.length, hash: `sha256:${hash}` }] });
    assert.equal(again.body.upload_urls[0].present, true);
  }
  const stored = await query(db, 'SELECT count(*)::int AS n, max(octet_length(data))::int AS biggest FROM upload_blob_chunks');
  assert.deepEqual(stored[0], { n: 4, biggest: BLOB_CHUNK_BYTES }, 'the file is in the store in bounded chunks');

  // The build goes to A, which never received the file: it copies it from the store.
  const started = await call(a, key, 'POST', '/v1/templates/build', {
    alias: 'shared',
    steps: [{ type: 'from', image: 'debian:11' }, { type: 'copy', dest: '/app', file_id: `f_${hash}` }],
  });
  assert.equal(started.status, 202, JSON.stringify(started.body));
  const buildId = started.body.build_id as string;

  // B follows the log live (SSE) while A's build waits at its gate.
  const sse = await fetch(`${b.url}/v1/templates/build/${buildId}/logs`, { headers: { 'x-api-key': key, accept: 'text/event-stream' } });
  assert.equal(sse.status, 200);
  const reader = sse.body!.getReader();
  const events: Array<{ event: string; data: any }> = [];
  await readEvents(reader, events, () => events.some((e) => e.data.message === 'early line 49'));
  assert.ok(!events.some((e) => /late line/.test(e.data.message ?? '')), 'the build has not printed these yet');
  assert.match(events[0]!.data.message, /^build tpl_\w+: template "shared"/);
  assert.ok(events.some((e) => e.data.message === `copied: ${hash}`), 'the step read the bytes uploaded through B');
  assert.equal(sha256(readFileSync(new FsBlobStore(join(a.dataDir, 'blobs')).path(hash))), hash, "A's copy of the file is whole");

  // Polling through B from an offset: the rest of what is written so far, then nothing more.
  const all = await call(b, key, 'GET', `/v1/templates/build/${buildId}/logs`);
  assert.equal(all.body.status, 'building');
  assert.equal(all.body.complete, false);
  const lines = (all.body.logs as string).split('\n');
  const cut = Buffer.byteLength(lines.slice(0, 3).join('\n') + '\n');
  const rest = await call(b, key, 'GET', `/v1/templates/build/${buildId}/logs?offset=${cut}`);
  assert.equal(rest.body.logs, lines.slice(3).join('\n'));
  assert.equal(rest.body.offset, all.body.offset);
  // An offset past the end: nothing, and the end to ask from.
  const past = await call(b, key, 'GET', `/v1/templates/build/${buildId}/logs?offset=${all.body.offset + 1_000_000}`);
  assert.equal(past.status, 200);
  assert.equal(past.body.logs, '');
  assert.equal(past.body.offset, all.body.offset);
  const negative = await call(b, key, 'GET', `/v1/templates/build/${buildId}/logs?offset=-1`);
  assert.equal(negative.status, 400);

  // The build goes on on A: B's stream gets the rest as it is written, then the end.
  gated.release();
  await readEvents(reader, events, () => events.some((e) => e.event === 'done'));
  await reader.cancel().catch(() => undefined);
  const messages = events.filter((e) => e.event === 'log').map((e) => e.data.message as string);
  assert.equal(messages.filter((m) => /^late line/.test(m)).length, 50);
  assert.equal(new Set(messages).size, messages.length, 'no line twice');
  assert.match(messages.at(-1)!, /succeeded: 1 layers/);
  assert.deepEqual(events.at(-1), { event: 'done', data: { status: 'active' } });

  // After the build, either replica reads the whole log, from any offset.
  const final = await call(a, key, 'GET', `/v1/templates/build/${buildId}/logs`);
  const finalB = await call(b, key, 'GET', `/v1/templates/build/${buildId}/logs?offset=${cut}`);
  assert.equal(final.body.complete, true);
  assert.equal(finalB.body.complete, true);
  assert.equal((final.body.logs as string).slice(cut), finalB.body.logs);
  assert.equal((final.body.logs as string).split('\n').filter(Boolean).length, messages.length);
});

test('replicas: a tampered URL, a wrong hash, an oversize body, an oversize file: refused by the other replica, nothing stored', async () => {
  const db = await server.createDatabase();
  const a = await replica(db, gatedEngine().engine);
  const b = await replica(db, gatedEngine().engine);
  const org = await new KeyService(a.store).ensureOrg('acme');
  const { secret: key } = await new KeyService(a.store).createKey(org.id);
  const good = Buffer.from('the real bytes\n');
  const link = await call(a, key, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'x.txt', size: good.length, hash: `sha256:${sha256(good)}` }] });
  const path = pathOf(link.body.upload_urls[0].upload_url);

  // The claim changed (a bigger size), the signature kept: 403.
  const token = path.split('/').pop()!;
  const [payload, mac] = token.split('.');
  const claim = JSON.parse(Buffer.from(payload!, 'base64url').toString());
  const forged = `${Buffer.from(JSON.stringify({ ...claim, s: 100 })).toString('base64url')}.${mac}`;
  const tampered = await call(b, null, 'PUT', path.replace(token, forged), new Uint8Array(100));
  assert.equal(tampered.status, 403, JSON.stringify(tampered.body));
  assert.match(tampered.body.message, /signature is invalid/);
  // Another replica's key (another cluster): 403 as well.
  const otherDb = await server.createDatabase();
  const other = await replica(otherDb, gatedEngine().engine);
  const foreign = await call(other, null, 'PUT', path, new Uint8Array(good));
  assert.equal(foreign.status, 403);

  // The same size, other bytes: 400, nothing stored.
  const wrong = Buffer.from('the fake bytes\n');
  assert.equal(wrong.length, good.length);
  const mismatch = await call(b, null, 'PUT', path, new Uint8Array(wrong));
  assert.equal(mismatch.status, 400, JSON.stringify(mismatch.body));
  assert.match(mismatch.body.message, /sha256/);
  // More bytes than the claim, with or without a Content-Length that says so: 400.
  const longer = await call(b, null, 'PUT', path, new Uint8Array(Buffer.concat([good, good])));
  assert.equal(longer.status, 400, JSON.stringify(longer.body));
  const streamed = await fetch(`${b.url}${path}`, {
    method: 'PUT',
    body: new ReadableStream({
      start(c) {
        c.enqueue(new Uint8Array(good));
        c.enqueue(new Uint8Array(good));
        c.close();
      },
    }),
    headers: { 'content-type': 'application/octet-stream' },
    duplex: 'half',
  } as RequestInit);
  assert.equal(streamed.status, 400, await streamed.text());
  // A file over the limit gets no link at all.
  const huge = await call(b, key, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'big', size: 100 * 1024 * 1024 + 1, hash: `sha256:${'0'.repeat(64)}` }] });
  assert.equal(huge.status, 400);
  assert.equal(huge.body.code, 'INVALID_FILE_METADATA');

  assert.deepEqual(await query(db, 'SELECT count(*)::int AS n FROM upload_blobs'), [{ n: 0 }], 'no blob, not even a partial one');
  assert.deepEqual(await query(db, 'SELECT count(*)::int AS n FROM upload_blob_chunks'), [{ n: 0 }]);
  assert.deepEqual(await query(db, 'SELECT count(*)::int AS n FROM uploads'), [{ n: 0 }]);
  const unproven = await call(a, key, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'x.txt', size: good.length, hash: `sha256:${sha256(good)}` }] });
  assert.equal(unproven.body.upload_urls[0].present, false);

  // The real bytes, through B, then: accepted.
  const ok = await call(b, null, 'PUT', path, new Uint8Array(good));
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
});

test('replicas: a file whose stored bytes were altered is refused when a replica copies it for a build, and nothing of it is kept', async () => {
  const db = await server.createDatabase();
  const a = await replica(db, gatedEngine().engine);
  const b = await replica(db, gatedEngine().engine);
  const bytes = Buffer.alloc(BLOB_CHUNK_BYTES + 10, 'z');
  const hash = sha256(bytes);
  await a.blobs.put(streamOf(bytes), { sha256: hash, size: bytes.length, maxBytes: bytes.length });
  await query(db, "UPDATE upload_blob_chunks SET data = decode('00', 'hex') || substring(data from 2) WHERE seq = 1");
  await assert.rejects(b.blobs.localPath(hash), /sha256/);
  assert.equal(await new FsBlobStore(join(b.dataDir, 'blobs')).has(hash), false);
  // Uploads cut short (a replica that died mid-way) go after a while; a complete one stays.
  await b.store.blobs.begin('up_cut_short', new Date(Date.now() - 7 * 3600_000).toISOString());
  await b.store.blobs.append('up_cut_short', 0, Buffer.from('half'));
  assert.equal(await a.blobs.purgeStale(), 1);
  assert.deepEqual(await a.store.blobs.stat(hash), { size: bytes.length });
});

function streamOf(bytes: Buffer): Readable {
  return Readable.from([bytes]);
}

test('replicas: a build whose replica stopped is failed by another; one that a live replica runs is left to it', async () => {
  const db = await server.createDatabase();
  const gated = gatedEngine();
  const a = await replica(db, gatedEngine().engine);
  const b = await replica(db, gated.engine);
  const org = await new KeyService(a.store).ensureOrg('acme');
  const { secret: key } = await new KeyService(a.store).createKey(org.id);
  const started = await call(b, key, 'POST', '/v1/templates/build', { alias: 'live', steps: [{ type: 'from', image: 'debian:11' }] });
  assert.equal(started.status, 202, JSON.stringify(started.body));
  const live = started.body.build_id as string;
  assert.ok((await a.store.builds.byId(live))?.heartbeatAt, 'a build of a replica carries a heartbeat');
  // A build of a replica that died five minutes ago (its heartbeat stopped then).
  const old = new Date(Date.now() - 300_000).toISOString();
  await a.store.builds.insert({
    id: 'tpl_dead', orgId: org.id, templateId: 'tpl_dead', alias: 'dead', status: 'building', progress: 40, currentStep: 'run',
    request: {}, errorMessage: null, createdAt: old, startedAt: old, completedAt: null, heartbeatAt: old,
  });

  assert.equal(await a.builds.failInterrupted(), 1);
  const dead = await a.store.builds.byId('tpl_dead');
  assert.equal(dead?.status, 'failed');
  assert.match(dead?.errorMessage ?? '', /control replica running the build stopped/);
  assert.equal((await a.store.builds.byId(live))?.status, 'building', "another replica's running build is left alone");
  // The replica that runs it never takes its own build for abandoned, whatever the time.
  assert.equal(await b.builds.failInterrupted(Date.now() + 10 * BUILD_ABANDONED_MS), 0);
  gated.release();
  for (const deadline = Date.now() + 10_000; (await a.store.builds.byId(live))?.status === 'building'; await new Promise((r) => setTimeout(r, 50))) {
    assert.ok(Date.now() < deadline, 'the build never finished');
  }
  assert.equal((await a.store.builds.byId(live))?.status, 'active');
});
