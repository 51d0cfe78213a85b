import assert from 'node:assert/strict';
import { test } from 'node:test';
import { OutputLog, type LogItem } from './output-log.js';

const text = (items: LogItem[]) => items.map((i) => (i.kind === 'output' ? `${i.stream[3]}:${i.data.toString()}` : `lost ${i.bytes}`)).join('|');

test('one offset sequence over both streams; a read from any offset goes on exactly', () => {
  const log = new OutputLog(1024);
  log.write('stdout', Buffer.from('hello '));
  log.write('stderr', Buffer.from('oops\n'));
  log.write('stdout', Buffer.from('world\n'));
  assert.equal(log.end, 17);
  assert.equal(log.start, 0);
  const all = log.read(0);
  assert.equal(text(all.items), 'o:hello |e:oops\n|o:world\n');
  assert.deepEqual(all.items.map((i) => i.offset), [0, 6, 11]);
  assert.equal(all.next, 17);
  assert.equal(all.lostBytes, 0);
  // From the middle of a chunk, and in small reads that add up to the whole.
  assert.equal(text(log.read(8).items), 'e:ps\n|o:world\n');
  let pos = 0;
  let got = '';
  while (pos < log.end) {
    const r = log.read(pos, 4);
    got += r.items.map((i) => (i.kind === 'output' ? i.data.toString() : '')).join('');
    assert.ok(r.next > pos);
    pos = r.next;
  }
  assert.equal(got, 'hello oops\nworld\n');
  assert.equal(log.read(17).items.length, 0);
  assert.throws(() => log.read(18), RangeError);
  assert.throws(() => log.read(-1), RangeError);
});

test('consecutive writes of one stream read as one piece', () => {
  const log = new OutputLog(1024);
  for (let i = 0; i < 100; i++) log.write('stdout', Buffer.from(`${i}\n`));
  const r = log.read(0);
  assert.equal(r.items.length, 1);
  assert.equal(r.items[0]!.kind === 'output' && r.items[0]!.data.toString().split('\n').length, 101);
});

test('each stream is capped on its own, oldest bytes first; a reader learns how many it lost', () => {
  const log = new OutputLog(10);
  log.write('stderr', Buffer.from('E1\n')); // offset 0..3, kept: stderr holds 3 of its 10
  for (let i = 0; i < 5; i++) log.write('stdout', Buffer.from(`line${i}\n`)); // 6 bytes each, 3..33
  assert.equal(log.end, 33);
  assert.equal(log.keptBytes, 3 + 10);
  assert.equal(log.start, 0, 'the early stderr line is still kept');
  const r = log.read(0);
  assert.equal(text(r.items), 'e:E1\n|lost 20|o:ne3\nline4\n');
  assert.equal(r.lostBytes, 20);
  assert.equal(r.next, 33);
  // A reader that was already past the gap loses nothing.
  assert.equal(log.read(27).lostBytes, 0);
  // Past the cap on stderr too: now the front is gone.
  log.write('stderr', Buffer.from('0123456789AB'));
  assert.equal(log.start, 23);
  assert.equal(text(log.read(0).items), 'lost 23|o:ne3\nline4\n|lost 2|e:23456789AB');
  const r2 = log.read(0);
  assert.equal(r2.items[0]!.kind, 'lost');
  assert.equal(r2.items[0]!.offset, 0);
  assert.equal(r2.lostBytes, log.end - log.keptBytes);
  assert.equal(log.keptBytes, 20);
});

test('a write larger than the cap keeps its tail', () => {
  const log = new OutputLog(8);
  log.write('stdout', Buffer.from('abcdefghijklmnop'));
  assert.equal(log.end, 16);
  assert.equal(log.start, 8);
  const r = log.read(0);
  assert.equal(text(r.items), 'lost 8|o:ijklmnop');
  assert.equal(r.items[1]!.offset, 8);
});

test('characters are never split: held until complete, dropped whole, cut whole', () => {
  const log = new OutputLog(1024);
  const euro = Buffer.from('€'); // 3 bytes
  log.write('stdout', Buffer.from([0x61, euro[0]!]));
  assert.equal(log.end, 1, 'half a character waits');
  log.write('stdout', Buffer.from([euro[1]!, euro[2]!, 0x62]));
  assert.equal(log.end, 5);
  assert.equal(text(log.read(0).items), 'o:a€b');
  // A read whose budget ends inside a character stops before it; the next read starts at it.
  const r = log.read(0, 2);
  assert.equal(text(r.items), 'o:a');
  assert.equal(r.next, 1);
  assert.equal(text(log.read(r.next, 1).items), 'o:€', 'at least one whole character');
  // A dropped front never leaves half a character.
  const small = new OutputLog(4);
  small.write('stdout', Buffer.from('x€€'));
  assert.equal(text(small.read(0).items), 'lost 4|o:€');
  // Close takes what was held.
  log.write('stdout', Buffer.from([0xe2, 0x82]));
  log.close();
  assert.equal(log.end, 7);
});

test('followers are told of writes and of the close; release keeps the offsets', () => {
  const log = new OutputLog(64);
  let calls = 0;
  const stop = log.follow(() => calls++);
  log.write('stdout', Buffer.from('a'));
  log.write('stderr', Buffer.from('b'));
  stop();
  log.write('stdout', Buffer.from('c'));
  assert.equal(calls, 2);
  log.close();
  assert.equal(log.closed, true);
  log.write('stdout', Buffer.from('ignored'));
  assert.equal(log.end, 3);
  log.release();
  assert.equal(log.keptBytes, 0);
  const r = log.read(1);
  assert.deepEqual(r.items, [{ kind: 'lost', offset: 1, bytes: 2 }]);
  assert.equal(r.next, 3);
});

test('a flood in small writes stays within its cap and its block memory', () => {
  const cap = 64 * 1024;
  const log = new OutputLog(cap);
  const line = Buffer.from('0123456789abcdef0123456789abcdef\n');
  for (let i = 0; i < 50_000; i++) log.write(i % 10 === 0 ? 'stderr' : 'stdout', line);
  assert.ok(log.keptBytes <= 2 * cap, `${log.keptBytes}`);
  assert.equal(log.end, 50_000 * line.length);
  const r = log.read(0);
  assert.equal(r.lostBytes + r.items.reduce((n, i) => n + (i.kind === 'output' ? i.data.length : 0), 0), log.end);
  // Whole lines survive (drops cut at a character, and every kept line ends where it should).
  const tail = log.read(log.end - 10 * line.length);
  assert.equal(tail.lostBytes, 0);
});

test("tail: a stream's last bytes as text, and whether that is all it wrote", () => {
  const log = new OutputLog(8);
  log.write('stdout', Buffer.from('abc'));
  log.write('stderr', Buffer.from('E'));
  log.write('stdout', Buffer.from('def'));
  assert.deepEqual(log.tail('stdout', 100), { text: 'abcdef', truncated: false });
  assert.deepEqual(log.tail('stdout', 4), { text: 'cdef', truncated: true });
  assert.deepEqual(log.tail('stderr', 100), { text: 'E', truncated: false });
  log.write('stdout', Buffer.from('ghijk'));
  assert.deepEqual(log.tail('stdout', 100), { text: 'defghijk', truncated: true });
  const wide = new OutputLog(64);
  wide.write('stdout', Buffer.from('a€'));
  assert.deepEqual(wide.tail('stdout', 2), { text: '', truncated: true }, 'never half a character');
});
