import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WatchRecordParser } from '../files/watch-records.js';

test('watch records are parsed across any chunk boundary, unicode and all', () => {
  const raw = Buffer.from('ready\0d\0/workspace\0\0created\0f\0/workspace/ü ✓.txt\0\0renamed\0d\0/workspace/b\0/workspace/a\0', 'utf8');
  const expected = [
    { event: 'ready', isDir: true, path: '/workspace', oldPath: '' },
    { event: 'created', isDir: false, path: '/workspace/ü ✓.txt', oldPath: '' },
    { event: 'renamed', isDir: true, path: '/workspace/b', oldPath: '/workspace/a' },
  ];
  for (let size = 1; size <= raw.length; size++) {
    const p = new WatchRecordParser();
    const got = [];
    for (let i = 0; i < raw.length; i += size) got.push(...p.push(raw.subarray(i, i + size)));
    assert.deepEqual(got, expected, `chunks of ${size}`);
  }
});
