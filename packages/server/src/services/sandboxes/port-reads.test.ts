import { test } from 'node:test';
import assert from 'node:assert/strict';
import { PORTS_FRESH_MS, PortReads } from './port-reads.js';
import type { ListeningPort } from '../../runtime/listening.js';

const port = (p: number): ListeningPort => ({ port: p, address: '0.0.0.0', family: 4 });

/** A read that finishes when told, counting how many ran and how many ran at once. */
function reads() {
  const pending: Array<() => void> = [];
  const s = { started: 0, running: 0, most: 0, pending };
  const read = (value: ListeningPort[]) => () =>
    new Promise<ListeningPort[]>((resolve) => {
      s.started++;
      s.running++;
      s.most = Math.max(s.most, s.running);
      pending.push(() => {
        s.running--;
        resolve(value);
      });
    });
  return { s, read };
}

const tick = () => new Promise((r) => setImmediate(r));

test('callers of one sandbox share one read while it runs and for PORTS_FRESH_MS after; then it is read again', async () => {
  let now = 1000;
  const r = new PortReads(() => now);
  const { s, read } = reads();
  const calls = Array.from({ length: 16 }, () => r.get('org', 'sb1', read([port(3000)])));
  await tick();
  assert.equal(s.started, 1, '16 parallel callers, one read');
  s.pending.shift()!();
  for (const c of calls) assert.deepEqual(await c, [port(3000)]);
  now += PORTS_FRESH_MS - 1;
  assert.deepEqual(await r.get('org', 'sb1', read([port(1)])), [port(3000)], 'still fresh');
  assert.equal(s.started, 1);
  now += 1;
  const again = r.get('org', 'sb1', read([port(4000)]));
  await tick();
  assert.equal(s.started, 2, 'stale: read again');
  s.pending.shift()!();
  assert.deepEqual(await again, [port(4000)]);
});

test("an organization's reads run one at a time; another organization's do not wait for them", async () => {
  const r = new PortReads();
  const { s, read } = reads();
  const mine = [1, 2, 3].map((i) => r.get('a', `sb${i}`, read([port(i)])));
  await tick();
  assert.equal(s.started, 1, "the organization's second read waits for its first");
  const other = r.get('b', 'sbx', read([port(9)]));
  await tick();
  assert.equal(s.started, 2, "another organization's read starts at once");
  s.pending.splice(1, 1)[0]!();
  assert.deepEqual(await other, [port(9)]);
  for (let i = 0; i < 3; i++) {
    await tick();
    s.pending.shift()!();
  }
  assert.deepEqual(await Promise.all(mine), [[port(1)], [port(2)], [port(3)]]);
  assert.equal(s.most, 2, 'never more than one read of organization a at a time');
});

test('a failed read is not kept: the next caller asks again; a later read of the organization is not held up by it', async () => {
  const r = new PortReads();
  await assert.rejects(r.get('a', 'sb1', () => Promise.reject(new Error('node away'))), /node away/);
  assert.deepEqual(await r.get('a', 'sb1', () => Promise.resolve([port(80)])), [port(80)]);
  r.forget('sb1');
  assert.deepEqual(await r.get('a', 'sb1', () => Promise.resolve([port(81)])), [port(81)], 'forgotten: read again');
});
