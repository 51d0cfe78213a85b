import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ResultCache } from './results.js';

test('keys cover language, code, env and working directory; env order does not matter', () => {
  const k = (o: Partial<Parameters<typeof ResultCache.key>[0]>) => ResultCache.key({ language: 'python', code: 'x', env: { A: '1', B: '2' }, cwd: '/w', ...o });
  assert.equal(k({}), k({ env: { B: '2', A: '1' } }));
  for (const other of [k({ language: 'bash' }), k({ code: 'y' }), k({ env: { A: '1' } }), k({ cwd: '/tmp' })]) assert.notEqual(other, k({}));
});

test('LRU by entries and bytes, hits and misses counted, TTL honoured', async () => {
  const c = new ResultCache<string>(2, 1000, 50);
  c.set('a', 'A', 10);
  c.set('b', 'B', 10);
  assert.equal(c.get('a'), 'A'); // a is now the most recent
  c.set('c', 'C', 10);
  assert.equal(c.get('b'), undefined, 'b was least recently used');
  assert.equal(c.get('a'), 'A');
  assert.equal(c.size, 2);
  c.set('huge', 'H', 600);
  assert.equal(c.get('huge'), undefined, 'entries over a quarter of the budget are not cached');
  assert.equal(c.hits, 2);
  assert.equal(c.misses, 2);
  await new Promise((r) => setTimeout(r, 60));
  assert.equal(c.get('a'), undefined, 'expired');
  assert.equal(c.clear(), 1);
});
