import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { after, before, test } from 'node:test';
import type { Entry } from './entries.js';
import { FRAME } from './frames.js';
import { basicAuth, openStream, post, startTestAgent, type ReadFrame, type TestAgent } from './rt-testing.js';
import type { FsEvent } from './watcher.js';

// The filesystem routes of /e2b/rt and E2B's plain /files and /health, on a real agent.
let agent: TestAgent;
let base = '';
before(async () => {
  agent = await startTestAgent('rt-fs-test-');
  base = agent.base;
});
after(() => agent.close());

const fs = (route: string, body: unknown) => post(base, `/e2b/rt/fs/${route}`, body);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('make-dir, stat, list with depth, move, remove; errors with their codes', async () => {
  const root = join(agent.dir, 'fs');
  const made = await fs('make-dir', { path: join(root, 'a', 'b') });
  assert.equal(made.status, 200);
  assert.deepEqual([(made.body.entry as Entry).type, (made.body.entry as Entry).path], ['dir', join(root, 'a', 'b')]);
  const again = await fs('make-dir', { path: join(root, 'a', 'b') });
  assert.deepEqual([again.status, again.body.code], [409, 'ALREADY_EXISTS']);
  writeFileSync(join(root, 'a', 'b', 'f.txt'), 'hello');
  const st = (await fs('stat', { path: join(root, 'a', 'b', 'f.txt'), authorization: null })).body.entry as Entry;
  const mtimeMs = Math.floor(statSync(join(root, 'a', 'b', 'f.txt')).mtimeMs);
  assert.deepEqual(st, { name: 'f.txt', type: 'file', path: join(root, 'a', 'b', 'f.txt'), size: 5, mode: 0o644, permissions: '-rw-r--r--', owner: 'root', group: 'root', mtime_ms: mtimeMs });
  symlinkSync(join(root, 'a', 'b', 'f.txt'), join(root, 'link'));
  const link = (await fs('stat', { path: join(root, 'link') })).body.entry as Entry;
  assert.deepEqual([link.type, link.symlink_target], ['symlink', join(root, 'a', 'b', 'f.txt')]);
  rmSync(join(root, 'link'));
  const one = await fs('list', { path: root, depth: 0 });
  assert.deepEqual((one.body.entries as Entry[]).map((e) => e.path), [join(root, 'a')], 'depth 0 is 1');
  const deep = await fs('list', { path: root, depth: 3 });
  assert.deepEqual((deep.body.entries as Entry[]).map((e) => e.path), [join(root, 'a'), join(root, 'a', 'b'), join(root, 'a', 'b', 'f.txt')]);
  const moved = await fs('move', { source: join(root, 'a', 'b', 'f.txt'), destination: join(root, 'c', 'g.txt') });
  assert.equal((moved.body.entry as Entry).path, join(root, 'c', 'g.txt'));
  assert.equal(readFileSync(join(root, 'c', 'g.txt'), 'utf8'), 'hello');
  assert.deepEqual(await fs('remove', { path: join(root, 'a') }), { status: 200, body: {} });
  for (const [route, body] of [
    ['stat', { path: join(root, 'a') }],
    ['remove', { path: join(root, 'a') }],
    ['list', { path: join(root, 'nope') }],
    ['move', { source: join(root, 'nope'), destination: join(root, 'x') }],
  ] as const) {
    const r = await fs(route, body);
    assert.deepEqual([route, r.status], [route, 404], JSON.stringify(r.body));
  }
  const notDir = await fs('list', { path: join(root, 'c', 'g.txt') });
  assert.deepEqual([notDir.status, notDir.body.code], [400, 'NOT_A_DIRECTORY']);
  for (const [route, body] of [
    ['list', { path: '/', depth: 65 }],
    ['list', { path: '/', depth: -1 }],
    ['remove', { path: '/' }],
    ['stat', { path: 'a\0b' }],
    ['stat', {}],
    ['stat', { path: '/', authorization: basicAuth('no-such-user') }],
    ['watchers/events', {}],
  ] as const) {
    const r = await fs(route, body);
    assert.deepEqual([route, r.status], [route, 400], JSON.stringify(r.body));
  }
  assert.equal((await fs('stat', '{oops')).status, 400);
});

