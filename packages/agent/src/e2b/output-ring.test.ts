import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OutputRing } from './output-ring.js';

const text = (r: OutputRing) => r.snapshot().map((c) => `${c.kind}:${c.data.toString()}`);

test('the ring keeps the newest bytes of each stream, in arrival order across streams', () => {
  const r = new OutputRing(6);
  r.push('stdout', Buffer.from('abc'));
  r.push('stderr', Buffer.from('XY'));
  r.push('stdout', Buffer.from('def'));
  assert.deepEqual(text(r), ['stdout:abc', 'stderr:XY', 'stdout:def']);
  r.push('stdout', Buffer.from('gh'));
  // stdout over 6 bytes: its oldest bytes go, stderr's stay.
  assert.deepEqual(text(r), ['stdout:c', 'stderr:XY', 'stdout:def', 'stdout:gh']);
  assert.deepEqual([r.size('stdout'), r.size('stderr'), r.dropped.stdout], [6, 2, 2]);
  r.push('stderr', Buffer.from('0123456789'));
  assert.deepEqual(text(r), ['stdout:c', 'stdout:def', 'stdout:gh', 'stderr:456789']);
});

test('a long-running chatty process costs at most the cap per stream', () => {
  const r = new OutputRing(1024);
  for (let i = 0; i < 100_000; i++) r.push(i % 3 === 0 ? 'stderr' : 'stdout', Buffer.from(`line ${i}\n`));
  assert.ok(r.size('stdout') <= 1024 && r.size('stderr') <= 1024);
  const all = r.snapshot();
  assert.ok(all.length < 400, `${all.length} chunks kept`);
  assert.match(all.at(-1)!.data.toString(), /line 99999/);
});

test('trimTo drops the oldest output of any stream and reports what it frees', () => {
  let kept = 0;
  const r = new OutputRing(100, (d) => (kept += d));
  r.push('stdout', Buffer.from('aaaa'));
  r.push('stderr', Buffer.from('bbbb'));
  r.push('stdout', Buffer.from('cccc'));
  assert.equal(kept, 12);
  r.trimTo(6);
  assert.deepEqual(text(r), ['stderr:bb', 'stdout:cccc']);
  assert.equal(kept, 6);
  r.trimTo(0);
  assert.deepEqual([text(r), kept, r.total], [[], 0, 0]);
});
