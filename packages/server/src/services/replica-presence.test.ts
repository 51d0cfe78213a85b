import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import type { ReplicaRepo } from '../store/types/index.js';
import { REPLICA_GONE_MS, ReplicaPresence, replicaState } from './replica-presence.js';

test('a serving process records itself, beats, and says it stopped', async () => {
  const store = SqliteStore.open(':memory:');
  const presence = new ReplicaPresence({ replicas: store.replicas, role: 'control', url: 'http://10.0.0.2:8080', version: '9.9.9', log: () => undefined, everyMs: 20 });
  await presence.start();
  const first = (await store.replicas.list()).replicas;
  assert.deepEqual(first.map((r) => [r.id, r.role, r.hostname, r.pid, r.url, r.version, r.stoppedAt]), [[presence.id, 'control', hostname(), process.pid, 'http://10.0.0.2:8080', '9.9.9', null]]);
  assert.match(presence.id, new RegExp(`^${hostname()}:${process.pid}:[0-9a-f]{6}$`));
  await new Promise((r) => setTimeout(r, 100));
  const later = (await store.replicas.list()).replicas[0]!;
  assert.ok(later.seenAt > first[0]!.seenAt, 'it beat again');
  assert.equal(later.startedAt, first[0]!.startedAt);
  await presence.stop();
  const stopped = (await store.replicas.list()).replicas[0]!;
  assert.ok(stopped.stoppedAt);
  await new Promise((r) => setTimeout(r, 60));
  assert.equal((await store.replicas.list()).replicas[0]!.seenAt, stopped.seenAt, 'no beat after the stop');
  store.close();
});

test('a store that refuses the beats costs no start; the failure is said once, and the recovery', async () => {
  const lines: string[] = [];
  let down = true;
  const store = SqliteStore.open(':memory:');
  const replicas: ReplicaRepo = {
    ...store.replicas,
    beat: async (e, now) => {
      if (down) throw new Error('the store is away');
      return store.replicas.beat(e, now);
    },
    forget: (b) => store.replicas.forget(b),
    stopped: (id, now) => store.replicas.stopped(id, now),
    list: () => store.replicas.list(),
  };
  const presence = new ReplicaPresence({ replicas, role: 'edge', url: 'http://10.0.0.3:8082', version: '1', log: (m) => lines.push(m), everyMs: 10 });
  await presence.start();
  await new Promise((r) => setTimeout(r, 80));
  assert.deepEqual(lines, ['recording this edge process in the store failed: Error: the store is away']);
  down = false;
  await new Promise((r) => setTimeout(r, 50));
  assert.match(lines[1] ?? '', /^this edge process is recorded in the store again \(\d+ beat\(s\) missed\)$/);
  assert.equal(lines.length, 2);
  assert.equal((await store.replicas.list()).replicas.length, 1);
  await presence.stop();
  store.close();
});

test('up while seen within the window, gone past it, stopped when it said so', () => {
  const now = Date.parse('2030-01-01T00:01:00.000Z');
  const at = (ms: number) => new Date(now - ms).toISOString();
  assert.equal(replicaState({ seenAt: at(REPLICA_GONE_MS - 1000), stoppedAt: null }, now), 'up');
  assert.equal(replicaState({ seenAt: at(REPLICA_GONE_MS + 1000), stoppedAt: null }, now), 'gone');
  assert.equal(replicaState({ seenAt: at(0), stoppedAt: at(0) }, now), 'stopped');
});
