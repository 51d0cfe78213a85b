import assert from 'node:assert/strict';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { ProcessTable, type ProcessEnd } from './processes.js';

const helper = join(dirname(fileURLToPath(import.meta.url)), '../../bundle/sbx-helper');
const root = { name: 'root', uid: 0, gid: 0, home: '/root', shell: '/bin/sh' };
const spec = (script: string) => ({ config: { cmd: '/bin/sh', args: ['-c', script], envs: {} }, cwd: '/', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, user: root, stdin: false });
const ended = (p: { onEnd(h: () => void): void; ended: ProcessEnd | null }) => new Promise<ProcessEnd>((r) => p.onEnd(() => r(p.ended!)));

test('the output all processes keep stays within the budget: the largest rings give way', async () => {
  const table = new ProcessTable(helper, 64 * 1024);
  const a = await table.start(spec('head -c 100000 /dev/zero'));
  const b = await table.start(spec('head -c 30000 /dev/zero; sleep 0.2; head -c 30000 /dev/zero'));
  await Promise.all([ended(a), ended(b)]);
  assert.ok(table.keptBytes <= 64 * 1024, `${table.keptBytes} bytes kept`);
  assert.equal(table.keptBytes, a.ring.total + b.ring.total);
  assert.ok(b.ring.total > 0 && a.ring.total > 0);
});

test('a tag names one running process; the same tag twice is refused while it runs', async () => {
  const table = new ProcessTable(helper);
  const p = await table.start({ ...spec('sleep 5'), tag: 't' });
  await assert.rejects(table.start({ ...spec('true'), tag: 't' }), /already has tag/);
  assert.equal(table.find({ tag: 't' }).pid, p.pid);
  p.signal('SIGTERM');
  const end = await ended(p);
  assert.deepEqual([end.exited, end.status], [false, 'signal: terminated']);
  assert.throws(() => table.find({ tag: 't' }), /not found/);
  assert.equal(table.find({ tag: 't' }, true).pid, p.pid, 'Connect still finds it for a while');
});
