import { test } from 'node:test';
import assert from 'node:assert/strict';
import { newProcessId, ProcessRegistry, type ProcessEntry } from './registry.js';

function entry(background: boolean): ProcessEntry {
  return { id: newProcessId(), name: 'n', kind: 'execute', background, language: 'python', startedAt: new Date(), endedAt: null, status: 'running', exitCode: null, pid: 1, proc: null };
}

test('running first, then the last 100 finished, newest first; output kept for background ones only', () => {
  const r = new ProcessRegistry();
  const running = entry(true);
  r.add(running);
  const ids: string[] = [];
  for (let i = 0; i < 120; i++) {
    const e = entry(i % 2 === 0);
    r.add(e);
    r.finish(e, 'completed', 0, { stdout: `out${i}`, stderr: '', truncated: false });
    ids.push(e.id);
  }
  const list = r.list();
  assert.equal(list.length, 101);
  assert.equal(list[0]!.process_id, running.id);
  assert.equal(list[0]!.status, 'running');
  assert.equal(list[1]!.process_id, ids[119]);
  assert.equal(r.get(ids[0]!), undefined, 'the oldest fell off');
  assert.equal(list.find((p) => p.process_id === ids[118])!.stdout, 'out118');
  assert.equal(list.find((p) => p.process_id === ids[119])!.stdout, undefined, 'foreground output is not kept');
  assert.equal(r.activeCount, 1);
  for (const p of list) {
    assert.equal(p.execution_id, p.process_id);
    assert.equal(p.started_at, p.start_time);
  }
});

test('kept output is bounded per stream and in total', () => {
  const r = new ProcessRegistry();
  const big = 'x'.repeat(3 * 1024 * 1024);
  const es: ProcessEntry[] = [];
  for (let i = 0; i < 12; i++) {
    const e = entry(true);
    r.add(e);
    r.finish(e, 'completed', 0, { stdout: big, stderr: big, truncated: false });
    es.push(e);
  }
  const newest = r.get(es[11]!.id)!;
  assert.equal(newest.stdout!.length, 1024 * 1024);
  assert.equal(newest.truncated, true);
  const kept = es.reduce((n, e) => n + (r.get(e.id)!.stdout!.length + r.get(e.id)!.stderr!.length), 0);
  assert.ok(kept <= 8 * 1024 * 1024, `kept ${kept}`);
});

test("a background process with an output log: its record reads the log (its tail), nothing is held twice; finished logs are bounded in total", async () => {
  const { OutputLog } = await import('./output-log.js');
  const r = new ProcessRegistry(3 * 1024 * 1024);
  const es: ProcessEntry[] = [];
  for (let i = 0; i < 5; i++) {
    const e = entry(true);
    e.output = new OutputLog(1024 * 1024);
    r.add(e);
    e.output.write('stdout', Buffer.from(`start ${i}\n`));
    e.output.write('stdout', Buffer.alloc(1024 * 1024, 'x'));
    e.output.write('stdout', Buffer.from(`end ${i}\n`));
    r.finish(e, 'completed', 0, { stdout: '', stderr: '', truncated: true });
    es.push(e);
  }
  const newest = r.list()[0]!;
  assert.equal(newest.process_id, es[4]!.id);
  assert.ok(newest.stdout!.endsWith('end 4\n'));
  assert.equal(newest.stdout!.length, 1024 * 1024);
  assert.equal(newest.truncated, true);
  assert.equal(es[4]!.stdout, undefined, 'no second copy');
  // 5 logs of 1 MiB over a 3 MiB budget: the oldest two are emptied, their offsets kept.
  assert.deepEqual(es.map((e) => e.output!.keptBytes > 0), [false, false, true, true, true]);
  assert.equal(es[0]!.output!.read(0).lostBytes, es[0]!.output!.end);
});
