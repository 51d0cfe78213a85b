import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import type { ReplicaEntry } from '../store/types/index.js';
import { insertSandboxRow } from '../testing/store-rows.js';
import { clusterStatus } from './cluster-status.js';

const capacity = { vcpu: 8, memoryMb: 16384, diskGb: 200, maxSandboxes: 50 };
const usage = { sandboxes: 0, vcpu: 0, memoryMb: 0, diskGb: 0 };
const ago = (ms: number) => new Date(Date.now() - ms).toISOString();
const entry = (id: string, role: ReplicaEntry['role']): ReplicaEntry => ({ id, role, hostname: id.split(':')[0]!, pid: 100, url: `http://${id.split(':')[0]}:8080`, version: '1', startedAt: ago(3600_000) });

test('a store nothing ever served from: down, and says so', async () => {
  const store = SqliteStore.open(':memory:');
  const s = await clusterStatus(store);
  assert.equal(s.mode, 'unknown');
  assert.equal(s.verdict, 'down');
  assert.match(s.problems[0]!, /nothing serves from this store/);
  assert.equal(s.schema.version, s.schema.latest);
  store.close();
});

test('the all-in-one: its daemon up is all it takes; one that died before it is a warning; stopped, it is down', async () => {
  const store = SqliteStore.open(':memory:');
  await store.replicas.beat(entry('host:1:aaa', 'serve'), ago(90_000));
  await store.replicas.beat(entry('host:2:bbb', 'serve'), ago(1000));
  await insertSandboxRow(store, 'sb1', 'host');
  await insertSandboxRow(store, 'sb2', 'host', 'stopped');
  let s = await clusterStatus(store);
  assert.equal(s.mode, 'all-in-one');
  assert.deepEqual(s.replicas.map((r) => [r.id, r.state]), [['host:1:aaa', 'gone'], ['host:2:bbb', 'up']]);
  assert.deepEqual(s.problems, []);
  assert.match(s.warnings.join('\n'), /serve host:1:aaa at http:\/\/host:8080 is gone: not seen for \d+ s/);
  assert.equal(s.verdict, 'warnings');
  assert.deepEqual([s.sandboxes.active, s.sandboxes.stopped], [1, 1]);
  assert.deepEqual(s.nodes, [], "its machine is in its process, not the registry's");

  await store.replicas.stopped('host:2:bbb');
  s = await clusterStatus(store);
  assert.equal(s.verdict, 'down');
  assert.match(s.problems[0]!, /^no all-in-one daemon is up: the last, host:2:bbb, stopped \d+ s ago$/);
  store.close();
});

test('a cluster: a node lost with sandboxes fails the status; a replica gone, a node lost empty and orphans are warnings', async () => {
  const store = SqliteStore.open(':memory:');
  await store.replicas.beat(entry('ctl-a:1:aaa', 'control'));
  await store.replicas.beat(entry('ctl-b:1:bbb', 'control'), ago(60_000));
  await store.replicas.beat(entry('edge-a:1:ccc', 'edge'));
  await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 15_000);
  await store.nodes.heartbeat('node-a', { usage, warm: {}, layersDigest: null, orphans: 2 }, 15_000);
  await store.nodes.register({ id: 'node-b', url: 'http://10.0.0.2:7070', capacity }, 15_000, ago(60_000));
  await store.nodes.register({ id: 'node-c', url: 'http://10.0.0.3:7070', capacity }, 15_000, ago(600_000));
  await insertSandboxRow(store, 'sb1', 'node-b');
  await insertSandboxRow(store, 'sb2', 'node-a');
  const s = await clusterStatus(store);
  assert.equal(s.mode, 'cluster');
  assert.deepEqual(s.replicas.map((r) => [r.id, r.state]), [['ctl-a:1:aaa', 'up'], ['ctl-b:1:bbb', 'gone']]);
  assert.deepEqual(s.edges.map((r) => [r.id, r.state]), [['edge-a:1:ccc', 'up']]);
  assert.deepEqual(s.nodes.map((n) => [n.id, n.up]), [['node-a', true], ['node-b', false], ['node-c', false]]);
  assert.equal(s.verdict, 'degraded');
  assert.equal(s.problems.length, 1);
  assert.match(s.problems[0]!, /^node node-b is lost: its last heartbeat was 60 s ago, with 1 sandbox\(es\) on it/);
  assert.equal(s.warnings.length, 3, s.warnings.join('\n'));
  assert.match(s.warnings.join('\n'), /control ctl-b:1:bbb .* is gone/);
  assert.match(s.warnings.join('\n'), /node node-c is lost: its last heartbeat was 10 min ago \(no sandbox on it/);
  assert.match(s.warnings.join('\n'), /node node-a holds 2 sandbox\(es\) that no record and no control replica owns/);
  assert.equal(s.orphans, 2);
  store.close();
});

test('a cluster whose nodes cannot take a sandbox, or whose control is gone, fails', async () => {
  const store = SqliteStore.open(':memory:');
  await store.replicas.beat(entry('ctl-a:1:aaa', 'control'));
  await store.nodes.register({ id: 'node-a', url: 'http://10.0.0.1:7070', capacity }, 15_000);
  await store.nodes.setStatus('node-a', 'cordoned');
  let s = await clusterStatus(store);
  assert.deepEqual(s.problems, ['no active node is up: sandboxes cannot be created']);
  assert.equal(s.orphans, null, 'no node counts them');
  await store.nodes.setStatus('node-a', 'active');
  assert.equal((await clusterStatus(store)).verdict, 'ok');

  await store.replicas.beat(entry('ctl-a:1:aaa', 'control'), ago(30_000));
  s = await clusterStatus(store);
  assert.equal(s.verdict, 'down');
  assert.match(s.problems[0]!, /^no control replica is up: the last, ctl-a:1:aaa, was seen 30 s ago$/);
  store.close();
});
