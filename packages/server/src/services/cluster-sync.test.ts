import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Coordination } from '../store/types/index.js';
import { ClusterSync } from './cluster-sync.js';
import { EventBus, type SandboxEventMessage } from './events.js';
import { RouteTable } from '../gateway/routes.js';

/** A bus whose messages the test sends itself, handed to the subscriber as they are (no guard around it). */
function fakeBus() {
  let handler: ((payload: string) => void) | undefined;
  const coordination: Coordination = {
    exclusive: (_name, fn) => fn(),
    tryExclusive: async (_name, fn) => ({ ran: true, value: await fn() }),
    publish: async () => undefined,
    subscribe: (_channel, fn) => {
      handler = fn;
      return () => (handler = undefined);
    },
    onReconnect: () => () => undefined,
    listening: () => true,
    close: async () => undefined,
  };
  return { coordination, send: (payload: string) => handler!(payload) };
}

test('a malformed or hostile message on the bus is dropped, never thrown at the listener nor delivered', () => {
  const bus = fakeBus();
  const events = new EventBus();
  const delivered: SandboxEventMessage[] = [];
  events.deliver = (m) => void delivered.push(m);
  const activity: Array<[string, number]> = [];
  const interrupts: string[] = [];
  const forgotten: string[] = [];
  const routes = new RouteTable();
  routes.forget = (id) => void forgotten.push(id);
  const sync = new ClusterSync({
    coordination: bus.coordination,
    routes,
    events,
    activity: (id, at) => activity.push([id, at]),
    interrupt: (id) => interrupts.push(id),
    busy: () => [],
    log: () => undefined,
  });
  try {
    const data = { id: 'sbabc', status: 'running', at: '2024-01-01T00:00:00Z' };
    const hostile = [
      '',
      'not json',
      'null',
      '[]',
      '"route"',
      JSON.stringify({ t: 'route', id: 'sbabc' }),
      JSON.stringify({ o: 'peer', t: 'route', id: '../../etc' }),
      JSON.stringify({ o: 'peer', t: 'route', id: 'x'.repeat(65) }),
      JSON.stringify({ o: 'peer', t: 'interrupt', id: { toString: 1 } }),
      JSON.stringify({ o: 'peer', t: 'activity', id: 'sbabc', at: '1' }),
      JSON.stringify({ o: 'peer', t: 'activity', id: 'sbabc', at: null }),
      // String() of an object whose toString is not a function throws.
      JSON.stringify({ o: 'peer', t: 'event', m: { orgId: 'org', kind: { toString: 1 }, data } }),
      JSON.stringify({ o: 'peer', t: 'event', m: { orgId: 'org', kind: { toString: 1, valueOf: 1 }, data } }),
      JSON.stringify({ o: 'peer', t: 'event', m: { orgId: 'org', kind: 'created', data: { ...data, id: { toString: 1 } } } }),
      JSON.stringify({ o: 'peer', t: 'event', m: { orgId: 'org', kind: 'created', data: { ...data, id: 'not an id!' } } }),
      JSON.stringify({ o: 'peer', t: 'event', m: { orgId: 'org', kind: 'exploded', data } }),
      JSON.stringify({ o: 'peer', t: 'event', m: null }),
      JSON.stringify({ o: 'peer', t: 'nonsense', id: 'sbabc' }),
    ];
    for (const p of hostile) assert.doesNotThrow(() => bus.send(p), `message ${p}`);
    assert.deepEqual({ delivered, activity, interrupts, forgotten }, { delivered: [], activity: [], interrupts: [], forgotten: [] });

    // Its own messages come back to it, and are ignored.
    bus.send(JSON.stringify({ o: sync.origin, t: 'route', id: 'sbabc' }));
    assert.deepEqual(forgotten, []);

    // Well-formed ones do their work; a use in the future counts as now.
    const future = Date.now() + 3_600_000;
    bus.send(JSON.stringify({ o: 'peer', t: 'route', id: 'sbabc' }));
    bus.send(JSON.stringify({ o: 'peer', t: 'interrupt', id: 'sbabc' }));
    bus.send(JSON.stringify({ o: 'peer', t: 'activity', id: 'sbabc', at: future }));
    bus.send(JSON.stringify({ o: 'peer', t: 'event', m: { orgId: 'org', kind: 'created', data, extra: 'dropped' } }));
    assert.deepEqual(forgotten, ['sbabc']);
    assert.deepEqual(interrupts, ['sbabc']);
    assert.equal(activity.length, 1);
    assert.ok(activity[0]![1] <= Date.now());
    assert.deepEqual(delivered, [{ kind: 'created', orgId: 'org', data }]);
  } finally {
    sync.close();
  }
});