test('paths of a user: relative to its home; what it makes is its own', async () => {
  const dir = `/tmp/rt-fs-nobody-${process.pid}`;
  try {
    const made = await fs('make-dir', { path: join(dir, 'x'), authorization: basicAuth('nobody') });
    assert.equal(made.status, 200);
    assert.equal((made.body.entry as Entry).owner, 'nobody');
    assert.equal(statSync(dir).uid, 65534);
    const home = await fs('stat', { path: '.', authorization: basicAuth('root') });
    assert.equal((home.body.entry as Entry).path, '/root');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('watch streams start, then create/write/remove events with entries; it ends when the directory goes', async () => {
  const root = join(agent.dir, 'watched');
  mkdirSync(root, { recursive: true });
  const s = await openStream(base, '/e2b/rt/fs/watch', { path: root, recursive: true, include_entry: true, keepalive_ms: 1000 });
  assert.equal(s.status, 200);
  assert.deepEqual((await s.frames.next()).value?.json, { start: {} });
  const events: FsEvent[] = [];
  const frames: ReadFrame[] = [];
  const reading = (async () => {
    for (let n = await s.frames.next(); !n.done; n = await s.frames.next()) {
      frames.push(n.value);
      if (n.value.json?.event) events.push(n.value.json.event as FsEvent);
    }
  })();
  const waitFor = async (pred: () => boolean, what: string) => {
    for (let i = 0; i < 100 && !pred(); i++) await sleep(50);
    assert.ok(pred(), `${what}: ${JSON.stringify(events)}`);
  };
  writeFileSync(join(root, 'new.txt'), 'x');
  mkdirSync(join(root, 'd'));
  writeFileSync(join(root, 'd', 'inner.txt'), 'y');
  await waitFor(() => events.some((e) => e.name === 'd/inner.txt'), 'recursive');
  // The entry is stat'ed when the event is read: the create's may already see the written byte.
  assert.deepEqual(events.slice(0, 2).map((e) => [e.name, e.type, e.entry?.type]), [
    ['new.txt', 'create', 'file'],
    ['new.txt', 'write', 'file'],
  ]);
  assert.equal(events[1]!.entry!.size, 1);
  assert.equal(typeof events[0]!.entry!.mtime_ms, 'number');
  rmSync(join(root, 'new.txt'));
  await waitFor(() => events.some((e) => e.name === 'new.txt' && e.type === 'remove'), 'remove');
  assert.equal(events.find((e) => e.type === 'remove')!.entry, undefined);
  await sleep(1100);
  assert.ok(frames.some((f) => f.kind === FRAME.keepalive), 'keepalives while idle');
  rmSync(root, { recursive: true });
  await reading; // the watch ends with its directory, and so does the stream
  const missing = await fs('watch', { path: join(agent.dir, 'no-such-dir') });
  assert.deepEqual([missing.status, missing.body.code], [404, 'FILE_NOT_FOUND']);
});

test('a watch stream ends when the client goes; polled watchers give the events of a directory', async () => {
  const root = join(agent.dir, 'polled');
  mkdirSync(root, { recursive: true });
  const s = await openStream(base, '/e2b/rt/fs/watch', { path: root, recursive: false, include_entry: false });
  await s.frames.next();
  s.abort();
  const created = await fs('watchers', { path: root, recursive: false, include_entry: false });
  assert.equal(created.status, 200);
  const watcher_id = created.body.watcher_id as string;
  assert.match(watcher_id, /^[0-9a-f]{24}$/);
  writeFileSync(join(root, 'new.txt'), 'x');
  mkdirSync(join(root, 'd'));
  writeFileSync(join(root, 'd', 'inner.txt'), 'y');
  await sleep(300);
  const events = (await fs('watchers/events', { watcher_id })).body.events as FsEvent[];
  const names = events.map((e) => e.name);
  assert.ok(names.includes('new.txt') && names.includes('d'), names.join(','));
  assert.ok(!names.includes('d/inner.txt'), 'not recursive');
  assert.ok(events.every((e) => e.entry === undefined));
  assert.deepEqual((await fs('watchers/events', { watcher_id })).body.events, [], 'taken once');
  assert.deepEqual(await fs('watchers/remove', { watcher_id }), { status: 200, body: {} });
  const gone = await fs('watchers/events', { watcher_id });
  assert.deepEqual([gone.status, gone.body.code], [404, 'NOT_FOUND']);
  const notDir = await fs('watchers', { path: join(root, 'new.txt') });
  assert.deepEqual([notDir.status, notDir.body.code], [400, 'NOT_A_DIRECTORY']);
});

test('/e2b/envd/files: multipart upload of several files, raw and gzip uploads, download, errors as E2B answers them; /health', async () => {
  const root = join(agent.dir, 'files');
  const form = new FormData();
  form.append('file', new Blob(['first']), join(root, 'one.txt'));
  form.append('file', new Blob([new Uint8Array([0, 1, 2, 255])]), join(root, 'deep', 'two.bin'));
  const up = await fetch(`${base}/e2b/envd/files?username=root`, { method: 'POST', body: form });
  assert.equal(up.status, 200);
  assert.deepEqual(await up.json(), [
    { name: 'one.txt', type: 'file', path: join(root, 'one.txt') },
    { name: 'two.bin', type: 'file', path: join(root, 'deep', 'two.bin') },
  ]);
  const down = await fetch(`${base}/e2b/envd/files?path=${encodeURIComponent(join(root, 'deep', 'two.bin'))}&signature=v1_x&signature_expiration=1`);
  assert.equal(down.status, 200);
  assert.deepEqual([...new Uint8Array(await down.arrayBuffer())], [0, 1, 2, 255]);
  const single = new FormData();
  single.append('file', new Blob(['by path']), 'ignored-name');
  assert.equal((await fetch(`${base}/e2b/envd/files?path=${encodeURIComponent(join(root, 'single.txt'))}`, { method: 'POST', body: single })).status, 200);
  assert.equal(readFileSync(join(root, 'single.txt'), 'utf8'), 'by path');
  const gz = await fetch(`${base}/e2b/envd/files?path=${encodeURIComponent(join(root, 'gz.txt'))}`, {
    method: 'POST',
    headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' },
    body: gzipSync('zipped'),
  });
  assert.equal(gz.status, 200);
  assert.equal(readFileSync(join(root, 'gz.txt'), 'utf8'), 'zipped');
  const mine = new FormData();
  const nobodyFile = `/tmp/rt-fs-nobody-${process.pid}.txt`;
  mine.append('file', new Blob(['n']), nobodyFile);
  assert.equal((await fetch(`${base}/e2b/envd/files?username=nobody`, { method: 'POST', body: mine })).status, 200);
  assert.equal(statSync(nobodyFile).uid, 65534);
  rmSync(nobodyFile);
  const missing = await fetch(`${base}/e2b/envd/files?path=${encodeURIComponent(join(root, 'nope'))}`);
  assert.equal(missing.status, 404);
  assert.deepEqual(Object.keys((await missing.json()) as object).sort(), ['code', 'message']);
  assert.equal((await fetch(`${base}/e2b/envd/files?path=/etc/hostname&username=no-such-user`)).status, 401);
  const meta = await fetch(`${base}/e2b/envd/files?path=/tmp/meta.txt`, { method: 'POST', headers: { 'content-type': 'application/octet-stream', 'x-metadata-k': 'v' }, body: 'x' });
  assert.equal(meta.status, 400);
  const put = await fetch(`${base}/e2b/envd/files?path=/tmp/x`, { method: 'PUT', body: 'x' });
  assert.deepEqual([put.status, put.headers.get('allow')], [405, 'GET, HEAD, POST']);
  assert.equal((await fetch(`${base}/e2b/envd/health`)).status, 204);
});
