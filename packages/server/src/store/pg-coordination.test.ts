import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import { PostgresStore } from './postgres.js';
import { startPostgres, type TestPostgres } from '../testing/postgres.js';

let server: TestPostgres;
const opened: PostgresStore[] = [];

before(async () => {
  server = await startPostgres();
});

after(async () => {
  await Promise.all(opened.map((s) => s.end()));
  await server?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('waiting for a named lock is not a query that times out: a replica that starts while another reconciles for longer than the query timeout waits, it does not fail its start', async () => {
  const url = await server.createDatabase();
  const [a, b] = await Promise.all([PostgresStore.open(url, { queryTimeoutMs: 400 }), PostgresStore.open(url, { queryTimeoutMs: 400 })]);
  opened.push(a, b);
  const order: string[] = [];
  const first = a.coordination.exclusive('reconcile', async () => {
    order.push('a in');
    await sleep(1500);
    order.push('a out');
  });
  await sleep(100);
  const second = b.coordination.exclusive('reconcile', async () => {
    order.push('b in');
    return 'b ran';
  });
  assert.equal(await second, 'b ran');
  await first;
  assert.deepEqual(order, ['a in', 'a out', 'b in']);
});

test('a lock waited for and then given up (the store closes) leaves no lock and no connection held', async () => {
  const url = await server.createDatabase();
  const [a, b] = await Promise.all([PostgresStore.open(url), PostgresStore.open(url, { maxConnections: 2 })]);
  opened.push(a);
  let release!: () => void;
  const held = a.coordination.exclusive('sweep', () => new Promise<void>((r) => (release = r)));
  await sleep(100);
  const waiting = b.coordination.exclusive('sweep', async () => 'ran');
  waiting.catch(() => undefined);
  await sleep(300);
  await b.end();
  await assert.rejects(waiting);
  release();
  await held;
  // Nobody holds it now: a third store takes it at once.
  const c = await PostgresStore.open(url);
  opened.push(c);
  assert.deepEqual(await c.coordination.tryExclusive('sweep', async () => 1), { ran: true, value: 1 });
});

test("a lock's connection has the server's keepalives short: a holder that vanishes without closing loses the lock in seconds, not hours", async () => {
  const url = await server.createDatabase();
  const a = await PostgresStore.open(url);
  opened.push(a);
  const port = new URL(url).port;
  // The server's end of each connection, with its keepalive timer ("timer:(keepalive,119min,0)" by
  // default; under a minute, ss prints it in seconds or milliseconds, as its version likes).
  const timers = () =>
    execFileSync('ss', ['-tnoH', 'state', 'established', `( sport = :${port} )`], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.includes('timer:(keepalive,'));
  const short = (l: string) => !/timer:\(keepalive,\d+min/.test(l);
  for (const take of [(fn: () => Promise<string[]>) => a.coordination.exclusive('sweep', fn), async (fn: () => Promise<string[]>) => {
    const r = await a.coordination.tryExclusive('sweep', fn);
    assert.ok(r.ran);
    return r.value;
  }]) {
    const seen = await take(async () => {
      // The keepalive timer runs once the connection is idle.
      await sleep(200);
      return timers();
    });
    assert.ok(seen.some(short), `a connection with a keepalive timer under a minute among the server's:\n${seen.join('\n')}`);
  }
});
