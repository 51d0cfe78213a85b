import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { SqliteStore } from '../store/sqlite.js';
import { fileBuildLogs, LOG_ROW_BYTES, storeBuildLogs, STORE_LOG_GATHER_MS } from './build-logs.js';
import { BuildLogWriter } from './template-builds/index.js';

const dir = mkdtempSync(join(tmpdir(), 'sbd-build-logs-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('a step printing a million lines over a second makes a few dozen writes, every line kept in order', async () => {
  const writes: string[] = [];
  let wakes = 0;
  const writer = new BuildLogWriter(
    async (text) => {
      writes.push(text);
      await new Promise((r) => setTimeout(r, 2));
    },
    () => wakes++,
    STORE_LOG_GATHER_MS,
  );
  const started = Date.now();
  for (let burst = 0; burst < 100; burst++) {
    for (let i = 0; i < 10_000; i++) writer.write(String(i % 10));
    await new Promise((r) => setTimeout(r, 10));
  }
  await writer.flushed();
  const seconds = (Date.now() - started) / 1000;
  const text = writes.join('');
  assert.equal(text.length, 2_000_000);
  assert.equal(text.slice(0, 20), '0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n');
  // At most one write per gathering period, and one to end with.
  assert.ok(writes.length <= Math.ceil((seconds * 1000) / STORE_LOG_GATHER_MS) + 1, `${writes.length} writes in ${seconds} s`);
  assert.ok(writes.length >= 2, 'written as it comes, not all at the end');
  assert.equal(wakes, writes.length);
});

test('a log in the store is kept in rows of at most LOG_ROW_BYTES, and reads back whole from any offset', async () => {
  const store = SqliteStore.open(':memory:');
  try {
    const logs = storeBuildLogs(store);
    const line = `${'é'.repeat(99)}\n`;
    const text = line.repeat(Math.ceil((2.5 * LOG_ROW_BYTES) / Buffer.byteLength(line)));
    await logs.append('tpl_a', text);
    const rows = store.db.prepare('SELECT octet_length(data) AS n FROM build_logs WHERE build_id = ? ORDER BY start_offset').all('tpl_a') as Array<{ n: number }>;
    assert.equal(rows.length, 3);
    assert.ok(rows.every((r) => r.n <= LOG_ROW_BYTES));
    const size = Buffer.byteLength(text);
    const back = await logs.read('tpl_a', 0, size);
    assert.equal(back.size, size);
    assert.equal(back.data.toString('utf8'), text, 'a character cut between rows comes back whole');
    const mid = LOG_ROW_BYTES - 7;
    assert.deepEqual((await logs.read('tpl_a', mid, 100)).data, Buffer.from(text).subarray(mid, mid + 100));
    assert.deepEqual(await logs.read('tpl_a', size + 5, 100), { data: Buffer.alloc(0), size });
  } finally {
    store.close();
  }
});

test('one machine: a log is a file of its own (0600) read from any offset', async () => {
  const logs = fileBuildLogs(join(dir, 'build-logs'));
  await logs.append('tpl_b', 'one\ntwo\n');
  await logs.append('tpl_b', 'three\n');
  assert.equal(statSync(join(dir, 'build-logs', 'tpl_b.log')).mode & 0o777, 0o600);
  assert.equal(statSync(join(dir, 'build-logs')).mode & 0o777, 0o700);
  assert.deepEqual(await logs.read('tpl_b', 4, 100), { data: Buffer.from('two\nthree\n'), size: 14 });
  assert.deepEqual(await logs.read('tpl_b', 20, 100), { data: Buffer.alloc(0), size: 14 });
  assert.deepEqual(await logs.read('tpl_none', 0, 100), { data: Buffer.alloc(0), size: 0 });
});
